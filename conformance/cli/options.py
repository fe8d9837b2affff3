"""One front door to the harness: the options of a run, built from what a user typed.

The CLI (``posenc conformance``) and the pytest plugin (``--posenc-*``) both build their
:class:`~posenc.conformance.runner.Options` here, so a flag means the same in either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.errors import PosencError

from ..runner import MODES, Options
from ..tiers import STANDARD_MAX_EXAMPLES

EXHAUSTIVE_MAX_EXAMPLES = 25


def load_expectations(path: str | None) -> dict[str, str]:
    """The check-id pattern -> reason mapping of an ``--expectations`` YAML file ({} for None)."""
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PosencError(f"--expectations {path}: cannot read: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, str) and v for v in data.values()):
        raise PosencError(f"--expectations {path}: expected a mapping of check-id pattern -> "
                          "reason (a non-empty string)")
    return {str(k): v for k, v in data.items()}


def build_options(*, backends: list[Any] | None = None, encodings: list[str] | None = None,
                  dtypes: list[str] | None = None, modes: list[str] | None = None,
                  device: str = "cpu", tier: str = "exhaustive", max_examples: int | None = None,
                  only: str | None = None, expectations: str | None = None,
                  skip: list[str] | None = None, compiled_cases: int | None = None,
                  precision: str | None = None, include_posenc_code: bool = False,
                  matmul_precision: str | None = None) -> Options:
    """Options from the values of the command-line flags (None: the flag was not given).
    ``only``: "cases", "properties" or "gradients" (None: all three); ``expectations``: the
    path of a YAML file; ``max_examples`` defaults by ``tier``; ``matmul_precision``: the
    framework setting checks run under (None: as the caller has it)."""
    if max_examples is None:
        max_examples = STANDARD_MAX_EXAMPLES if tier == "standard" else EXHAUSTIVE_MAX_EXAMPLES
    return Options(
        backends=list(backends or []), encodings=list(encodings or []),
        dtypes=list(dtypes or []), modes=list(modes or MODES), device=device or "cpu",
        tier=tier, max_examples=max_examples,
        cases=only in (None, "cases"), properties=only in (None, "properties"),
        gradients=only in (None, "gradients"),
        expectations=load_expectations(expectations), skip=list(skip or []),
        compiled_cases=compiled_cases, precision=precision or "exact",
        include_posenc_code=include_posenc_code,
        settings={"matmul_precision": matmul_precision} if matmul_precision else {})
