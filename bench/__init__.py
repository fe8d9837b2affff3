"""``posenc bench``: posenc against its rivals, the implementations a user would otherwise
pick, side by side. The command and how it times are described in :mod:`.command`.

Modules, each importing only those listed before it: sizes and rows (the types), timers and
engine (timing and running rows), workers (the subprocess protocol), inputs, rivals and ours
(what the rows call), suites/ (one module per suite), plan (the suite registry), report
(table, targets, JSON) and command (the CLI). None imports a framework at import time.
"""

from __future__ import annotations

from .command import add_arguments, main, main_args, run

__all__ = ["add_arguments", "main", "main_args", "run"]
