"""``posenc conformance``'s settings: the command line becomes one frozen object, a bad value
is a ParameterError naming its option, and the job builds the plan once."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from posenc.catalog import specs
from posenc.cli import build_parser, main
from posenc.conformance import runner
from posenc.conformance.cli.settings import from_args
from posenc.errors import ParameterError


def _args(*argv: str, **changed: object) -> argparse.Namespace:
    args = build_parser().parse_args(["conformance", *argv])
    for name, value in changed.items():
        setattr(args, name, value)
    return args


@pytest.mark.parametrize(("name", "value", "flag"), [
    ("workers", 0, "--workers"), ("shard", "3/2", "--shard"), ("shard", "one", "--shard"),
    ("check_timeout", 0.0, "--check-timeout"), ("check_timeout", float("inf"), "--check-timeout"),
    ("max_examples", 0, "--max-examples"), ("max_examples", 2.5, "--max-examples"),
    ("compiled_cases", -1, "--compiled-cases"), ("tier", "huge", "--tier"),
    ("precision", "sloppy", "--precision"), ("dtype", ["float8"], "--dtype"),
    ("mode", ["lazy"], "--mode"), ("only", "everything", "--only"),
    ("matmul_precision", "fastest", "--matmul-precision"),
])
def test_a_bad_value_names_its_option(name: str, value: object, flag: str) -> None:
    with pytest.raises(ParameterError) as info:
        from_args(_args("--backend", "numpy", **{name: value}))
    shown = value[0] if isinstance(value, list) else value  # a repeatable flag: the bad item
    assert str(info.value).startswith(f"{flag} {shown!r}")


def test_the_settings_are_converted_once_and_frozen(tmp_path: Path) -> None:
    settings = from_args(_args("--backend", "numpy", "--shard", "2/3", "--workers", "2",
                               "--json", str(tmp_path / "r.json"), "--max-examples", "7",
                               "--only", "cases", "--no-compile-cache"))
    assert (settings.shard, settings.workers, settings.json) == ((2, 3), 2, tmp_path / "r.json")
    assert (settings.options.max_examples, settings.options.properties) == (7, False)
    assert settings.compile_cache is False and settings.every_installed_backend is False
    assert settings.given["shard"] == "2/3" and "func" not in settings.given
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.workers = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.given["shard"] = "1/3"  # type: ignore[index]


def test_no_backend_means_every_installed_one() -> None:
    from posenc.backends import installed_backends

    settings = from_args(_args())
    assert settings.every_installed_backend
    assert settings.options.backends == installed_backends()


def test_the_job_plans_once_and_counts_what_skip_left_out(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    spec = specs()["sinusoidal"]
    interleaved = [c for c in spec.cases
                   if {**spec.defaults(), **c.params}.get("layout") == "interleaved"]
    assert 0 < len(interleaved) < len(spec.cases)  # the selection below takes some, not all
    calls = []
    real_plan = runner.Runner.plan

    def counted(self: runner.Runner) -> list:
        calls.append(1)
        return real_plan(self)

    monkeypatch.setattr(runner.Runner, "plan", counted)
    code = main(["conformance", "--backend", "numpy", "--encoding", "sinusoidal", "--dtype",
                 "float64", "--mode", "eager", "--only", "cases", "--workers", "1", "-q",
                 "--skip", "sinusoidal[layout=interleaved]"])
    assert code == 0
    assert len(calls) == 1
    total = len(spec.cases)
    assert (f"deselected: {len(interleaved)} of {total} checks (sinusoidal[layout=interleaved])"
            in capsys.readouterr().err)


def test_compiled_cases_leaves_out_the_later_compiled_cases() -> None:
    options = runner.Options(backends=["torch"], encodings=["rope"], dtypes=["float32"],
                             modes=["eager", "compiled"], properties=False, gradients=False,
                             compiled_cases=2)
    with runner.Runner(options) as planner:
        checks = planner.plan()
    cases = [c.name for c in specs()["rope"].cases]
    compiled = [c.name for c in checks if c.mode == "compiled"]
    assert compiled == cases[:2]
    assert [c.name for c in checks if c.mode == "eager"] == cases
    assert planner.deselected == len(cases) - 2
