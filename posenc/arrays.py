"""Array-library helpers shared with backends and adapters: which library an array belongs to,
its namespace, device and dtype name (the public names of posenc's internal ``_xp``)."""

from __future__ import annotations

from ._xp import (
    asarray,
    device_of,
    dtype_name,
    library_of,
    namespace,
    namespace_of_dtype,
    output_dtype,
)

__all__ = ["asarray", "device_of", "dtype_name", "library_of", "namespace", "namespace_of_dtype",
           "output_dtype"]
