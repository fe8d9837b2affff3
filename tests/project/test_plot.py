"""`posenc plot`: every encoding draws headless, from posenc's own implementation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from posenc import golden
from posenc.backends import numpy as pe
from posenc.cli import main
from posenc.errors import MissingExtraError, ParameterError, SpecError
from posenc.paths import spec_dir
from posenc.plot import declaration, figure, parse_params, plot
from posenc.plot.figure import Heatmap, Lines
from posenc.specs import load_spec, load_spec_file, spec_ids

from ..conftest import run_python

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_drawn(path: Path) -> None:
    """A PNG whose pixels are not one flat colour (something was drawn)."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(path)[..., :3]
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    colours = np.unique(pixels.reshape(-1, 3).round(2), axis=0)
    assert len(colours) > 20, f"{path.name}: only {len(colours)} colours"
    assert (pixels < 0.5).mean() > 0.005  # dark ink: titles, axes, data


@pytest.mark.parametrize("spec_id", spec_ids())
def test_every_encoding_renders_a_png(spec_id: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert_drawn(plot(spec_id, tmp_path / f"{spec_id}.png", dpi=40))


def test_plot_sections_are_declared_except_where_the_family_default_fits() -> None:
    defaults = [s for s in spec_ids() if not declaration(load_spec(s)).declared]
    assert set(defaults) <= {"alibi_bias", "t5_bias"}, defaults


def test_the_default_plot_draws_the_first_golden_case() -> None:
    spec = load_spec("t5_bias")
    decl = declaration(spec)
    assert (decl.declared, decl.kind) == (False, "matrices")
    stored = golden.load(spec).cases[spec.cases[0].name].output  # [heads, q_len, k_len]
    panels = figure("t5_bias").panels
    assert len(panels) == stored.shape[0]
    for head, panel in enumerate(panels):
        np.testing.assert_array_equal(panel.values, stored[head])


def test_staircase_is_t5_bucket_of_its_positions() -> None:
    (panel,) = figure("t5_bucket").panels
    assert isinstance(panel, Lines) and panel.steps
    for line, bidirectional in zip(panel.lines, (True, False), strict=True):
        np.testing.assert_array_equal(line.x, np.arange(-160, 161))
        np.testing.assert_array_equal(line.y, pe.t5_bucket(line.x, bidirectional=bidirectional))
    assert panel.lines[0].y.max() == 31 and panel.lines[1].y.min() == 0


def test_table_is_the_sinusoidal_table_in_each_layout() -> None:
    panels = figure("sinusoidal").panels
    assert [p.title for p in panels] == ["interleaved", "concat", "t2t"]
    for panel in panels:
        expected = pe.sinusoidal(np.arange(128), 64, layout=panel.title, dtype="float64")
        np.testing.assert_array_equal(panel.values, expected)


def test_rotary_logits_are_the_long_term_decay_of_rope() -> None:
    (panel,) = figure("rope").panels
    default = panel.lines[0]
    np.testing.assert_array_equal(default.x, np.arange(1025))
    inv_freq, _ = pe.rope_frequencies(128, dtype="float64")
    # q = k = 1: each rotated pair contributes 2 cos((m - n) theta_i); divided by the width
    expected = 2 * np.cos(np.outer(default.x, inv_freq)).sum(axis=1) / 128
    np.testing.assert_allclose(default.y, expected, atol=1e-12)
    assert default.y[0] == pytest.approx(1.0)
    assert abs(default.y[200:].mean()) < 0.5 * default.y[0]  # it decays


def test_xpos_logits_decay_faster_for_a_smaller_scale_base() -> None:
    (panel,) = figure("xpos").panels
    fast, _, slow = panel.lines
    assert fast.y[-1] < slow.y[-1]


def test_grid_logits_peak_at_the_central_query() -> None:
    (panel,) = figure("axial_rope").panels
    assert isinstance(panel, Heatmap) and panel.values.shape == (33, 33)
    assert np.unravel_index(panel.values.argmax(), panel.values.shape) == (16, 16)
    assert panel.values[16, 16] == pytest.approx(1.0)
    np.testing.assert_array_equal(panel.x, np.arange(-16, 17))


def test_spectrum_is_two_pi_over_the_scheduled_frequencies() -> None:
    spec = load_spec("rope_frequencies")
    wavelengths, ratios = figure("rope_frequencies").panels
    series = declaration(spec).series
    for line, item in zip(wavelengths.lines, series, strict=True):
        inv_freq, _ = pe.rope_frequencies(64, dtype="float64", **item.params)
        with np.errstate(divide="ignore"):
            expected = np.where(inv_freq > 0, 2 * np.pi / inv_freq, np.nan)
        np.testing.assert_allclose(line.y, expected, rtol=1e-15)
    linear = next(line for line in ratios.lines if line.label == "linear")
    np.testing.assert_allclose(linear.y, 8.0)


def test_attention_with_identity_values_draws_its_weights() -> None:
    panels = figure("attention").panels
    assert len(panels) == 4
    for panel in panels:
        weights = panel.values
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(np.triu(weights, 1) == 0)  # the causal mask


def test_an_input_may_be_another_encodings_output() -> None:
    add = figure("combine").panels[0].values
    x = load_spec("combine").data["plot"]["inputs"]["x"]["normal"]
    assert x["shape"] == [32, 16]
    from posenc.inputs import generate

    table = pe.sinusoidal(np.arange(32), 16, dtype="float64")
    np.testing.assert_array_equal(add, generate({"normal": x}, "float") + table)


def test_user_params_win_and_collapse_series_that_vary_them() -> None:
    panels = figure("sinusoidal", {"layout": "concat", "dim": 8}).panels
    assert len(panels) == 1 and panels[0].values.shape == (128, 8)
    np.testing.assert_array_equal(
        panels[0].values, pe.sinusoidal(np.arange(128), 8, layout="concat", dtype="float64"))
    assert len(figure("kerple", {"q_len": 5, "k_len": 7}).panels) == 8  # series kept


@pytest.mark.parametrize(("items", "message"), [
    (["bogus=1"], "unknown parameter 'bogus'"),
    (["dim=abc"], "parameter dim='abc'"),
    (["layout=diagonal"], "parameter layout='diagonal'"),
])
def test_bad_params_name_the_parameter_and_value(items: list[str], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        figure("sinusoidal", parse_params(items))


def test_param_values_parse_as_in_a_spec() -> None:
    parsed = parse_params(["base=5e5", "layout=half", "scaling={rope_type: linear, factor: 4}",
                           "rotary_dim=null"])
    assert parsed == {"base": 500000.0, "layout": "half",
                      "scaling": {"rope_type": "linear", "factor": 4}, "rotary_dim": None}
    with pytest.raises(ParameterError, match="KEY=VALUE"):
        parse_params(["base"])
    with pytest.raises(ParameterError, match=r"scaling='\{a: \[1,': cannot parse"):
        parse_params(["scaling={a: [1,"])


def test_cli_writes_the_png_and_rejects_bad_input(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "t5.png"
    assert main(["plot", "t5_bias", "--param", "q_len=24", "--param", "k_len=24", "-o", str(out),
                 "--dpi", "40"]) == 0
    assert_drawn(out)
    for args, message in [(["no_such_encoding"], "no spec 'no_such_encoding'"),
                          (["rope", "--param", "bas=2"], "unknown parameter 'bas'"),
                          (["rope", "--param", "base=x"], "parameter base='x'"),
                          (["kerple", "--param", "q_len=-3"], "parameter q_len=-3")]:
        assert main(["plot", *args, "-o", str(tmp_path / "x.png")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_a_missing_required_parameter_is_named(tmp_path: Path, tmp_specs: Path) -> None:
    path = tmp_specs / "t5_bias.yaml"
    data = yaml.safe_load(path.read_text())
    data["plot"] = {"kind": "matrices", "inputs": {"table": {"normal": {"shape": [32, 2],
                                                                      "seed": 1}}}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ParameterError, match="needs a value for q_len, k_len"):
        figure("t5_bias")


def test_missing_matplotlib_names_the_extra(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'posenc\[plot\]'"):
        plot("rope", tmp_path / "rope.png")


def test_importing_posenc_and_computing_a_plot_imports_no_framework() -> None:
    code = ("import sys, posenc, posenc.plot\n"
            "posenc.plot.figure('rope')\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('matplotlib', 'torch', 'jax', 'tensorflow')]\n"
            "print(heavy)\n")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_plot_section_is_outside_the_spec_hash(tmp_path: Path) -> None:
    original = load_spec_file(spec_dir() / "rope.yaml")
    data = yaml.safe_load((spec_dir() / "rope.yaml").read_text())
    data["plot"]["options"]["distance"] = 64
    edited = tmp_path / "rope.yaml"
    edited.write_text(yaml.safe_dump(data))
    assert load_spec_file(edited).content_hash() == original.content_hash()
    del data["plot"]
    edited.write_text(yaml.safe_dump(data))
    assert load_spec_file(edited).content_hash() == original.content_hash()


@pytest.mark.parametrize(("plot_section", "message"), [
    ({"kind": "histogram"}, "plot.kind"),
    ({"kind": "rotary_logits", "options": {"distance": 0}}, "plot.options.distance"),
    ({"kind": "table", "inputs": {"x": {"ones": {}}}}, "plot.inputs.x"),
])
def test_schema_rejects_a_bad_plot_section(tmp_path: Path, plot_section: dict[str, object],
                                           message: str) -> None:
    data = yaml.safe_load((spec_dir() / "rope.yaml").read_text())
    data["plot"] = plot_section
    path = tmp_path / "rope.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=message):
        load_spec_file(path)


def test_plot_params_and_inputs_are_checked_against_the_spec(tmp_path: Path) -> None:
    data = yaml.safe_load((spec_dir() / "rope.yaml").read_text())
    path = tmp_path / "rope.yaml"
    for section, message in [({"kind": "rotary_logits", "params": {"bas": 2.0}},
                              r"plot.params: unknown parameter 'bas'"),
                             ({"kind": "table", "inputs": {"y": {"eye": 3}}},
                              r"plot.inputs.y: rope has no input 'y'"),
                             ({"kind": "table", "case": "nope"}, "no case named 'nope'")]:
        data["plot"] = section
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(SpecError, match=message):
            declaration(load_spec_file(path))
