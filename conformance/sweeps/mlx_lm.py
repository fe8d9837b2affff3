"""``posenc sweep mlx-lm``: what mlx-lm's own model classes rotate, family by family.

For each transformers family (:func:`posenc.conformance.sweeps.transformers_families.discover`), its
config class with the sizes shrunk (the transformers sweep's ``tiny_config``) is given to
mlx-lm as a hub ``config.json`` carries it (:func:`hub_config`). mlx-lm picks its module
(``mlx_lm.utils._get_classes``: ``mlx_lm.models.<model_type>`` after its own remapping) and
builds the ``Model`` on CPU, no weights. Then:

- **wiring**: every attention layer's rope module is wrapped with a recorder and the model
  runs a prefill of 6 tokens and a decode step with its KV cache: each call's q or k, the
  rotated result and the cache offset the layer passed are kept; a layer that never calls its
  rope is one the engine leaves unrotated;
- **positions**: each layer's recorded module is applied as the attention applies it
  (``rope(x, offset=o)``) to a prefill of 8 positions and to single decode tokens at 100, at
  the original context - 1, + 0, + 1 and at twice it.

Each rotation is graded against posenc's float64 rotation of that layer's rope
(:mod:`.engine_report`), in the pairing the transformers sweep found for the family.

Every family is read twice: from its config spelled with the transformers 4 keys hub
checkpoints carry (``rope_theta``, ``rope_scaling``), and from the ``config.json`` that
transformers' own ``save_pretrained`` writes today (rope_theta only inside
``rope_parameters``), its rope_theta made distinct so that a default base cannot pass by
chance (:func:`with_saved`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import engine_judge
from .engine_report import EngineRow, run_forked, sweep_each
from .transformers_reading import LAYOUTS, Finding, LayerRope, rotate

ENGINE = "mlx-lm"
# divergences settled in float64: (family or "*", diagnosis substring or substrings that must
# all be in the reason) -> adjudication
# (tests/peers/test_engine_sweeps.py holds each with an independent float64 computation)
ADJUDICATED: engine_judge.Adjudicated = {
    ("glm", "partial rotary width is ignored"): (
        "mlx-lm bug: glm.py builds nn.RoPE over the whole head and never reads "
        "partial_rotary_factor (0.5 for GLM): every feature is rotated where transformers "
        "rotates half (known-issues.md#mlx-lm-0322-glm-rotates-the-whole-head-not-"
        "partial_rotary_factor-of-it)"),
    ("gpt_oss", "truncate: false is not read"): (
        "mlx-lm bug: YarnRoPE always floors and ceils the correction range; gpt-oss's "
        "truncate: false asks for the unrounded one, as transformers and OpenAI's reference "
        "compute it (known-issues.md#mlx-lm-0322-yarn-ignores-truncate-false-gpt-oss)"),
    ("muse_spark", "pairs as 'interleaved'"): (
        "documented convention: sanitize() reorders each head's q and k projection rows with "
        "interleave_rope_rows, (i, i + d/2) -> (2i, 2i + 1), so the interleaved rope on the "
        "loaded weights rotates the pairs transformers rotates (scores equal); the forward "
        "itself needs Metal (qk_norm_rope)"),
    ("*", ("config.json as transformers saves it", "rope_parameters is not read")): (
        "mlx-lm bug: the model's ModelArgs read rope_theta and rope_scaling as top-level keys "
        "only; transformers 5 writes them inside rope_parameters, so a checkpoint saved by it "
        "is rotated with the dataclass default base (10000) and no scaling, silently "
        "(known-issues.md#mlx-lm-0322-configs-saved-by-transformers-5-lose-their-rope)"),
}
SAVED = "config.json as transformers saves it (rope_parameters only)"
UNREAD = ("rope_parameters is not read: deleting it changes no rotation (the model's own "
          "defaults rotate)")


# -- in the child process ----------------------------------------------------------------------
def observe(family: Any) -> dict[str, Any]:
    """What mlx-lm computes for the family given its config as a hub config.json of the
    transformers 4 era spells it (run in a forked process; see :mod:`.mlx_lm_observer`)."""
    return _observe(family, saved=False)


def observe_saved(family: Any) -> dict[str, Any]:
    """What mlx-lm computes for the family given the config.json transformers' own
    ``save_pretrained`` writes (rope_theta inside ``rope_parameters`` only), its rope_theta
    made distinct (:func:`.mlx_lm_observer.saved_config`)."""
    return _observe(family, saved=True)


def observe_without_rope_parameters(family: Any) -> dict[str, Any]:
    """:func:`observe_saved` with ``rope_parameters`` deleted from the config.json: the
    control that tells whether the engine reads it at all."""
    return _observe(family, saved=True, strip=True)


def _observe(family: Any, saved: bool, strip: bool = False) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm.utils import _get_classes

    from posenc.conformance.sweeps.transformers_families import table_positions

    from . import mlx_lm_observer as seen

    mx.set_default_device(mx.cpu)
    config_obj, config, why = seen.tiny(family)
    if config is None:
        return {"model_type": "", "unsupported": "", "problem": why}
    if saved:
        written = seen.saved_config(config_obj)
        if written is None:
            return {"model_type": "", "unsupported": "", "problem": "no rope_parameters"}
        hub, config = written
        hub = seen.with_sizes(hub, config)
        if strip:
            hub = {k: v for k, v in hub.items() if k != "rope_parameters"}
    else:
        hub = seen.hub_config(config)
    obs: dict[str, Any] = {"model_type": config.get("model_type", ""), "config": config}
    try:
        model_cls, args_cls = _get_classes(hub)
    except ValueError as exc:
        if family.name == hub.get("model_type"):
            return {**obs, "unsupported": str(exc)}
        # a composite family (Qwen2-VL): its hub config names the family's model_type and
        # holds the text model's config as text_config
        hub = {**hub, "model_type": family.name, "text_config": hub}
        try:
            model_cls, args_cls = _get_classes(hub)
        except ValueError:
            return {**obs, "unsupported": str(exc)}
        obs["model_type"] = family.name
    obs["architecture"] = model_cls.__module__
    obs["default_bases"] = seen.default_bases(args_cls)
    model = model_cls(args_cls.from_dict(seen.with_config_fields(hub, args_cls, config_obj,
                                                                  not saved)))
    obs["layers"] = len(seen.block_indices(model)) or int(config.get("num_hidden_layers") or 0)
    recording, obs["forward"] = seen.record_forward(model)
    obs["calls"] = recording.calls
    modules = seen.rope_modules(model)
    replays = dict(recording.replays)
    for index, (_, _, rope) in modules.items():  # a layer the forward did not reach
        replays.setdefault(index, lambda x, o, rope=rope: rope(x, offset=o))
    offsets = sorted({p for p in table_positions(_Attributes(config)) if p >= 100})
    widths = {c["layer"]: c["x"].shape[-1] for c in recording.calls}
    dims = {c["layer"]: c["dims"] for c in recording.calls}
    obs["applied"] = []
    for index, replay in replays.items():
        rope = modules.get(index, (None, None, None))[2]
        width = widths.get(index) or int(getattr(rope, "dims", 0) or config.get("head_dim") or 16)
        try:
            obs["applied"] += [dict(c, layer=index) for c in seen.apply(
                replay, width, offsets, dims.get(index, getattr(rope, "dims", None)))]
        except Exception as exc:
            from posenc.conformance.sweeps.transformers_observation import last_frame

            obs.setdefault("apply_problems", {})[index] = last_frame(exc)
    return obs


class _Attributes:
    """A config dict read as attributes (what table_positions reads)."""

    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)


# -- the verdict -------------------------------------------------------------------------------
def judge(family: str, obs: dict[str, Any], pairings: tuple[str, ...] = LAYOUTS,
          unrotated: frozenset[int] = frozenset()) -> EngineRow:
    """mlx-lm's verdict on one observation (:func:`.engine_judge.judge`)."""
    return engine_judge.judge(ENGINE, ADJUDICATED, family, obs, pairings, unrotated)


def ignores_rope_parameters(family: Any, saved: dict[str, Any]) -> bool:
    """Whether every rotation of the ``saved`` observation is the one the engine computes with
    ``rope_parameters`` deleted from the config (to float32 round-off): the engine never read
    it, and its own defaults rotated (a controlled experiment, not a reading of its code)."""
    try:
        control = run_forked(observe_without_rope_parameters, family)
    except Exception:  # without rope_parameters the engine refuses: it reads something there
        return False
    pairs = [(a, b) for part in ("calls", "applied")
             for a, b in zip(saved.get(part, []), control.get(part, []), strict=False)]
    if not pairs or len(saved.get("calls", [])) != len(control.get("calls", [])):
        return False
    return all(a["y"].shape == b["y"].shape and a["layer"] == b["layer"] and np.allclose(
        a["y"], b["y"], rtol=1e-6, atol=1e-6 * max(float(np.max(np.abs(a["x"]))), 1.0))
        for a, b in pairs)


def with_saved(row: EngineRow, family: Any, known: dict[str, Any]) -> EngineRow:
    """``row`` (the family's verdict on a transformers 4 style hub config) with the verdict
    on the config.json transformers itself now writes: a family that conforms on the first
    and diverges on the second diverges (every checkpoint saved by transformers 5 reaches
    the engine so); one whose saved config does not load says so beside its verdict."""
    try:
        obs = run_forked(observe_saved, family)
    except Exception as exc:  # the engine refuses the config: loud, not a silent divergence
        row.saved_config = f"does not load: {str(exc)[:160]}"
        return row
    if "unsupported" in obs:
        return row
    saved = judge(row.family, obs, known.get("pairings") or LAYOUTS,
                  frozenset(known.get("unrotated", ())))
    if saved.verdict == "diverges" and ignores_rope_parameters(family, obs):
        saved.reason = f"{UNREAD}; {saved.reason}"
    row.saved_config = saved.verdict + (f": {saved.reason}" if saved.verdict == "diverges"
                                        else "")
    if row.verdict == "conforms" and saved.verdict == "diverges":
        row.verdict, row.profile = "diverges", None
        row.reason = f"{SAVED}: {saved.reason}"
        row.findings += [Finding(f"saved config {f.part}", f.what, f.grade, f.max_abs, f.note,
                                 f.field) for f in saved.findings]
        row.max_abs = max(row.max_abs, saved.max_abs)
        engine_judge.adjudicate(row, ADJUDICATED)
    return row


# -- the sweep -----------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    import sys
    from importlib.metadata import version

    return {"mlx-lm": version("mlx-lm"), "mlx": version("mlx"),
            "transformers": version("transformers"), "python": sys.version.split()[0]}


def sweep_files() -> list[Path]:
    here = Path(__file__).parent
    return [here / "mlx_lm.py", here / "mlx_lm_observer.py", here / "engine_judge.py",
            here / "engine_report.py",
            here / "transformers_reading.py"]


def sweep(families: list[Any], truth: dict[str, dict[str, Any]],
          progress: Any = None) -> list[EngineRow]:
    """The verdicts on ``families``, each observed in a forked process; ``truth``: the
    transformers sweep's pairings and unrotated layers per family (:func:`.command.truth`)."""
    import mlx.core  # noqa: F401  (imported once, before the forks)
    import mlx_lm.utils  # noqa: F401
    import transformers  # noqa: F401

    return sweep_each(families, truth, progress, _verdict)


def _verdict(family: Any, known: dict[str, Any]) -> EngineRow:
    row = judge(family.name, run_forked(observe, family), known.get("pairings") or LAYOUTS,
                frozenset(known.get("unrotated", ())))
    if row.verdict in ("conforms", "diverges"):
        row = with_saved(row, family, known)
    return row


def reference_rotation(x: np.ndarray, positions: np.ndarray, layer: LayerRope,
                       pairing: str) -> np.ndarray:
    """posenc's float64 rotation the sweep holds a layer to (for the tests)."""
    return rotate(x, positions, layer, pairing)
