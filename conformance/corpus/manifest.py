"""``<encoding>.manifest``: one encoding of the corpus as whitespace-separated lines, for
readers without a JSON parser (``examples/c/rope_check.c`` reads it with ``sscanf``).

Every line is a keyword and tokens without spaces; the file is the JSON document's content:

    posenc-manifest 1.0 rope 31              (format, corpus_version, encoding, vectors)
    tol float32 exact ATOL RTOL ANGLE ANGLE_EPS LOG_RTOL     (per result dtype and profile)
    vector NAME
    scale SCALE angle_bound ANGLE_BOUND
    param base 10000.0                        (resolved parameters; nested keys dotted:
    param scaling.rope_type linear             scaling.factor; null -> none; a list -> a,b,c)
    input x arrays/rope/NAME/in.x.bin float64 4 1 2 64 128     (path dtype ndim dims...)
    input positions - none 0                  (an omitted optional input)
    output arrays/rope/NAME/out.bin float64 4 1 2 64 128
    flag DIAGNOSIS float64,float32 PATH       (PATH: its planted output, or -)
    end
"""

from __future__ import annotations

import json
from typing import Any

FORMAT = "posenc-manifest"


def _token(value: Any, where: str) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                       for v in value):
        text = ",".join(_token(v, where) for v in value) or "[]"
    elif isinstance(value, int | str):
        text = str(value)
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"{where}: the value {value!r} has no whitespace-free manifest token")
    return text


def _params(params: dict[str, Any], prefix: str = "") -> list[str]:
    lines = []
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            lines += _params(value, f"{name}.")
        else:
            lines.append(f"param {name} {_token(value, f'parameter {name}')}")
    return lines


def _array(record: dict[str, Any] | None) -> str:
    if record is None:
        return "- none 0"
    return " ".join([record["path"], record["dtype"], str(len(record["shape"])),
                     *map(str, record["shape"])])


def manifest(doc: dict[str, Any]) -> str:
    """The manifest text of an encoding's JSON document (:func:`.corpus_vectors.document`)."""
    lines = [f"{FORMAT} {doc['corpus_version']} {doc['encoding']} {len(doc['vectors'])}"]
    for dtype, profiles in doc["tolerances"].items():
        for profile, t in profiles.items():
            lines.append(f"tol {dtype} {profile} {t['atol']!r} {t['rtol']!r} {t['angle']!r} "
                         f"{t['angle_eps']!r} {t['log_rtol']!r}")
    for v in doc["vectors"]:
        lines += [f"vector {v['name']}", f"scale {v['scale']!r} angle_bound {v['angle_bound']!r}"]
        lines += _params(v["resolved_params"])
        lines += [f"input {i['name']} {_array(i['array'])}" for i in v["inputs"]]
        lines.append(f"output {_array(v['output'])}")
        lines += [f"flag {f['diagnosis']} {','.join(f['distinguishable_in'])} "
                  f"{f['planted']['path'] if 'planted' in f else '-'}" for f in v["flags"]]
        lines.append("end")
    return "\n".join(lines) + "\n"
