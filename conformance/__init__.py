"""posenc's conformance harness: checks a backend against the goldens and the declared properties.

``posenc conformance`` (the CLI) and ``pytest --pyargs posenc.conformance --posenc-backend NAME``
run the same checks, planned by :func:`plan` and executed by :func:`execute`.
"""

from __future__ import annotations

from .runner import Check, Options, Result, execute, plan, run

__all__ = ["Check", "Options", "Result", "execute", "plan", "run"]
