"""The README's commands and example stay true."""

from __future__ import annotations

import re

import pytest

from .conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_python_examples_run() -> None:
    """The README's Python blocks, in order, in one namespace (later ones build on the first)."""
    pytest.importorskip("torch")
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2, blocks
    namespace: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
    assert tuple(namespace["rows"].shape) == (3, 768)
    assert tuple(namespace["q"].shape) == (2, 32, 6, 128)
    assert tuple(namespace["k"].shape) == (2, 8, 6, 128)
    assert tuple(namespace["out"].shape) == (2, 32, 6, 128)


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python -m venv .*?)\n```", README)
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.endswith("posenc conformance")
    install, test_command = tests.split("&& ")[-2:]
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"{install.strip()} && {test_command.strip()}" in ci
