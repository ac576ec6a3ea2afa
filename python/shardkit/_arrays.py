"""The one conversion of integer sequences handed to the core (lengths, image
counts, sizes): a contiguous 1-D int64 array, no copy when it already is one;
floats must be whole numbers (never truncated), errors name the argument.
"""

from typing import Any

import numpy as np

__all__ = ["int64_array"]


def int64_array(values: Any, name: str) -> np.ndarray:
    """values as a contiguous 1-D int64 array: no copy when it already is one;
    floats must be whole numbers."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {array.shape}")
    if array.dtype == np.int64 and array.flags.c_contiguous:
        return array
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind == "f":
        # 2^63 and beyond would wrap to negative numbers in the int64 cast.
        bad = ~np.isfinite(array) | (array != np.floor(array)) | (np.abs(array) >= 2.0**63)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{name}: item {i} is {float(array[i])!r}, not a whole number below 2**63"
            )
    elif array.dtype.kind not in "iub":
        raise ValueError(f"{name}: expected numbers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: a value does not fit int64")
    return np.ascontiguousarray(array, dtype=np.int64)
