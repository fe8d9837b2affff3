"""Backends that misbehave as a process, not as a function: for the parallel runner's tests.

CRASHING dies (``os._exit``) in every sinusoidal call; SLOW announces each sinusoidal call by
touching the file named in $POSENC_TEST_MARKER, then sleeps.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from posenc.backends import get_backend


def _die(*args: Any, **kwargs: Any) -> Any:
    os._exit(3)


def _sleep(*args: Any, **kwargs: Any) -> Any:
    marker = os.environ.get("POSENC_TEST_MARKER")
    if marker:
        Path(marker).touch()
    time.sleep(120)


# own_code: the other encodings count as theirs, so a run checks them too
CRASHING = dataclasses.replace(get_backend("numpy"), name="crashing", own_code=True,
                               overrides={"sinusoidal": _die})
SLOW = dataclasses.replace(get_backend("numpy"), name="slow", own_code=True,
                           overrides={"sinusoidal": _sleep})
