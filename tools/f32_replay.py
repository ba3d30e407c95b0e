"""Shared by the fit scripts: replaying float32 kernel arithmetic in numpy and measuring
it in float32 ulps against an exact (float64) result."""

from __future__ import annotations

import numpy as np


def madd(fused: bool):
  """a * b + c on float32 arrays, rounded as the kernel's clone does: once (an FMA) when
  `fused`, else after the multiply and after the add."""
  if fused:  # a * b is exact in float64 for float32 a, b: one rounding, as an FMA.
    return lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32)
  return lambda a, b, c: (a * b + c).astype(np.float32)


def ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
  """|y - ref| in units of the float32 spacing at the exact float64 `ref`: 2^(e - 24) for
  |ref| in [2^(e-1), 2^e), at least 2^-149. An infinite y counts as +-2^128, where float32
  rounding switches to infinity, and so does a larger ref: an overflow decided by the last
  ulp costs at most an ulp."""
  ref = np.clip(ref, -(2.0**128), 2.0**128)
  _, e = np.frexp(ref)
  y64 = y.astype(np.float64)
  y64 = np.where(np.isinf(y64), np.copysign(2.0**128, y64), y64)
  return np.abs(y64 - ref) / np.ldexp(1.0, np.maximum(e - 24, -149))
