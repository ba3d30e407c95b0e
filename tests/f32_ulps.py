"""Helpers for the tests of our own float32 math loops (ops/test_elementwise_tanh_f32.py,
ops/test_elementwise_exp_f32.py): float32 neighbourhoods, errors in float32 ulps, and
running a function on workshop."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

from reference import run_on

# The fit scripts (tools/) measure the same loops in the same ulps: one definition.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from f32_replay import ulp_error  # noqa: E402,F401  (re-exported for the tests)


def floats_around(value: float, count: int) -> np.ndarray:
  """The `count` float32 on each side of `value` (a kernel's branch or range points)."""
  bits = int(np.array(value, np.float32).view(np.int32))
  return np.arange(bits - count, bits + count, dtype=np.int32).view(np.float32)


def on_workshop(f, x: np.ndarray) -> np.ndarray:
  """jit(f)(x) on the workshop device, as numpy."""
  return run_on(jax.devices("workshop")[0], f, x)
