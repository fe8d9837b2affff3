"""The README stays a front page: short, its commands those CI runs, its first example small.

Its code blocks run, and print what it shows, in tests/project/test_doc_blocks.py with the
manual's."""

from __future__ import annotations

import re

import pytest

from ..conftest import ROOT, run_python
from .doc_blocks import blocks

README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
MAX_LINES = 200


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= MAX_LINES
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", README))
    pages = {page.name for page in (ROOT / "docs").glob("*.md")} - {"index.md"}  # the site's README
    assert pages <= linked, f"pages the README's map does not link: {sorted(pages - linked)}"


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python -m venv .*?)\n```", README)
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.endswith("posenc conformance")
    install, test_command = tests.split("&& ")[-2:]
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"{install.strip()} && {test_command.strip()}" in ci


def test_check_your_implementation_is_ten_lines_that_name_a_bug() -> None:
    """The first example is at most 10 lines of user code, and the output shown under it (which
    test_doc_blocks checks it prints) names the bug it plants."""
    section = README.split("## Check your implementation", 1)[1].split("\n## ", 1)[0]
    first = next(b for b in blocks(README_PATH) if b.lang == "python" and b.code in section)
    assert len([line for line in first.code.splitlines() if line.strip()]) <= 10, first.code
    assert first.shown is not None and "likely: positions off by one" in first.shown
    assert "+ 1" in first.code and "FAIL " in first.shown


@pytest.mark.slow
def test_the_first_example_without_its_bug_passes_every_check_in_scope() -> None:
    """What the README says of its bug: remove `+ 1` and every check in scope passes."""
    pytest.importorskip("torch")
    section = README.split("## Check your implementation", 1)[1].split("\n## ", 1)[0]
    first = next(b for b in blocks(README_PATH) if b.lang == "python" and b.code in section)
    assert "The same port with `+ 1` removed passes all 19 checks" in section
    proc = run_python(first.code.replace(" + 1)", ")"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "conformance: 19 passed, 0 failed, 38 skipped; in scope: 19 of 57 checks" in proc.stdout
