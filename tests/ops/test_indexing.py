"""Indexing ops other than gather/scatter against JAX's CPU backend: pad (negative crops,
interior padding, random configurations), reverse (and negative-step slices),
dynamic_slice and dynamic_update_slice (all element widths, index dtypes, out-of-range
starts clamp, in a scan) and get_dimension_size, plus hand-written StableHLO for a pad JAX
does not emit. Family: indexing.

Tolerances: data movement is exact for every dtype (the defaults of reference.py: exact for
ints/pred, a few ulps for floats).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_stablehlo_matches_cpu
from family_helpers import (
  INDEX_DTYPES,
  MOVE_DTYPES,
  check_matches_cpu as _check,
  rand_array as _array,
  rand_shape as _shape,
)


# pad


@pytest.mark.parametrize("dtype", MOVE_DTYPES)
def test_pad_dtypes(dtype):
  rng = np.random.default_rng(0)
  x = _array(rng, (4, 5), dtype)
  value = _array(rng, (), dtype)
  _check(lambda x, v: lax.pad(x, v, ((1, -2, 1), (-1, 3, 2))), x, value)


@pytest.mark.parametrize("seed", range(12))
def test_pad_random_configs(seed):
  """Random low/high (negative crops, down to an empty result) and interior padding."""
  rng = np.random.default_rng(seed)
  shape = _shape(rng, rng.integers(1, 4), lo=0)
  config = []
  for d in shape:
    interior = int(rng.integers(0, 3))
    full = d + max(d - 1, 0) * interior
    low = int(rng.integers(-full - 1, 4))
    high = int(rng.integers(max(-full - low, -full - 1), 4))
    config.append((low, high, interior))
  x = _array(rng, shape, np.float32)
  _check(lambda x: lax.pad(x, np.float32(-7), config), x)


# reverse


@pytest.mark.parametrize("dtype", MOVE_DTYPES)
def test_reverse_dtypes(dtype):
  x = _array(np.random.default_rng(1), (3, 4, 5), dtype)
  _check(lambda x: lax.rev(x, (0, 2)), x)


@pytest.mark.parametrize("dims", [(), (0,), (1,), (0, 1, 2), (2,)])
def test_reverse_dims_and_negative_slices(dims):
  x = _array(np.random.default_rng(2), (4, 1, 6), np.int32)
  _check(lambda x: lax.rev(x, dims), x)
  _check(lambda x: x[::-2, :, 4:0:-3], x)


# dynamic_slice / dynamic_update_slice


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_dynamic_slice_index_dtypes_clamp(index_dtype):
  info = np.iinfo(index_dtype)
  x = _array(np.random.default_rng(3), (6, 7, 5), np.float32)
  # In range, too large, the dtype's extremes (negative ones clamp to 0).
  for starts in [(1, 2, 0), (5, 6, 4), (info.max, info.min, 3), (info.min, 1, info.max)]:
    starts = np.array(starts, index_dtype)
    _check(lambda x, s: lax.dynamic_slice(x, (s[0], s[1], s[2]), (2, 3, 5)), x, starts)


@pytest.mark.parametrize("dtype", MOVE_DTYPES)
def test_dynamic_slice_dtypes(dtype):
  x = _array(np.random.default_rng(4), (5, 6), dtype)
  _check(lambda x, i: lax.dynamic_slice(x, (i, i - 2), (3, 2)), x, np.int32(4))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_dynamic_update_slice_index_dtypes_clamp(index_dtype):
  info = np.iinfo(index_dtype)
  rng = np.random.default_rng(5)
  x = _array(rng, (6, 7), np.int32)
  update = _array(rng, (4, 3), np.int32)
  for starts in [(0, 0), (2, 4), (6, 7), (info.max, info.min), (info.min, info.max)]:
    starts = np.array(starts, index_dtype)
    _check(lambda x, u, s: lax.dynamic_update_slice(x, u, (s[0], s[1])), x, update, starts)


@pytest.mark.parametrize("dtype", MOVE_DTYPES)
def test_dynamic_update_slice_dtypes(dtype):
  rng = np.random.default_rng(6)
  x, update = _array(rng, (5, 6), dtype), _array(rng, (2, 6), dtype)
  _check(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)), x, update, np.int32(-1))
  _check(lambda x, u, i: x.at[i].set(u[0]), x, update, np.int32(3))  # Scalar index idiom.


def test_dynamic_slice_in_scan():
  """Scalar indexing with a traced index: dynamic_slice and dynamic_update_slice in a loop."""
  x = _array(np.random.default_rng(7), (8, 3), np.float32)

  def f(x):
    def body(acc, i):
      return lax.dynamic_update_index_in_dim(acc, x[i] * 2 + acc[i - 1], i, 0), x[-i]

    return lax.scan(body, jnp.zeros_like(x), jnp.arange(8), unroll=True)  # No while yet.

  _check(f, x)


# Hand-written StableHLO: forms JAX does not emit.


def test_get_dimension_size_is_a_constant():
  text = """
  func.func public @main(%x: tensor<3x7xf32>) -> (tensor<i32>, tensor<i32>) {
    %0 = stablehlo.get_dimension_size %x, dim = 1 : (tensor<3x7xf32>) -> tensor<i32>
    %1 = stablehlo.get_dimension_size %x, dim = 0 : (tensor<3x7xf32>) -> tensor<i32>
    return %0, %1 : tensor<i32>, tensor<i32>
  }"""
  assert assert_stablehlo_matches_cpu(text, np.zeros((3, 7), np.float32)) == [7, 3]


def test_pad_interior_with_negative_edges_stablehlo():
  text = """
  func.func public @main(%x: tensor<4x3xi32>, %v: tensor<i32>) -> tensor<4x2xi32> {
    %0 = stablehlo.pad %x, %v, low = [-2, -3], high = [-1, 0], interior = [1, 1]
        : (tensor<4x3xi32>, tensor<i32>) -> tensor<4x2xi32>
    return %0 : tensor<4x2xi32>
  }"""
  x = np.arange(12, dtype=np.int32).reshape(4, 3)
  out = assert_stablehlo_matches_cpu(text, x, np.int32(-1))[0]
  np.testing.assert_array_equal(out, [[-1, 5], [-1, -1], [-1, 8], [-1, -1]])


# The kernels' own checks: a plan whose walk would leave a buffer is refused, not run.


def test_kernel_refuses_pad_window_out_of_bounds(monkeypatch):
  from jax_plugins.workshop.compiler import lowering

  real_emit = lowering.Lowering.emit

  def emit(self, op, attrs=None, **kw):
    if op.name == "stablehlo.pad":
      attrs = {**attrs, "dst_start": [s + 2 for s in attrs["dst_start"]]}
    return real_emit(self, op, attrs, **kw)

  monkeypatch.setattr(lowering.Lowering, "emit", emit)
  x = jax.device_put(np.zeros((4, 3), np.float32), jax.devices("workshop")[0])
  with pytest.raises(Exception, match="INVALID_ARGUMENT.*pad.*out of bounds"):
    np.asarray(jax.jit(lambda x: jnp.pad(x, 1) + 1)(x))
