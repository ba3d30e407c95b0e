"""Operands, dtypes and marks of the vertical-slice op tests (the first ops the plugin ran:
tests/ops/test_elementwise_vertical_slice.py, and its shape, dot, reduce and whole-program
tests, which live in test_shape.py, test_dot.py, test_reduce.py and
tests/models/test_whole_programs.py).

Dtypes: f32, f64, s32, s64, u32 and pred wherever JAX accepts the op for the dtype.
`vertical_slice` marks a test to run with x64 on (f64/s64 stay 64-bit) and twice: once as
a user runs it (WORKSHOP_CODEGEN default: a single op is never big enough for the tier)
and once with the tier taking every fusion and loop it covers ("force").
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
S32, S64, U32 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint32)
PRED = np.dtype(np.bool_)
FLOATS = [F32, F64]
INTS = [S32, S64, U32]
NUMERIC = FLOATS + INTS
ALL = NUMERIC + [PRED]


@pytest.fixture
def x64_each():
  """64-bit types on for one test (conftest.py's `x64` is for a whole module)."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", previous)


def vertical_slice(test):
  """Runs `test` with x64 on (`x64_each`, which the test's module imports) and once per
  WORKSHOP_CODEGEN value "1" and "force" (conftest.py's codegen_settings)."""
  test = pytest.mark.usefixtures("x64_each")(test)
  return pytest.mark.codegen_settings("1", "force")(test)


def ids(dtypes):
  return [np.dtype(d).name for d in dtypes]


def sample(dtype, shape, seed=0, special=True) -> np.ndarray:
  """Random values of `dtype`; with `special`, the dtype's edge values are mixed in.

  Floats get NaN, ±inf, ±0 and huge values; integers their min, max, 0 and -1 (max for
  unsigned), so wrap-around and sign handling are exercised.
  """
  dtype = np.dtype(dtype)
  rng = np.random.default_rng(seed)
  if dtype == PRED:
    return rng.random(shape) < 0.5
  if dtype.kind == "f":
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30]
  else:
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), 1000, shape, dtype=dtype, endpoint=True)
    edges = [info.min, info.max, 0, 1] + ([-1] if info.min < 0 else [])
  if special and x.size:
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, min(len(edges), flat.size), replace=False)
    flat[picks] = np.array(edges[: len(picks)], dtype)
  return x


def run_noargs(device, f):
  """jit(f)() on `device`: a function with no arguments runs on the default device."""
  with jax.default_device(device):
    out = jax.jit(f)()
  assert out.devices() == {device}
  return np.asarray(out)


def assert_noargs_matches_cpu(f):
  ours = run_noargs(jax.devices("workshop")[0], f)
  ref = run_noargs(jax.devices("cpu")[0], f)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  np.testing.assert_array_equal(ours, ref)
  return ours
