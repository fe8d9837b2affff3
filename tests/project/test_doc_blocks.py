"""Every code block of the README and the manual runs and prints what the page shows, or says
visibly why it does not run (tests/project/doc_blocks.py has the rules)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .doc_blocks import NOT_CODE, PAGES, Block, blocks, printed, script

RUNNABLE = [page for page in PAGES
            if any(b.lang == "python" and b.not_run is None for b in blocks(page))]


def test_every_code_block_runs_or_says_why_not() -> None:
    silent = [b.where for page in PAGES for b in blocks(page)
              if b.lang not in NOT_CODE | {"python", "yaml"} and b.not_run is None]
    assert not silent, f"code blocks neither run nor marked '*Not run by the docs tests: ...*': {silent}"
    assert len(RUNNABLE) >= 5, RUNNABLE


def test_yaml_blocks_parse() -> None:
    data = [b for page in PAGES for b in blocks(page) if b.lang == "yaml"]
    assert data
    for block in data:
        assert isinstance(yaml.safe_load(block.code), dict), block.where


def test_a_block_is_checked_against_the_output_shown_under_it(tmp_path: Path) -> None:
    """The parser pairs a python block with the text block right under it, and a failing
    output check says which block: a made-up page, both ways."""
    page = tmp_path / "made_up.md"
    text = ("```python\nprint('hello')\n```\n\n```text\nhello\n```\n\nprose\n\n```text\ndiagram\n```\n"
            "*Not run by the docs tests: needs a GPU.*\n```bash\nnvidia-smi\n```\n")
    page.write_text(text)
    found = blocks(page)
    assert [(b.lang, b.shown, b.not_run) for b in found] == [
        ("python", "hello\n", None), ("text", None, None), ("bash", None, "needs a GPU.")]
    segments = printed(_run(script(found)))
    assert segments == {0: "\nhello\n"}
    assert _missing(found[0], segments[0]) == []
    found[0].shown = "hello\ngoodbye\n"
    assert _missing(found[0], segments[0]) == ["goodbye"]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_python_blocks_run_and_print_what_is_shown(page: Path, tmp_path: Path) -> None:
    """In a fresh process (flex_attention compiles inside, and torch 2.13's dynamo fails
    computing a recompilation reason when earlier tests in the process compiled it with other
    tensors), in an empty folder (a block may write files)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    page_blocks = blocks(page)
    for block in page_blocks:  # a block headed "# my_backend.py" is that file, for later imports
        named = re.match(r"# ([\w-]+\.py)\b", block.code)
        if block.lang == "python" and named:
            (tmp_path / named[1]).write_text(block.code)
    segments = printed(_run(script(page_blocks), cwd=tmp_path))
    for i, block in enumerate(page_blocks):
        if block.shown is not None and block.not_run is None:
            assert i in segments, f"{block.where} did not run"
            assert _missing(block, segments[i]) == [], (block.where, segments[i][-3000:])


def _run(code: str, cwd: Path | None = None) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _missing(block: Block, segment: str) -> list[str]:
    return [line for line in (block.shown or "").splitlines()
            if line != "..." and line not in segment]
