"""Counting reads of tensor values back to the host (on a GPU each one waits for the device)."""

from __future__ import annotations

from typing import Any

import pytest

# the Python routes by which a tensor's value reaches the host
ROUTES = ("tolist", "item", "__bool__", "__int__", "__float__", "__index__")


def spy_host_reads(torch: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Patch every route on ``torch.Tensor`` to log its name into the returned list (undone
    with ``monkeypatch``)."""
    reads: list[str] = []
    for name in ROUTES:
        original = getattr(torch.Tensor, name)

        def spy(self: Any, *a: Any, _name: str = name, _original: Any = original) -> Any:
            reads.append(_name)
            return _original(self, *a)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return reads
