"""Shape checks shared by the encodings that work on attention scores."""

from __future__ import annotations

from .errors import ParameterError


def broadcast_batch(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The broadcast of the named batch shapes (the dims before the matrix dims), or an error
    naming the inputs that clash."""
    # plain loops: torch.compile cannot trace max() over a generator
    rank = 0
    for shape in shapes.values():
        rank = len(shape) if len(shape) > rank else rank
    out = []
    for axis in range(-rank, 0):
        wide = {}
        for name, shape in shapes.items():
            if len(shape) >= -axis and shape[axis] != 1:
                wide[name] = shape[axis]
        if len(set(wide.values())) > 1:
            described = ", ".join(f"{n} {shapes[n]}" for n in wide)
            sizes = " vs ".join(f"{n} {d}" for n, d in wide.items())
            raise ParameterError(f"batch dims do not broadcast: {described}: the {_from_end(axis)}"
                                 f" batch dim differs ({sizes}; batch dims are the leading "
                                 "dims, aligned from the right as in broadcasting)")
        size = 1
        for d in wide.values():
            size = d
        out.append(size)
    return tuple(out)


def _from_end(axis: int) -> str:
    """'last', 'second-to-last', ... for a negative axis."""
    names = {-1: "last", -2: "second-to-last", -3: "third-to-last"}
    return names.get(axis, f"{-axis}th-to-last")


def check_broadcasts_to(name: str, shape: tuple[int, ...], target: tuple[int, ...],
                        described: str) -> None:
    """Raise unless ``shape`` (of the input ``name``) broadcasts to ``target`` without growing
    it; ``described`` names the target's axes in the message, e.g. ``[..., q_len, k_len]``."""
    fits = len(shape) <= len(target)
    for d, t in zip(shape[::-1], target[::-1], strict=False):
        fits = fits and (d == 1 or d == t)  # not `in`: dynamo mis-evaluates it on SymInts
    if not fits:
        raise ParameterError(f"{name} has shape {tuple(shape)}, which does not broadcast to "
                             f"the scores' shape {tuple(target)} = {described}")


def check_queries_within_keys(q_shape: tuple[int, ...], k_shape: tuple[int, ...]) -> None:
    """Queries are aligned to the end of the keys (a KV cache): q_len <= k_len."""
    q_len, k_len = q_shape[-2], k_shape[-2]
    if q_len > k_len:
        raise ParameterError(
            f"q has q_len={q_len} > k_len={k_len}: queries are aligned to the end of the keys "
            f"(KV cache), so q_len must be <= k_len (q shape {q_shape}, k shape {k_shape})")
