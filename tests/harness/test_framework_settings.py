"""Someone else's JAX code is checked under its users' settings: 64-bit mode around its float64
checks only, the matmul precision as the caller has it (or as the run asks), and the report
says which settings were in force. posenc's own JAX backend keeps "highest"."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.conformance import Options, check, run
from posenc.errors import ParameterError

jax = pytest.importorskip("jax")
jnp = jax.numpy

NAMES = {"positions": "position_ids", "base": "theta"}
CASES = {"properties": False, "gradients": False, "max_examples": 2}


def _rotate(x: Any, angles: Any) -> Any:
    """Half-layout rotation of x by angles [..., seq, dim/2], in the angles' dtype."""
    a, b = jnp.split(x.astype(angles.dtype), 2, axis=-1)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], -1).astype(x.dtype)


def _per_row(position_ids: Any, inv_freq: Any, x: Any) -> Any:
    angles = position_ids[..., None] * inv_freq
    if angles.ndim == 3:  # [batch, seq] lines up with x[b, ..., s, :]
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    return angles


def arange_rope(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
    """A rope as JAX users write it: angles from jnp.arange in JAX's default float dtype
    (float32 unless 64-bit mode is on)."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (jnp.arange(0, d, 2) / d)
    return _rotate(x, _per_row(jnp.asarray(position_ids), inv_freq, x))


def _probe(seen: list[tuple[str, bool, Any]]) -> Any:
    def probed(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
        seen.append((str(x.dtype), bool(jax.config.jax_enable_x64),
                     jax.config.jax_default_matmul_precision))
        return arange_rope(x, position_ids, theta)

    return probed


# the settings are the run's, not a case's: a few cases show them (each case JAX compiles anew)
FEW = ("half_default_positions", "batched_left_padding", "decode_one_token")


def _all_cases_but(keep: tuple[str, ...]) -> list[str]:
    from posenc.catalog import specs

    return [f"*/case:{c.name}" for c in specs()["rope"].cases if c.name not in keep]


def _flags_by_dtype(seen: list[tuple[str, bool, Any]]) -> dict[str, set[tuple[bool, Any]]]:
    out: dict[str, set[tuple[bool, Any]]] = {}
    for dtype, x64, precision in seen:
        out.setdefault(dtype, set()).add((x64, precision))
    return out


def test_x64_is_on_around_the_float64_checks_only_and_matmul_precision_is_the_callers() -> None:
    assert not jax.config.jax_enable_x64  # the test runs JAX at its defaults
    seen: list[tuple[str, bool, Any]] = []
    report = check(_probe(seen), "rope", names=NAMES, framework="jax",
                   dtypes=["float64", "float32", "bfloat16"], skip=_all_cases_but(FEW), **CASES)
    assert report.in_scope and not [r for r in report.results if r.status == "error"], report.text()
    flags = _flags_by_dtype(seen)
    assert flags == {"float64": {(True, None)}, "float32": {(False, None)},
                     "bfloat16": {(False, None)}}, flags
    assert not jax.config.jax_enable_x64  # nothing left behind
    text = report.text()
    assert "jax, float32 checks: 64-bit mode off (the caller's), matmul precision default " \
           "(the caller's)" in text, text
    assert "jax, float64 checks: 64-bit mode on (float64 needs it)" in text, text


def test_a_matmul_precision_the_run_asks_for_is_the_one_the_code_sees() -> None:
    seen: list[tuple[str, bool, Any]] = []
    report = check(_probe(seen), "rope", names=NAMES, framework="jax", dtypes=["float32"],
                   settings={"matmul_precision": "highest"}, **CASES)
    assert report.in_scope and _flags_by_dtype(seen) == {"float32": {(False, "highest")}}
    assert "matmul precision highest (asked)" in report.text()
    with pytest.raises(ParameterError, match=r"matmul_precision.*'fastest'"):
        check(_probe([]), "rope", names=NAMES, framework="jax", dtypes=["float32"],
              settings={"matmul_precision": "fastest"}, **CASES)


def test_a_jax_rope_with_float32_angles_is_graded_as_its_users_run_it() -> None:
    """float32 angles from jnp.arange: conventional under JAX's defaults. The same code with
    64-bit mode on (the user's own choice) computes float64 angles: exact."""
    under_defaults = check(arange_rope, "rope", names=NAMES, framework="jax",
                           dtypes=["float32"], precision="conventional", **CASES)
    assert under_defaults.passed and under_defaults.grade == "conventional", under_defaults.text()
    with jax.enable_x64(True):
        with_x64 = check(arange_rope, "rope", names=NAMES, framework="jax",
                         dtypes=["float32"], precision="conventional", **CASES)
    assert with_x64.passed and with_x64.grade == "exact", with_x64.text()
    assert "64-bit mode on (the caller's)" in with_x64.text()


def test_posencs_own_jax_backend_keeps_highest_matmul_precision_and_says_so() -> None:
    results = run(Options(backends=["jax"], encodings=["t5_bias"], dtypes=["float32"],
                          modes=["eager"], properties=False, gradients=False))
    ran = [r for r in results if r.status != "unsupported"]
    assert ran and all(r.status == "pass" for r in ran), [r.message for r in ran]
    assert {r.details["settings"] for r in ran} == {
        "jax, float32 checks: 64-bit mode off (the caller's), matmul precision highest "
        "(posenc's own code)"}


def test_integers_past_the_int32_jax_holds_are_out_of_scope_not_fed_wrapped() -> None:
    """Without 64-bit mode JAX holds int32: positions past it cannot be fed faithfully, so the
    check is unsupported with posenc's reason instead of judging wrapped positions."""
    import numpy as np

    from posenc.backends import get_backend
    from posenc.catalog import specs
    from posenc.conformance.context import Context, Unsupported
    from posenc.conformance.tolerances import for_spec

    spec = specs()["rope"]
    ctx = Context(backend=get_backend("jax"), spec=spec, dtype="float32", mode="eager",
                  device="cpu", tol=for_spec(spec, "float32", "exact"))
    x = np.ones((2, 8))
    assert ctx.index_dtype == "int32"
    assert ctx.raw({"x": x, "positions": np.array([0, 2**24 - 1])}).shape == (2, 8)
    assert ctx.last_call[1]["positions"]["dtype"] == "int32"  # what the function was fed
    with pytest.raises(Unsupported, match=r"positions up to 4294967296 do not fit int32.*"
                                          r"posenc cannot feed them here"):
        ctx.raw({"x": x, "positions": np.array([0, 2**32])})
    with jax.enable_x64(True):  # the caller's 64-bit mode: int64, fed as they are
        wide = Context(backend=get_backend("jax"), spec=spec, dtype="float32", mode="eager",
                       device="cpu", tol=for_spec(spec, "float32", "exact"))
        assert wide.index_dtype == "int64"
        with pytest.raises(ParameterError, match="positions contains 4294967296"):  # fed whole:
            wide.raw({"x": x, "positions": np.array([0, 2**32])})  # posenc's rope refuses it


def test_torch_code_runs_at_the_callers_matmul_precision_unless_asked() -> None:
    torch = pytest.importorskip("torch")
    seen: list[str] = []

    def probed(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
        seen.append(torch.get_float32_matmul_precision())
        d = x.shape[-1]
        angles = position_ids.double()[..., None] * theta ** (
            -torch.arange(0, d, 2, dtype=torch.float64) / d)
        if angles.ndim == 3:
            angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
        a, b = x.double().chunk(2, -1)
        cos, sin = angles.cos(), angles.sin()
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)

    before = torch.get_float32_matmul_precision()
    report = check(probed, "rope", names=NAMES, framework="torch", dtypes=["float32"], **CASES)
    assert report.passed and set(seen) == {before}
    assert f"torch: float32 matmul precision {before} (the caller's)" in report.text()
    seen.clear()
    asked = check(probed, "rope", names=NAMES, framework="torch", dtypes=["float32"],
                  settings={"matmul_precision": "high"}, **CASES)
    assert asked.passed and set(seen) == {"high"}
    assert "torch: float32 matmul precision high (asked)" in asked.text()
    assert torch.get_float32_matmul_precision() == before  # nothing left behind
