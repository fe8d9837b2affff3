"""The manual builds with MkDocs in strict mode: a broken link, a missing anchor, a page left
out of the navigation or an API reference that does not resolve fails the build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..conftest import ROOT


def _nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # not -q: it hides the warnings that strict mode counts, and the build passes
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(config), "-d", str(site)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly_and_its_front_page_links_every_page(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    proc = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = {page.name for page in (ROOT / "docs").glob("*.md")}
    assert _nav_pages(config["nav"]) == pages
    front = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    linked = set(re.findall(r'href="([\w-]+)/"', front))
    assert {name.removesuffix(".md") for name in pages - {"index.md"}} <= linked
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "posenc.conformance.check" in api and "adapters" in api


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The site's link rules (its validation settings and hook) over two small pages: a link to
    a missing page, a missing anchor or a file missing from the checkout fails the build; a
    link to a file of the checkout is shown as its path."""
    pytest.importorskip("mkdocs")
    real = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    (tmp_path / "docs").mkdir()
    (tmp_path / "tool.py").write_text("")
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump({
        "site_name": "links", "docs_dir": "docs", "strict": True, "validation": real["validation"],
        "hooks": [str(ROOT / "docs_hooks" / "repo_links.py")]}))
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## Part\n")
    page = tmp_path / "docs" / "a.md"
    for link, fails in [("[b](b.md#part) and [the tool](../tool.py)", False),
                        ("[nowhere](no-such-page.md)", True), ("[b](b.md#no-part)", True),
                        ("[a file](../no_such_file.py)", True)]:
        page.write_text(f"# A\n\nSee {link}.\n")
        proc = _build(config, tmp_path / "site")
        assert (proc.returncode != 0) == fails, (link, proc.stdout + proc.stderr)
    page.write_text("# A\n\nSee [the tool](../tool.py).\n")
    assert _build(config, tmp_path / "site").returncode == 0
    assert "the tool (<code>tool.py</code>)" in (tmp_path / "site" / "a" / "index.html").read_text()
