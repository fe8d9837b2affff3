"""Hostile inputs (issue 31): every public function and every numeric command-line option,
fuzzed from what the specs and signatures declare. See tests/hostile.py for the strategies and
the oracle: a ParameterError naming the bad parameter, or the reference's result.

A fixed seed (Hypothesis derandomised) and a few seconds per function on NumPy, through
``posenc.<function>`` and ``posenc.backends.numpy`` (30 examples per function);
``POSENC_HOSTILE_EXAMPLES=N`` draws N examples per function instead, and
``POSENC_HOSTILE_BACKENDS=strict,torch,jax`` adds those backends' bindings.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc import dialects
from posenc.encodings import public_functions

from .. import hostile

EXAMPLES = int(os.environ.get("POSENC_HOSTILE_EXAMPLES", "30"))
BACKENDS = ["numpy", *filter(None, os.environ.get("POSENC_HOSTILE_BACKENDS", "").split(","))]
TARGETS = {**hostile.spec_targets(), **hostile.manual_targets()}


def _binding(name: str, backend: str):
    """The function as ``posenc.backends.<backend>`` binds it (lists and NumPy arrays
    converted), or None for a function no backend binds (the dialects)."""
    if name not in public_functions():
        return None
    return getattr(importlib.import_module(f"posenc.backends.{backend}"), name)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_hostile_arguments(name: str) -> None:
    target = TARGETS[name]
    surfaces = [("posenc", target.call)]
    surfaces += [(b, _binding(name, b)) for b in BACKENDS if _binding(name, b) is not None]

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        parameter = data.draw(st.sampled_from(target.parameters), label="parameter")
        value = data.draw(hostile.hostile(target, parameter), label="value")
        _, call = data.draw(st.sampled_from(surfaces), label="surface")
        hostile.check(target, call, parameter, value)

    run()


def test_every_public_function_has_a_fuzz_entry() -> None:
    """A new public function (an encoding's ``__all__``, a backend binding, a public function of
    posenc.dialects) needs a spec or an entry in tests/hostile.py's manual targets."""
    import posenc.backends.numpy as pe

    functions = set(public_functions())
    missing = sorted(functions - set(TARGETS))
    bound = {n for n in dir(pe) if not n.startswith("_") and n in functions}
    dialect_functions = {f"dialects.{n}" for n in dialects.__all__
                         if inspect.isfunction(getattr(dialects, n))}
    missing += sorted(dialect_functions - set(TARGETS))
    assert not missing, f"no hostile-input fuzz entry for {', '.join(missing)}"
    assert bound == functions
    for name, target in TARGETS.items():  # every declared parameter is fuzzed
        signature = inspect.signature(target.call)
        takes = {p.name for p in signature.parameters.values()
                 if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name not in ("device",
                                                                                    "dtype")}
        undeclared = takes - set(target.kinds)
        assert not undeclared, f"{name}: parameters {sorted(undeclared)} are not fuzzed"


# ---------------------------------------------------------------------------------------------
# the command line

def _numeric_options() -> list[tuple[str, str, argparse.Action]]:
    """(command, option, action) of every option taking a value other than a choice or a
    path-like string, over every subcommand of ``posenc``."""
    from posenc.cli import build_parser

    out = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())
            elif action.option_strings and action.type is not None and action.choices is None:
                out.append((path, action.option_strings[-1], action))
    walk(build_parser(), "")
    return out


NUMERIC = _numeric_options()
BAD_TEXT = ["0", "-1", "nan", "inf", "-inf", "1e30", "2.5", "abc", "", "0x10", "1_0"]


def test_numeric_options_are_validated_types() -> None:
    """Every numeric option parses with posenc.params.option (or --shard's parser): never a bare
    int or float, which take 0, -1, nan and inf."""
    assert len(NUMERIC) >= 12, NUMERIC
    for command, option, action in NUMERIC:
        assert action.type not in (int, float), f"posenc {command} {option}: type={action.type}"


@pytest.mark.parametrize(("command", "option", "action"), NUMERIC,
                         ids=[f"{c}{o}" for c, o, _ in NUMERIC])
def test_numeric_option_values(command: str, option: str, action: argparse.Action,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """Each bad text is a usage error (exit 2) naming the option, or a value the option's
    declared bounds admit."""
    from posenc.cli import build_parser

    minimum = getattr(action.type, "minimum", None)
    above = getattr(action.type, "exclusive_minimum", None)
    for text in BAD_TEXT:
        argv = [*command.split(), *_required(command), f"{option}={text}"]
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:
            err = capsys.readouterr().err
            assert exc.code == 2, (argv, err)
            assert f"argument {option}" in err or option in err, (argv, err)
            continue
        value = getattr(args, action.dest)
        if isinstance(value, str):  # --shard K/N: checked by its own type while parsing
            continue
        assert isinstance(value, int | float) and not isinstance(value, bool), (argv, value)
        assert value == value and abs(value) != float("inf"), (argv, value)
        assert minimum is None or value >= minimum, (argv, value)
        assert above is None or value > above, (argv, value)


def _required(command: str) -> list[str]:
    """Positional arguments and required options a command needs before an option parses."""
    return {"check": ["rope", "mod:fn"], "plot": ["rope"], "translate": ["--to", "vllm"],
            "report merge": ["a.json"]}.get(command, [])


@pytest.mark.parametrize(("argv", "message"), [
    (["translate", "--named", "llama-3.1-8b", "--to", "vllm", "--n-ctx", "4096"],
     "--n-ctx 4096 applies to --to ggml only"),
    (["translate", "--named", "llama-3.1-8b", "--to", "vllm", "--mode", "neox"],
     "--mode neox applies to --to ggml only"),
    (["translate", "--named", "llama-3.1-8b", "--to", "vllm", "--max-positions", "8"],
     "--max-positions 8 applies to --to onnx only"),
    (["translate", "--named", "llama-3.1-8b", "--to", "ggml", "--seq-len", "8"],
     "--seq-len 8 applies to --to onnx only"),
    (["translate", "--named", "llama-3.1-8b", "--to", "onnx", "--max-positions", "1000000000"],
     "max_positions=1000000000 makes the cos/sin caches"),
])
def test_translate_options_of_another_target(argv: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from posenc.cli import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_command_line_usage_errors_exit_2() -> None:
    """The issue's examples, through a real ``posenc`` process."""
    for argv, option in ((["translate", "--named", "phi-3.5-mini", "--to", "ggml", "--n-ctx",
                           "-1"], "--n-ctx"),
                         (["check", "rope", "numpy:x", "--max-examples", "0"], "--max-examples"),
                         (["check", "rope", "numpy:x", "--max-examples", "-1"], "--max-examples"),
                         (["conformance", "--backend", "numpy", "--max-examples", "0"],
                          "--max-examples")):
        done = subprocess.run([sys.executable, "-m", "posenc", *argv], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, (argv, done.stderr)
        assert f"argument {option}" in done.stderr, (argv, done.stderr)
