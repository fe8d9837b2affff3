"""Array-library helpers shared with backends and adapters: which library an array belongs to,
its namespace, device and dtype name (the public names of posenc's internal ``_xp``)."""

from __future__ import annotations

from ._xp import (
    asarray,
    check_position_range,
    device_of,
    dtype_name,
    is_traced,
    library_of,
    namespace,
    namespace_of_dtype,
    output_dtype,
)

__all__ = ["asarray", "check_position_range", "device_of", "dtype_name", "is_traced",
           "library_of", "namespace", "namespace_of_dtype", "output_dtype"]
