"""MkDocs hooks: the package as installed, for mkdocstrings; the README as the front page;
links from a page to files of the checkout outside docs/ (``../conformance/x.py``).

The site has no source browser, so such a link becomes the path in code (`conformance/x.py`);
a link to a path that does not exist in the checkout fails the build, as a broken link between
pages does under ``--strict``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def installed_layout(root: Path, into: Path) -> Path:
    """``into/posenc``: the package as a wheel lays it out (``posenc.conformance`` at
    ``posenc/conformance``), linked (its top-level files copied) from the checkout by
    pyproject's ``package-dir``, for tools that find modules by path (griffe, mypy)."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    top = into / "posenc"
    top.mkdir(parents=True)
    for child in (root / mapping["posenc"]).iterdir():
        if child.is_file():  # copied: a tool that resolves links would find the checkout's folder
            shutil.copy2(child, top / child.name)
        elif child.name != "__pycache__":
            (top / child.name).symlink_to(child.resolve())
    for package, folder in sorted(mapping.items(), key=lambda item: item[0].count(".")):
        parent, _, name = package.rpartition(".")
        if parent and Path(mapping.get(parent, "")) / name != Path(folder):
            link = into.joinpath(*package.split("."))
            if not link.exists():
                link.symlink_to((root / folder).resolve())
    return into


@event_priority(100)  # before mkdocstrings makes its handler from the paths
def on_config(config: Any) -> Any:
    if "mkdocstrings" not in config["plugins"]:
        return config
    root = Path(config["config_file_path"]).resolve().parent
    layout = installed_layout(root, Path(tempfile.mkdtemp(prefix="posenc-site-")))
    handlers = config["plugins"]["mkdocstrings"].config["handlers"]
    handlers.setdefault("python", {})["paths"] = [str(layout)]
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(os.path.abspath(config["docs_dir"]))  # links are not followed: a checkout
    root = Path(os.path.abspath(config["config_file_path"])).parent  # may be made of links
    if page.file.src_path == "index.md":  # the site's front page is the README, its links moved
        markdown = (root / "README.md").read_text(encoding="utf-8").replace("](docs/", "](")
    here = (docs / page.file.src_path).parent

    def replace(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if re.match(r"[a-z]+:", target):  # a URL
            return match.group(0)
        path = Path(os.path.normpath(here / target))
        if path.is_relative_to(docs):
            return match.group(0)  # MkDocs checks links between pages itself
        if not path.is_relative_to(root) or not path.exists():
            raise PluginError(f"{page.file.src_path}: link to {target!r}, which is not in the "
                              "checkout")
        shown = path.relative_to(root).as_posix() + ("/" if path.is_dir() else "")
        return text if text.strip("`") == shown.rstrip("/") else f"{text} (`{shown}`)"

    return LINK.sub(replace, markdown)
