"""Reading a transformers model config (``config.json`` as a dict) into one rope description
per layer type: ``rope_parameters`` (transformers 5, layer-keyed for Gemma 3/4), or the legacy
``rope_scaling`` beside ``rope_theta``, with the head width and context lengths the schedules
need. The scaling dict is validated by posenc's own schedule resolution, so unknown
``rope_type``s and keys a schedule does not use are errors naming the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import params
from ..encodings.rope_frequencies import Schedule, schedule, schedule_type
from ..errors import ParameterError
from ..rotary.mrope_orderings import config_ordering

LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
ALL_LAYERS = "all"
# MLA families (``qk_rope_head_dim``) whose attention rotates its slice by halves
# (transformers' ``rotate_half``): MiniCPM3, HY-V4. The other MLA families pair (2i, 2i+1):
# DeepSeek-V2 by complex multiplication, HY-V4-VL and DeepSeek-V4 by an interleaved
# ``rotate_half``, the rest by ``apply_rotary_pos_emb_interleave`` (DeepSeek-V3.2's and AXK2's
# main attention too; only their indexer rotates halves), unless the config's own
# ``rope_interleave`` says otherwise.
HALF_MLA = frozenset({"minicpm3", "hy_v4"})


def has_rope(layer_type: str) -> bool:
    """An attention layer type (``indexed_attention`` too); a hybrid model's ``conv``,
    ``mamba``, ``mlp`` (Dory's blocks) and ``linear_attention`` layers have no rope."""
    return "attention" in layer_type and not layer_type.startswith("linear")


@dataclass(frozen=True)
class RopeLayer:
    """The rope of one layer type, in transformers' terms.

    ``scaling``: a rope_parameters dict accepted by :func:`posenc.rope_frequencies` (with
    ``rope_theta``, and ``max_position_embeddings`` when the config has it). ``head_dim``:
    the width whose rotary slice is rotated (DeepSeek: ``qk_rope_head_dim``).
    ``interleaved``: the checkpoint's rotary pairing is (2i, 2i+1), not half: the config's
    ``rope_interleave`` where it has one, else the MLA families' but MiniCPM3's and HY-V4's.
    ``mrope_ordering``: the M-RoPE ordering the config names (posenc.mrope's ``ordering``:
    ERNIE 4.5-VL, Bailing or XD-RoPE from its model_type or keys), None for a text rope."""

    layer_type: str
    head_dim: int
    scaling: dict[str, Any]
    max_position_embeddings: int | None
    interleaved: bool = False
    notes: tuple[str, ...] = field(default=())
    mrope_ordering: str | None = None

    @property
    def rope_type(self) -> str:
        return schedule_type(self.scaling)

    @property
    def mrope_section(self) -> list[int] | None:
        return self.scaling.get("mrope_section")

    def resolve(self, seq_len: int | None = None) -> Schedule:
        return schedule(self.head_dim, scaling=self.scaling, seq_len=seq_len)


def require_layer(layer: Any) -> RopeLayer:
    """``layer`` is a :class:`RopeLayer` (what :func:`rope_layers` gives)."""
    if not isinstance(layer, RopeLayer):
        raise ParameterError(f"layer must be a RopeLayer (a value of "
                             f"posenc.dialects.rope_layers(config)), got {type(layer).__name__}")
    return layer


def require_qwen_mrope(layer: RopeLayer, target: str) -> None:
    """Refuse an M-RoPE ordering other than Qwen2-VL's or Qwen3-VL's, the only ones ``target``
    (a phrase ending in its verb) runs: a translation would rotate by other position rows."""
    if layer.mrope_ordering not in (None, "contiguous", "interleaved"):
        raise ParameterError(
            f"the config's M-RoPE ordering is {layer.mrope_ordering!r}: {target} Qwen2-VL's "
            "and Qwen3-VL's section orders only, so the translation would rotate by the wrong "
            "position rows")


def _head_dim(config: Mapping[str, Any], *, mla: bool = True) -> int:
    """The rotated head width: MLA's own slice (``qk_rope_head_dim``) unless ``mla`` is
    False, else ``head_dim``, else ``hidden_size // num_attention_heads`` (as transformers)."""
    def size(key: str) -> int:
        return params.count(key, config[key])

    if mla and config.get("qk_rope_head_dim") is not None:
        return size("qk_rope_head_dim")
    if config.get("head_dim") is not None:
        return size("head_dim")
    if config.get("hidden_size") is not None and config.get("num_attention_heads") is not None:
        return size("hidden_size") // size("num_attention_heads")
    raise ParameterError("config has no 'head_dim' (nor 'hidden_size' and "
                         "'num_attention_heads'): the rotary width is unknown")


def _interleaved(config: Mapping[str, Any], model_type: Any) -> bool:
    """The rotary pairing is (2i, 2i+1): the config's ``rope_interleave`` where it names one
    (DeepSeek-V3, Mistral 4, GLM-4 MoE Lite...), else an MLA family's own (see HALF_MLA)."""
    if config.get("rope_interleave") is not None:
        return bool(params.flag("rope_interleave", config["rope_interleave"]))
    return config.get("qk_rope_head_dim") is not None and model_type not in HALF_MLA


def _is_layer_keyed(rope: Mapping[str, Any]) -> bool:
    return bool(rope) and all(isinstance(v, Mapping) for v in rope.values())


def rope_layers(config: Mapping[str, Any]) -> dict[str, RopeLayer]:
    """``{layer_type: RopeLayer}`` of a transformers config dict (``{'all': ...}`` when every
    layer shares one rope). ``layer_types`` entries without attention (LFM3's ``conv``, Dory's
    ``mlp`` blocks, ``linear_attention``) have no rope and are skipped."""
    if not isinstance(config, Mapping):
        raise ParameterError(f"config must be a dict (a transformers config.json), got "
                             f"{type(config).__name__}")
    params.mapping("config", config)
    for key in ("rope_parameters", "rope_scaling"):
        params.mapping(key, config.get(key), optional=True)
    model_type = config.get("model_type")
    if "text_config" in config and not any(k in config for k in ("rope_parameters",
                                                                 "rope_scaling", "rope_theta")):
        config = config["text_config"]  # a multimodal config (Gemma 3, Qwen2.5-VL)
    model_type = config.get("model_type", model_type)
    head_dim, interleaved = _head_dim(config), _interleaved(config, model_type)
    rope = config.get("rope_parameters")
    key = "rope_parameters"
    if rope is None:
        rope, key = config.get("rope_scaling"), "rope_scaling"
    rope = dict(rope or {})
    if _is_layer_keyed(rope):
        per_layer = _keyed_layers(rope, config, key)
    else:
        per_layer = {ALL_LAYERS: rope}
    return {t: _layer(t, d, config, _layer_head_dim(t, config, head_dim), interleaved, key,
                      model_type) for t, d in per_layer.items()}


def _keyed_layers(rope: dict[str, Any], config: Mapping[str, Any],
                  key: str) -> dict[str, dict[str, Any]]:
    """The rope of each layer type ``layer_types`` uses (every keyed one without it)."""
    unknown = sorted(set(rope) - set(LAYER_TYPES))
    if unknown:
        raise ParameterError(f"{key} has layer type {unknown[0]!r}, not one of "
                             f"{', '.join(LAYER_TYPES)}")
    used = [t for t in dict.fromkeys(config.get("layer_types") or [])
            if t in rope or not isinstance(t, str) or has_rope(t)]
    for layer_type in used:
        if layer_type not in rope:
            raise ParameterError(
                f"{key} has no {layer_type!r} entry, which layer_types uses "
                f"(it has {', '.join(sorted(rope))})")
    return {t: dict(rope[t]) for t in (used or rope)}


def _layer_head_dim(layer_type: str, config: Mapping[str, Any], head_dim: int) -> int:
    """Gemma 4's full-attention layers have their own, wider heads: ``global_head_dim``, or
    (transformers 5.24's saved config) ``per_layer_config``'s ``head_dim`` for their layers."""
    if config.get("qk_rope_head_dim") is not None:
        return head_dim  # MLA: the rotary slice, whatever the head
    if layer_type == "full_attention" and config.get("global_head_dim") is not None:
        return params.count("global_head_dim", config["global_head_dim"])
    overrides = config.get("per_layer_config")
    if not overrides:
        return head_dim
    params.mapping("per_layer_config", overrides)
    by_index = {int(k): v for k, v in overrides.items() if str(k).strip().isdigit()}
    types = list(config.get("layer_types") or [])
    widths = set()
    for i, t in enumerate(types):
        if layer_type not in (t, ALL_LAYERS):
            continue
        entry = by_index.get(i) or {}  # keys as saved: "5" or "05"
        params.mapping(f"per_layer_config[{i}]", entry)
        widths.add(head_dim if entry.get("head_dim") is None else
                   params.count(f"per_layer_config[{i}]['head_dim']", entry["head_dim"]))
    if len(widths) > 1:
        raise ParameterError(f"per_layer_config gives the {layer_type!r} layers different "
                             f"head_dims ({sorted(widths)}): one rope per layer type cannot "
                             "describe them")
    return widths.pop() if widths else head_dim


def _layer(layer_type: str, scaling: dict[str, Any], config: Mapping[str, Any], head_dim: int,
           interleaved: bool, key: str, model_type: Any = None) -> RopeLayer:
    where = key if layer_type == ALL_LAYERS else f"{key}[{layer_type!r}]"
    if "rope_theta" not in scaling:
        if config.get("rope_theta") is None:
            raise ParameterError(f"{where} has no 'rope_theta' and neither has the config")
        scaling["rope_theta"] = config["rope_theta"]
    if "partial_rotary_factor" not in scaling and config.get("partial_rotary_factor") \
            not in (None, 1.0):
        scaling["partial_rotary_factor"] = config["partial_rotary_factor"]
    _mla_factor(scaling, config, where)
    if "original_max_position_embeddings" not in scaling and \
            config.get("original_max_position_embeddings") is not None:
        # Phi-3.5's config.json keeps it beside rope_scaling, where Phi3Config reads it
        scaling["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    max_positions = config.get("max_position_embeddings")
    if max_positions is not None:
        max_positions = params.count("max_position_embeddings", max_positions)
    if max_positions is not None and "max_position_embeddings" not in scaling:
        scaling["max_position_embeddings"] = max_positions
    scaling.setdefault("rope_type", scaling.pop("type", "default"))
    notes: tuple[str, ...] = ()
    if "llama_4_scaling_beta" in scaling:  # Ministral 3: a query temperature, not the rope
        beta = scaling.pop("llama_4_scaling_beta")
        notes = (f"llama_4_scaling_beta={beta!r} scales the queries by position (posenc's "
                 "query_temperature, form 'ministral3'); it leaves the rope unchanged",)
    if scaling["rope_type"] == "mrope":  # Qwen2-VL's legacy name: default frequencies
        scaling["rope_type"] = "default"
    try:
        schedule(head_dim, scaling=scaling)
        ordering = None
        if "mrope_section" in scaling or "xdrope_section" in scaling:
            named = {**scaling, **({"model_type": model_type} if model_type else {})}
            ordering = config_ordering(named) or "contiguous"
    except ParameterError as exc:
        raise ParameterError(f"{where}: {exc}") from None
    return RopeLayer(layer_type, head_dim, scaling, max_positions, interleaved, notes, ordering)


def _mla_factor(scaling: dict[str, Any], config: Mapping[str, Any], where: str) -> None:
    """An MLA config's ``partial_rotary_factor`` (Mistral 4, DeepSeek-V4) is
    ``qk_rope_head_dim / head_dim``: transformers' rotary module rotates ``head_dim * factor``
    features, the slice posenc already takes as the head, so the factor is dropped rather
    than applied twice. A factor naming another width is an error."""
    factor = scaling.get("partial_rotary_factor")
    if config.get("qk_rope_head_dim") is None or factor is None:
        return
    rope_dim = _head_dim(config)
    full = _head_dim(config, mla=False)
    rotated = int(full * params.positive(f"{where}['partial_rotary_factor']", factor))
    if rotated != rope_dim:
        raise ParameterError(
            f"{where}['partial_rotary_factor']={factor!r} rotates {rotated} features of the "
            f"{full}-wide head, but qk_rope_head_dim is {rope_dim}: the rotary slice is unclear")
    del scaling["partial_rotary_factor"]
