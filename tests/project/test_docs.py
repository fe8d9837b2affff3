"""docs/encodings.md is generated from spec/ and kept up to date; its plots exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from posenc import docs
from posenc.cli import main
from posenc.specs import load_all, spec_ids

from ..conftest import ROOT, run_python
from .test_plot import PNG_SIGNATURE, assert_drawn

DOCS = ROOT / "docs"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def test_committed_markdown_is_what_posenc_docs_generates() -> None:
    committed = (DOCS / docs.MARKDOWN).read_text(encoding="utf-8")
    assert committed == docs.markdown(), "docs/encodings.md is stale: run `posenc docs`"


def test_every_spec_has_a_section_and_an_existing_plot() -> None:
    text = (DOCS / docs.MARKDOWN).read_text(encoding="utf-8")
    images = IMAGE.findall(text)
    assert images == [docs.image_path(s.id) for s in sorted(
        load_all().values(), key=lambda s: (docs.FAMILIES.index(s.family), s.id))]
    total = 0
    for image in images:
        path = DOCS / image
        assert path.read_bytes()[:8] == PNG_SIGNATURE, image
        total += path.stat().st_size
    assert total < 3_000_000, f"plots take {total} bytes"
    for spec_id in spec_ids():
        assert f'<a id="{spec_id}"></a>' in text and f"(#{spec_id})" in text


def test_committed_function_table_is_what_posenc_docs_generates() -> None:
    committed = (DOCS / docs.FUNCTIONS).read_text(encoding="utf-8")
    assert committed == docs.functions_markdown(), "docs/functions.md is stale: run `posenc docs`"


def test_the_function_table_lists_every_public_function_and_layer() -> None:
    """Rows come from the specs and their modules' __all__: what posenc serves, all of it (a
    hand-kept table had lost qk_permutation_indices)."""
    from posenc.encodings import public_functions
    from posenc.layers import all_layers

    text = docs.functions_markdown()
    rows = re.findall(r"^\| `(\w+)` \|", text, re.M)
    assert sorted(rows) == sorted([*public_functions(), *all_layers()])
    assert "| `qk_permutation_indices` | `qk_permutation_indices(features, *, n_heads," in text


def test_a_section_carries_the_spec_content() -> None:
    spec = load_all()["t5_bucket"]
    section = "\n".join(docs.section(spec))
    assert spec.data["formula"].strip() in section
    assert "| `num_buckets` | integer (≥ 2) | `32` |" in section
    assert all(f"`{p.label}`" in section for p in spec.properties)
    assert "transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket" in section
    assert "](https://arxiv.org/abs/1910.10683)" in section
    assert f"*{' '.join(spec.data['plot']['caption'].split())}*" in section


def test_check_reports_stale_markdown_and_missing_plots(tmp_path: Path, tmp_specs: Path) -> None:
    docs.write(tmp_path, images=False)
    problems = docs.check(tmp_path)
    assert len(problems) == len(spec_ids()) and all("missing plot" in p for p in problems)
    path = tmp_specs / "kerple.yaml"
    data = yaml.safe_load(path.read_text())
    data["summary"] = "A new summary."
    path.write_text(yaml.safe_dump(data))
    assert any("stale" in p for p in docs.check(tmp_path))


def test_cli_writes_docs_and_check_fails_when_stale(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "docs"
    assert main(["docs", "--out", str(out), "--no-images"]) == 0
    assert (out / docs.MARKDOWN).read_text(encoding="utf-8") == docs.markdown()
    for spec_id in ("rope", "t5_bucket"):  # render two, stand in for the rest
        assert main(["plot", spec_id, "-o", str(out / docs.image_path(spec_id)), "--dpi", "40"]) == 0
        assert_drawn(out / docs.image_path(spec_id))
    for spec_id in spec_ids():
        (out / docs.image_path(spec_id)).touch()
    assert main(["docs", "--out", str(out), "--check"]) == 0
    (out / docs.MARKDOWN).write_text("# edited by hand\n")
    assert main(["docs", "--out", str(out), "--check"]) == 1
    assert "stale" in capsys.readouterr().out


def test_generating_the_markdown_imports_no_matplotlib_and_no_framework() -> None:
    proc = run_python("import sys, posenc.docs\nposenc.docs.markdown()\n"
                      "print([m for m in sys.modules if m.split('.')[0] in "
                      "('matplotlib', 'torch', 'jax', 'tensorflow')])\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
