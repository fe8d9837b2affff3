"""posenc's conformance harness: checks a backend against the goldens and the declared properties.

``posenc conformance`` (the CLI) and ``pytest --pyargs posenc.conformance --posenc-backend NAME``
run the same checks, planned and executed by :class:`Runner` (:func:`run` does both).
"""

from __future__ import annotations

from .checking import CheckReport, check
from .runner import Check, Options, Result, Runner, plan, run

__all__ = ["Check", "CheckReport", "Options", "Result", "Runner", "check", "plan", "run"]
