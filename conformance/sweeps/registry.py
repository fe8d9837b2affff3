"""The engine sweeps posenc has (engine -> its module under conformance/sweeps/) and whether a
recorded report was made by the sweep code here: what the command and the page both ask."""

from __future__ import annotations

from typing import Any

from .engine_report import code_hash

SWEEPS = {"mlx-lm": "mlx_lm", "vllm": "vllm", "llama.cpp": "llama_cpp"}  # engine -> module


def report_problem(engine: str, report: dict[str, Any]) -> str | None:
    """Why an engine's recorded report was not made by the sweep code here (None: it was)."""
    if engine not in SWEEPS:
        return None
    module = sweep_module(engine)
    version = report["versions"][engine]
    if report.get("code") != code_hash(module.sweep_files(), f"{engine} {version}"):
        return (f"the {engine} report was made by other sweep code (run `nox -s "
                f"sweep-{engine}`)")
    return None


def sweep_module(engine: str) -> Any:
    """The module under conformance/sweeps/ that sweeps ``engine``."""
    import importlib

    return importlib.import_module(f"{__package__}.{SWEEPS[engine]}")
