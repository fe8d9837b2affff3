"""``python -m posenc.bench``: the command, and the worker subprocesses' entry point."""

from .command import main

raise SystemExit(main())
