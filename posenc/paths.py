"""Where the spec and golden folders live, in a source checkout and in an installed wheel."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _locate(name: str, env: str) -> Path:
    override = os.environ.get(env)
    if override:
        return Path(override)
    inside = _PACKAGE / name  # wheel install: posenc/spec, posenc/golden
    if inside.is_dir():
        return inside
    return _PACKAGE.parent / name  # source checkout: spec/ and golden/ beside posenc/


def spec_dir() -> Path:
    """The folder holding ``<id>.yaml`` files and ``schema.json`` (``$POSENC_SPEC_DIR`` wins)."""
    return _locate("spec", "POSENC_SPEC_DIR")


def shipped_spec_dir() -> Path:
    """The spec folder that ships with this posenc, whatever ``$POSENC_SPEC_DIR`` says."""
    inside = _PACKAGE / "spec"
    return inside if inside.is_dir() else _PACKAGE.parent / "spec"


def golden_dir() -> Path:
    """The folder holding ``<id>.npz`` goldens and ``manifest.json`` (``$POSENC_GOLDEN_DIR`` wins)."""
    return _locate("golden", "POSENC_GOLDEN_DIR")


def compile_cache_dir(framework: str) -> Path | None:
    """Where the harness keeps ``framework``'s persistent compilation cache across runs:
    ``$POSENC_CACHE_DIR/<framework>`` (default ``~/.cache/posenc/<framework>``); None when
    ``$POSENC_NO_COMPILE_CACHE`` is set (``posenc conformance --no-compile-cache``)."""
    if os.environ.get("POSENC_NO_COMPILE_CACHE", "") not in ("", "0"):
        return None
    root = os.environ.get("POSENC_CACHE_DIR") or Path.home() / ".cache" / "posenc"
    return Path(root) / framework
