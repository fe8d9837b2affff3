"""The settings of one ``posenc conformance`` run: every command-line value converted and
checked once, into a frozen object the job reads and nothing mutates."""

from __future__ import annotations

import argparse
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.errors import ParameterError

from ..runner import MODES, Options

ONLY = ("cases", "properties", "gradients")  # --only: one kind of check


@dataclass(frozen=True)
class Settings:
    """What to check (``options``, the runner's input) and how to run and report it."""

    options: Options
    workers: int | None  # None: as many as pay for their start-up
    shard: tuple[int, int] | None  # (K, N): shard K of N
    check_timeout: float
    quiet: bool
    verbose: bool
    json: Path | None
    junit: Path | None
    html: Path | None
    compile_cache: bool
    every_installed_backend: bool  # no --backend given: the installed ones were taken
    given: Mapping[str, Any]  # the options as typed, for the reports' header (read-only)


def _count(flag: str, value: Any, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParameterError(f"{flag} {value!r}: expected a whole number of at least {minimum}")
    return value


def _choice(flag: str, value: Any, choices: tuple[str, ...]) -> Any:
    if value is not None and value not in choices:
        raise ParameterError(f"{flag} {value!r}: expected one of {', '.join(choices)}")
    return value


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def from_args(args: argparse.Namespace) -> Settings:
    """The settings of the parsed ``posenc conformance`` arguments. argparse has checked what
    it parses; a namespace built another way is checked here the same, and a bad value is a
    ParameterError naming the option and the value."""
    from posenc.backends import installed_backends
    from posenc.backends.backend import FLOAT_DTYPES, SETTINGS

    from .. import parallel, shard
    from ..tiers import TIERS
    from ..tolerances import PROFILES
    from .options import build_options

    for flag, name in (("--dtype", "dtype"), ("--mode", "mode")):
        for value in getattr(args, name) or []:
            _choice(flag, value, FLOAT_DTYPES if name == "dtype" else MODES)
    timeout = args.check_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
            0 < timeout < math.inf):
        raise ParameterError(f"--check-timeout {timeout!r}: expected a number of seconds above 0")
    every_installed = not args.backend  # then every installed backend, as the job announces
    options = build_options(
        backends=installed_backends() if every_installed else args.backend,
        encodings=args.encoding, dtypes=args.dtype, modes=args.mode,
        device=args.device, tier=_choice("--tier", args.tier, TIERS),
        max_examples=_count("--max-examples", args.max_examples, 1),
        only=_choice("--only", args.only, ONLY), expectations=args.expectations,
        skip=args.skip, compiled_cases=_count("--compiled-cases", args.compiled_cases, 0),
        precision=_choice("--precision", args.precision, tuple(PROFILES)),
        include_posenc_code=args.include_posenc_code,
        matmul_precision=_choice("--matmul-precision", args.matmul_precision,
                                 tuple(SETTINGS["matmul_precision"])))
    return Settings(
        options=options,
        workers=None if args.workers is None else parallel.parse_workers(args.workers),
        shard=shard.parse_shard(args.shard) if args.shard else None,
        check_timeout=float(timeout), quiet=bool(args.quiet), verbose=bool(args.verbose),
        json=_path(args.json), junit=_path(args.junit), html=_path(args.html),
        compile_cache=not args.no_compile_cache, every_installed_backend=every_installed,
        given=types.MappingProxyType({k: v for k, v in vars(args).items() if k != "func"}))
