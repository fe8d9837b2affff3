"""What every group of tracker mutants shares: the record of one mutant, the list a group
registers them in, and the helpers that read a call's arguments as the backend would."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from posenc.backends.backend import Backend
from posenc.encodings import public_functions

from ..overrides import _mutant

IMPL = public_functions()
_RF = importlib.import_module("posenc.encodings.rope_frequencies")
ORIGINAL = dict(_RF._SCHEDULES)
_SCALED = ("rope", "rope_frequencies", "mrope")  # the functions that read a scaling dict


@dataclass(frozen=True)
class TrackerMutant:
    name: str
    cite: str  # owner/repo#number: the bug in one line
    encodings: tuple[str, ...]  # the specs that exercise the overridden functions
    backend: Backend


class Group(list):
    """The mutants of one kind of bug, in the order they are added."""

    def add(self, name: str, cite: str, encodings: tuple[str, ...],
            **overrides: Callable) -> None:
        self.append(TrackerMutant(name, cite, encodings,
                                  _mutant(f"tracker_{name}", **overrides)))

    def add_schedule_bug(self, name: str, cite: str, **patched: Callable) -> None:
        def wrap(fn: str) -> Callable:
            def call(*args: Any, **kw: Any) -> Any:
                with _schedules(**patched):
                    return IMPL[fn](*args, **kw)
            return call

        self.add(name, cite, _SCALED, **{f: wrap(f) for f in _SCALED})


@contextmanager
def _schedules(**patched: Callable) -> Iterator[None]:
    with mock.patch.dict(_RF._SCHEDULES, patched):
        yield


def kind(scaling: Any) -> str | None:
    return None if not scaling else scaling.get("rope_type", scaling.get("type"))


def positions_of(x: Any, positions: Any) -> np.ndarray:
    return np.arange(np.shape(x)[-2]) if positions is None else np.asarray(positions)


def like(reference: Any, values: Any) -> Any:
    """``values`` as an array of ``reference``'s dtype (what the backend would have returned)."""
    return np.asarray(values).astype(np.asarray(reference).dtype)


def without(scaling: Any, *keys: str) -> Any:
    return scaling if not scaling else {k: v for k, v in scaling.items() if k not in keys}
