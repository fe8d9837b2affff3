"""posenc.validation: the checker that enforces a spec's declared inputs (arrays, kinds, shape
patterns, named axes that agree, one float dtype), tested directly on NumPy arrays."""

from __future__ import annotations

from pathlib import Path

import array_api_compat.numpy as xp
import numpy as np
import pytest

from posenc import specs, validation
from posenc.errors import ParameterError, SpecError


def _spec(tmp_path: Path, inputs: str) -> str:
    """A spec file with the given ``inputs:`` block, in a folder the checker reads from."""
    (tmp_path / "toy.yaml").write_text(f"id: toy\ninputs:\n{inputs}output:\n  shape: '[]'\n")
    return "toy"


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(validation.paths, "shipped_spec_dir", lambda: tmp_path)

    def make(inputs: str, **kwargs) -> validation.Inputs:
        return validation.Inputs(_spec(tmp_path, inputs), **kwargs)

    return make


ATTN = """\
  - name: q
    kind: float
    shape: "[..., q_len, d]"
    doc: queries
  - name: k
    kind: float
    shape: "[..., k_len, d]"
  - name: v
    kind: float
    shape: "[..., k_len, d_v]"
  - name: mask
    kind: bool
    shape: broadcasts to [..., q_len, k_len]
    optional: true
"""


@pytest.mark.parametrize("spec_id", specs.spec_ids())
def test_reading_agrees_with_the_spec_loader(spec_id: str) -> None:
    """The quick reader of ``inputs:`` (no YAML parser at import) sees what load_spec sees."""
    read = validation.read_declarations(validation._spec_file(spec_id))
    loaded = specs.load_spec(spec_id).inputs
    assert [(d.name, d.kind, d.shape, d.optional) for d in read] == [
        (d.name, d.kind, d.shape, d.optional) for d in loaded]


@pytest.mark.parametrize(("text", "patterns"), [
    ("[..., seq, dim]", (("...", "seq", "dim"),)),
    ("[seq] | [batch, seq]", (("seq",), ("batch", "seq"))),
    ("[3, seq] | [3, batch, seq]", ((3, "seq"), (3, "batch", "seq"))),
    ("[2 * max_relative_position + 1, d]", ((None, "d"),)),
    ("[...]", (("...",),)),
    ("broadcasts to [..., q_len, k_len]", None),
    ("[..., n, ...]", None),
])
def test_parse_shape(text: str, patterns) -> None:
    assert validation.parse_shape(text) == patterns


def test_good_inputs_give_the_axis_sizes(toy) -> None:
    check = toy(ATTN)
    sizes = check.check(xp, q=np.zeros((2, 3, 4)), k=np.zeros((5, 4)), v=np.zeros((1, 5, 6)))
    assert sizes == {"q_len": 3, "d": 4, "k_len": 5, "d_v": 6}


def test_not_an_array_names_the_input_and_the_type(toy) -> None:
    with pytest.raises(ParameterError, match=r"^k must be an array, got list$"):
        toy(ATTN).check(xp, q=np.zeros((3, 4)), k=[[0.0] * 4], v=np.zeros((5, 4)))


def test_a_required_input_may_not_be_none(toy) -> None:
    with pytest.raises(ParameterError, match=r"^v must be an array, got NoneType$"):
        toy(ATTN).check(xp, q=np.zeros((3, 4)), k=np.zeros((5, 4)), v=None)


def test_optional_and_absent_inputs_are_skipped(toy) -> None:
    check = toy(ATTN)
    check.check(xp, q=np.zeros((3, 4)), k=np.zeros((5, 4)), v=np.zeros((5, 2)), mask=None)
    check.check(xp, q=np.zeros((3, 4)))  # k and v not passed: the caller checks them itself


@pytest.mark.parametrize(("arrays", "message"), [
    ({"q": np.zeros((3, 4), np.int64)}, r"^q must have a real floating dtype, got int64$"),
    ({"q": np.zeros((3, 4), bool)}, r"^q must have a real floating dtype, got bool$"),
    ({"mask": np.zeros((3, 5), np.float32)}, r"^mask must have a boolean dtype, got float32$"),
])
def test_kind_errors(toy, arrays, message) -> None:
    with pytest.raises(ParameterError, match=message):
        toy(ATTN).check(xp, **arrays)


def test_int_kind(toy) -> None:
    check = toy('  - name: positions\n    kind: int\n    shape: "[seq] | [batch, seq]"\n')
    check.check(xp, positions=np.arange(3, dtype=np.uint8))
    with pytest.raises(ParameterError, match=r"^positions must have an integer dtype, got "
                                             r"float32$"):
        check.check(xp, positions=np.zeros(3, np.float32))
    loose = toy('  - name: positions\n    kind: int\n    shape: "[seq]"\n',
                skip_kind=["positions"])
    loose.check(xp, positions=np.zeros(3, np.float32))


def test_rank_error_quotes_the_spec_pattern(toy) -> None:
    with pytest.raises(ParameterError, match=r"^q must have shape \[\.\.\., q_len, d\], got "
                                             r"shape \(4,\)$"):
        toy(ATTN).check(xp, q=np.zeros(4))


def test_alternatives_and_fixed_sizes(toy) -> None:
    check = toy('  - name: positions\n    kind: int\n    shape: "[3, seq] | [3, batch, seq]"\n')
    assert check.check(xp, positions=np.zeros((3, 7), int)) == {"seq": 7}
    assert check.check(xp, positions=np.zeros((3, 2, 7), int)) == {"batch": 2, "seq": 7}
    for shape in [(4, 7), (7,), (3, 1, 2, 7)]:
        with pytest.raises(ParameterError, match=r"^positions must have shape \[3, seq\] \| "
                                                 r"\[3, batch, seq\], got shape "
                                                 + rf"\({', '.join(map(str, shape))},?\)$"):
            check.check(xp, positions=np.zeros(shape, int))


def test_named_axes_must_agree_across_inputs(toy) -> None:
    with pytest.raises(ParameterError, match=r"^k has shape \(5, 3\) but q has shape \(2, 3, 4\):"
                                             r" they must agree on d \(3 != 4\)$"):
        toy(ATTN).check(xp, q=np.zeros((2, 3, 4)), k=np.zeros((5, 3)), v=np.zeros((5, 3)))
    with pytest.raises(ParameterError, match=r"^v has shape \(4, 2\) but k has shape \(5, 4\): "
                                             r"they must agree on k_len \(4 != 5\)$"):
        toy(ATTN).check(xp, q=np.zeros((3, 4)), k=np.zeros((5, 4)), v=np.zeros((4, 2)))


def test_a_name_twice_in_one_shape_is_one_size(toy) -> None:
    check = toy('  - name: a\n    kind: float\n    shape: "[d, d]"\n')
    check.check(xp, a=np.zeros((3, 3)))
    with pytest.raises(ParameterError, match=r"they must agree on d \(4 != 3\)"):
        check.check(xp, a=np.zeros((3, 4)))


def test_leading_dims_are_free(toy) -> None:
    """``...`` is not an axis name: q and k may have different batch dims (they broadcast)."""
    toy(ATTN).check(xp, q=np.zeros((2, 1, 3, 4)), k=np.zeros((7, 5, 4)), v=np.zeros((5, 4)))


def test_float_inputs_share_one_dtype(toy) -> None:
    with pytest.raises(ParameterError, match=r"^q, k and v must share one dtype, got q float32, "
                                             r"k float64, v float32$"):
        toy(ATTN).check(xp, q=np.zeros((3, 4), np.float32), k=np.zeros((5, 4)),
                        v=np.zeros((5, 4), np.float32))
    toy(ATTN, same_dtype=["q", "v"]).check(xp, q=np.zeros((3, 4), np.float32),
                                             k=np.zeros((5, 4)), v=np.zeros((5, 4), np.float32))
    toy(ATTN, same_dtype=False).check(xp, q=np.zeros((3, 4), np.float32), k=np.zeros((5, 4)),
                                      v=np.zeros((5, 4), np.float16))


def test_messages_replace_the_defaults(toy) -> None:
    check = toy(ATTN, messages={
        "axis:d": "{first} and {name} must have the same last dim, got shapes {first_shape} and "
                  "{shape}",
        "rank:q": lambda f: f"q needs {f['min_rank']} dims, got {len(f['shape'])}",
        "dtypes": "{names} must share one dtype, got {dtypes}",
    })
    with pytest.raises(ParameterError, match=r"^q and k must have the same last dim, got shapes "
                                             r"\(3, 4\) and \(5, 3\)$"):
        check.check(xp, q=np.zeros((3, 4)), k=np.zeros((5, 3)), v=np.zeros((5, 3)))
    with pytest.raises(ParameterError, match=r"^q needs 2 dims, got 1$"):
        check.check(xp, q=np.zeros(4))
    with pytest.raises(ParameterError, match=r"^q, k and v must share one dtype, got float64, "
                                             r"float32, float64$"):
        check.check(xp, q=np.zeros((3, 4)), k=np.zeros((5, 4), np.float32), v=np.zeros((5, 4)))


def test_unknown_names_are_a_spec_error(toy) -> None:
    with pytest.raises(SpecError, match=r"toy: no input\(s\) w \(declared: q, k, v, mask\)"):
        toy(ATTN, same_dtype=["q", "w"])


def test_the_shipped_spec_is_read_whatever_the_spec_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("POSENC_SPEC_DIR", str(tmp_path))
    assert [d.name for d in validation.Inputs("rope").declared] == ["x", "positions"]


def test_checks_trace_under_torch_compile_fullgraph() -> None:
    """Shape and dtype checks only: torch.compile(fullgraph=True) traces them with symbolic
    shapes too, and a checked encoding gives the eager result."""
    torch = pytest.importorskip("torch")
    import posenc

    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    compiled = torch.compile(posenc.attention, fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled(q, k, v), posenc.attention(q, k, v))
    q, k, v = torch.randn(3, 7, 4), torch.randn(3, 9, 4), torch.randn(3, 9, 2)
    torch.testing.assert_close(compiled(q, k, v), posenc.attention(q, k, v))


def test_sizes_known_beforehand(toy) -> None:
    """A size fixed by a parameter (T5's num_buckets rows) is checked like an input's."""
    check = toy('  - name: table\n    kind: float\n    shape: "[num_buckets, heads]"\n')
    assert check.check(xp, {"num_buckets": 4}, table=np.zeros((4, 2))) == {
        "num_buckets": 4, "heads": 2}
    with pytest.raises(ParameterError, match=r"^table must have shape \[num_buckets, heads\] = "
                                             r"\[4, heads\], got shape \(3, 2\)$"):
        check.check(xp, {"num_buckets": 4}, table=np.zeros((3, 2)))
