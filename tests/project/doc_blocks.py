"""The fenced blocks of the README and the manual's pages, as the docs tests run them.

A ``python`` block runs; a ``text`` block right after it is the output it prints (each line
but ``...`` must appear in what that block printed). Blocks of one page run in order, as one
script, so a page's later blocks build on its earlier ones; a block whose first line is
``# name.py`` is also written to that file, in the folder the page runs in. Any other code
block (``bash``, or a ``python`` block that cannot run here) carries a visible marker on the
line before its fence,
``*Not run by the docs tests: <reason>.*``. ``yaml`` blocks are data: they must parse.
``text`` blocks and plain fences are output or diagrams, ``math`` blocks formulas.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..conftest import ROOT

PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
MARKER = re.compile(r"^\s*\*Not run by the docs tests: (?P<reason>.+)\*\s*$")
NOT_CODE = {"text", "", "math"}
SENTINEL = "<<<posenc-doc-block {}>>>"


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the marker's reason
    shown: str | None = None  # the text block after a python block

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found: list[Block] = []
    previous_end = 0
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.match(before)
        block = Block(page, text.count("\n", 0, match.start()) + 1, match["lang"],
                      textwrap.dedent(match["body"]), marker["reason"] if marker else None)
        last = found[-1] if found else None
        if block.lang == "text" and last is not None and last.lang == "python" \
                and not text[previous_end:match.start()].strip():
            last.shown = block.code
        else:
            found.append(block)
        previous_end = match.end()
    return found


def script(page_blocks: list[Block]) -> str:
    """The page's runnable python blocks as one script, each announced on stdout."""
    parts = []
    for i, block in enumerate(page_blocks):
        if block.lang == "python" and block.not_run is None:
            parts += [f"print({SENTINEL.format(i)!r}, flush=True)", block.code]
    return "\n".join(parts)


def printed(stdout: str) -> dict[int, str]:
    """What each block printed, by its index on the page."""
    pieces = re.split(r"^<<<posenc-doc-block (\d+)>>>$", stdout, flags=re.M)
    return {int(pieces[i]): pieces[i + 1] for i in range(1, len(pieces) - 1, 2)}
