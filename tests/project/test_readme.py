"""The README's commands and example stay true."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ..conftest import ROOT

README = (ROOT / "README.md").read_text()
CHECK_SECTION = "## Check your implementation"


def _section(title: str) -> str:
    return README.split(title, 1)[1].split("\n## ", 1)[0]


def _without(title: str) -> str:
    return README.replace(title + _section(title), "")


def test_python_examples_run() -> None:
    """The README's Python blocks, in order, as one script (later ones build on the first), in
    a fresh process: flex_attention compiles inside, and torch 2.13's dynamo fails computing a
    recompilation reason (IndexError in its aliasing guard) when earlier tests in the same
    process compiled it with other tensors."""
    pytest.importorskip("torch")
    blocks = re.findall(r"```python\n(.*?)```", _without(CHECK_SECTION), re.S)
    assert len(blocks) >= 2, blocks
    report = ("\nimport json\nprint(json.dumps({name: list(globals()[name].shape) "
              "for name in ('rows', 'q', 'k', 'out')}))\n")
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks) + report],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shapes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert shapes == {"rows": [3, 768], "q": [2, 32, 6, 128], "k": [2, 8, 6, 128],
                      "out": [2, 32, 6, 128]}


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python -m venv .*?)\n```", README)
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.endswith("posenc conformance")
    install, test_command = tests.split("&& ")[-2:]
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"{install.strip()} && {test_command.strip()}" in ci


@pytest.mark.slow
def test_check_your_implementation_examples_run_and_print_what_is_shown() -> None:
    """Each example of "Check your implementation" (at most 10 lines of user code) in a fresh
    process; the first line of the output shown under it (coverage and grade) is printed."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    section = _section(CHECK_SECTION)
    pairs = re.findall(r"```python\n(.*?)```\s*```text\n(.*?)```", section, re.S)
    assert len(pairs) == 7, [code[:40] for code, _ in pairs]
    for code, _ in pairs:
        assert len([line for line in code.splitlines() if line.strip()]) <= 10, code
    running = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for code, _ in pairs]
    for proc, (_, shown) in zip(running, pairs, strict=True):
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        for line in shown.splitlines():
            if line != "...":
                assert line in stdout, (line, stdout[-3000:])
