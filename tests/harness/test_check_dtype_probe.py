"""``posenc.conformance.check()`` chooses dtypes as ``posenc check`` does: the same probe, the
same scope, and the report says which dtypes were chosen and why."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from posenc.cli import main as posenc_main
from posenc.conformance import check

NAMES = {"base": "theta", "positions": "position_ids"}


def float32_only(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
    """A correct half-layout rope (float64 angles) that refuses every dtype but float32."""
    if x.dtype != np.float32:
        raise TypeError(f"float32 only, got {x.dtype}")
    angles = np.asarray(position_ids, np.float64)[..., None] * (
        1.0 / theta ** (np.arange(0, x.shape[-1], 2) / x.shape[-1]))
    if angles.ndim == 3:
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    a, b = np.split(np.asarray(x, np.float64), 2, axis=-1)
    cos, sin = np.cos(angles), np.sin(angles)
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1).astype(x.dtype)


def _scope(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(check id without the backend's name, status)."""
    return sorted((cid.split("/", 1)[1], status) for cid, status in rows)


def test_the_api_and_the_cli_choose_the_same_dtypes_and_scope(tmp_path: Any, capsys: Any) -> None:
    report = check(float32_only, "rope", names=NAMES, framework="numpy", properties=False,
                   gradients=False)
    assert report.passed, report.text()
    assert {r.check.dtype for r in report.results} == {"float32"}
    assert report.dtype_choice.startswith("plan: dtypes float32 (probed on 3 of rope's smallest")
    assert "float64: it raises TypeError: float32 only, got float64" in report.dtype_choice
    assert "dtypes= checks one anyway" in report.dtype_choice
    assert report.dtype_choice in report.text()

    out = tmp_path / "report.json"
    code = posenc_main(["check", "rope", f"{__name__}:float32_only", "--map", "base=theta",
                        "--map", "positions=position_ids", "--framework", "numpy",
                        "--only", "cases", "--json", str(out)])
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert code == 0, printed
    assert report.dtype_choice.replace("dtypes= checks", "--dtype checks") in printed
    assert data["options"]["dtype_choice"] in printed
    assert _scope([(r["id"], r["status"]) for r in data["results"]]) == _scope(
        [(r.check.id, r.status) for r in report.results])


def test_asked_dtypes_are_checked_as_asked_and_say_so() -> None:
    """dtypes= is not probed: a refused dtype is checked and reports the refusal as an error."""
    report = check(float32_only, "rope", names=NAMES, framework="numpy", properties=False,
                   gradients=False, dtypes=["float64", "float32"])
    assert report.dtype_choice == "plan: dtypes float64, float32 (asked)"
    errors = [r for r in report.results if r.status == "error"]
    assert errors and {r.check.dtype for r in errors} == {"float64"}
    assert all("float32 only, got float64" in r.message for r in errors)
