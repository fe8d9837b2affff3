"""What every peer adapter shares: a Backend that knows which pip packages the peer needs,
and the shape plumbing between posenc's conventions and the usual [batch, heads, seq, dim]."""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from posenc.errors import MissingFrameworkError, Unsupported

from ..backend import Backend


class MissingPeerError(MissingFrameworkError):
    """A peer adapter whose peer (or the array library it runs on) is not installed."""

    def __init__(self, backend: str, module: str, package: str) -> None:
        ImportError.__init__(self, f"{backend} needs the {module!r} module, which is not "
                                   f"installed: pip install {package}")
        self.framework, self.extra, self.package = module, package, package


@dataclass
class PeerBackend(Backend):
    """A Backend over someone else's implementation: ``packages`` maps each module the
    adapter imports to its pip package; none of them is imported before the first check."""

    packages: dict[str, str] = dataclasses.field(default_factory=dict)
    version_of: tuple[str, ...] = ()  # the pip packages whose versions the scoreboard prints
    # check-id glob -> one line on a known deviation no diagnosis names (the scoreboard's note)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)

    def missing(self) -> tuple[str, str] | None:
        """The first (module, pip package) that is not installed, or None."""
        for module, package in self.packages.items():
            if importlib.util.find_spec(module) is None:
                return module, package
        return None

    def available(self) -> bool:
        return self.missing() is None

    def namespace(self) -> ModuleType:
        gone = self.missing()
        if gone is not None:
            raise MissingPeerError(self.name, *gone)
        return super().namespace()


def peer_backend(base: Backend, name: str, *, packages: dict[str, str],
                 version_of: tuple[str, ...], notes: dict[str, str] | None = None,
                 **changes: Any) -> PeerBackend:
    """``base`` (posenc's torch, jax or numpy backend) with the peer's overrides and scope."""
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
    fields.update(name=name, own_code=False, compile=None, vjp=None, requires=None, extra=None,
                  expectations={}, **changes)
    return PeerBackend(packages=packages, version_of=version_of, notes=dict(notes or {}),
                       **fields)


def as_bhsd(x_shape: tuple[int, ...], positions: np.ndarray | None,
            ) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """posenc's x [..., seq, dim] as [batch, heads, seq, dim], and positions as [batch, seq]
    int64. Positions [batch, seq] apply to x[b, ..., s, :]: the first axis of x (when it has
    more than two) is the batch and the axes between it and seq are heads."""
    seq, dim = x_shape[-2:]
    if len(x_shape) == 2:
        batch, heads = 1, 1
    else:
        batch, heads = x_shape[0], int(np.prod(x_shape[1:-2], dtype=np.int64))
    if positions is None:
        pos = np.broadcast_to(np.arange(seq, dtype=np.int64), (batch, seq))
    elif positions.ndim == 1:
        pos = np.broadcast_to(positions.astype(np.int64), (batch, seq))
    else:
        if positions.shape != (batch, seq):
            raise Unsupported(f"positions of shape {positions.shape} for x of shape {x_shape}")
        pos = positions.astype(np.int64)
    return (batch, heads, seq, dim), np.array(pos, dtype=np.int64, order="C")


def rotary_dim_of(dim: int, rotary_dim: int | None, scaling: dict[str, Any] | None) -> int:
    """The number of rotated features: rotary_dim, or dim * partial_rotary_factor."""
    factor = (scaling or {}).get("partial_rotary_factor")
    if rotary_dim is not None:
        return int(rotary_dim)
    return int(dim * factor) if factor is not None else dim


def require(condition: bool, reason: str) -> None:
    """Raise :class:`posenc.Unsupported` with ``reason`` unless ``condition`` holds."""
    if not condition:
        raise Unsupported(reason)


def via_interleaved(x: Any, r: int, rotate: Any) -> Any:
    """The half layout on a peer that pairs (2i, 2i + 1) only: features (i, i + r/2) moved
    next to each other, ``rotate`` (interleaved), and moved back (exact, as a port of a
    half-layout checkpoint onto it does). ``x`` is a torch tensor."""
    import torch

    pairs = torch.stack([torch.arange(r // 2), torch.arange(r // 2) + r // 2], -1).flatten()
    order = torch.cat([pairs, torch.arange(r, x.shape[-1])]).to(x.device)
    return rotate(x[..., order])[..., torch.argsort(order)]


MAX_CACHE = 2**25  # cos/sin cache entries (rows × r) a peer builds per call: 128 MiB in float32


def cache_rows(pos: np.ndarray, r: int, peer: str) -> int:
    """Rows of a peer's cos/sin cache of positions 0..max(pos) (``peer`` indexes it by
    position), refusing negative positions and caches over ``MAX_CACHE`` entries."""
    rows = int(pos.max()) + 1 if pos.size else 1
    require(pos.size == 0 or int(pos.min()) >= 0, f"{peer} indexes a cache of positions 0..")
    require(rows * r <= MAX_CACHE, f"{peer}'s cache for position {rows - 1} holds {rows} rows "
            f"(over {MAX_CACHE} entries: not built here)")
    return rows


def linear_factor(scaling: dict[str, Any] | None, only: str) -> float:
    """The factor of a linear scaling (1 for none); any other schedule is unsupported with
    ``only`` (what the peer has) and the schedule's name as the reason."""
    if scaling is None:
        return 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    require(kind == "linear" and set(scaling) <= {"rope_type", "type", "factor"},
            f"{only}, not {kind!r}")
    return float(scaling["factor"])
