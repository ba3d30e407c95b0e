"""Gather and scatter against JAX's CPU backend. Family: gather_scatter (the other indexing
ops, pad, reverse, dynamic_slice, dynamic_update_slice and get_dimension_size, are in
test_indexing.py).

Covers every JAX gather/scatter idiom (x[idx], x[:, idx], x[i, j], take, take_along_axis,
.at[] updates, segment sums, vmap), random dimension numbers for lax.gather/lax.scatter, all
element widths, index dtypes, and out-of-range indices (gather clamps, scatter drops the
window), plus hand-written StableHLO for forms JAX never emits (index_vector_dim first,
and/or update bodies, u64 indices above INT64_MAX).

Tolerances: data movement is exact for every dtype, so the defaults of reference.py
(exact for ints/pred, a few ulps for floats) only matter for scatter's add/multiply, where
duplicate indices accumulate in the same order on both backends. The chunked segment sums
are also checked against a long double reference.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

from reference import assert_matches_cpu, assert_stablehlo_matches_cpu, run_on
from family_helpers import (
  INDEX_DTYPES,
  MOVE_DTYPES,
  check_matches_cpu as _check,
  rand_array as _array,
  rand_shape as _shape,
)


COMMON_DTYPES = [np.float32, np.int32, np.bool_, np.float64, np.int64]


def _x64(dtype):
  return jax.enable_x64(np.dtype(dtype).itemsize == 8 or np.dtype(dtype) == np.complex128)


def _indices(rng, shape, dim, dtype=np.int32):
  """Indices along an axis of size `dim`, a third of them out of range either side."""
  return rng.integers(-2 * dim - 2, 2 * dim + 2, shape).astype(dtype)


# Gather: JAX idioms.

GATHER_IDIOMS = {
  "x[idx]": lambda x, i, j: x[i],
  "x[idx2d]": lambda x, i, j: x[i.reshape(2, -1)],
  "x[:, idx]": lambda x, i, j: x[:, i],
  "x[..., idx]": lambda x, i, j: x[..., j],
  "x[i, j]": lambda x, i, j: x[i[:5], j],
  "x[i, :, j]": lambda x, i, j: x[i[:5], :, j],
  "x[i[:, None], j]": lambda x, i, j: x[i[:, None], j[None, :2]],
  "x[1:3, idx]": lambda x, i, j: x[1:3, i],
  "x[idx, 2]": lambda x, i, j: x[i, 2],
  "take_fill": lambda x, i, j: jnp.take(x, j, axis=2),
  "take_clip": lambda x, i, j: jnp.take(x, i, axis=1, mode="clip"),
  "take_wrap": lambda x, i, j: jnp.take(x, i, axis=0, mode="wrap"),
  "take_flat": lambda x, i, j: jnp.take(x, j),
  "at_get_fill": lambda x, i, j: x.at[i].get(mode="fill", fill_value=3),
  "take_along_axis": lambda x, i, j: jnp.take_along_axis(
    x, jnp.broadcast_to(j[None, :, None], (4, 5, 2)), axis=2
  ),
  "vmap_x[idx]": lambda x, i, j: jax.vmap(lambda xs, k: xs[k])(x, i[:4, None] + j[:2]),
  "vmap_indices_only": lambda x, i, j: jax.vmap(lambda k: x[k, :, k])(i),
}


@pytest.mark.parametrize("dtype", COMMON_DTYPES)
@pytest.mark.parametrize("idiom", GATHER_IDIOMS)
def test_gather_idioms(idiom, dtype):
  rng = np.random.default_rng(abs(hash(idiom)) % 1000)
  x = _array(rng, (4, 5, 6), dtype)
  i, j = _indices(rng, (6,), 4), _indices(rng, (5,), 6)
  _check(GATHER_IDIOMS[idiom], x, i, j)


@pytest.mark.parametrize("dtype", MOVE_DTYPES)
def test_gather_element_widths(dtype):
  rng = np.random.default_rng(8)
  x = _array(rng, (5, 3), dtype)
  _check(lambda x, i: (x[i], x[:, i % 3], x[i, i % 3]), x, _indices(rng, (7,), 5))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_gather_index_dtypes(index_dtype):
  rng = np.random.default_rng(9)
  x = _array(rng, (100, 3), np.float32)
  info = np.iinfo(index_dtype)
  i = np.array([0, 1, 99, 100, info.max, info.min, 5], index_dtype)
  _check(lambda x, i: x[i], x, i)


def test_gather_empty():
  x = _array(np.random.default_rng(10), (4, 0, 3), np.float32)
  _check(lambda x, i: (x[i], x[:, :, i % 3]), x, np.array([1, 2], np.int32))
  _check(lambda x, i: x[i], x, np.zeros((0,), np.int32))


def test_gather_large_rows():
  """An embedding lookup: contiguous rows, the memcpy path."""
  rng = np.random.default_rng(11)
  table = _array(rng, (1000, 64), np.float32)
  _check(lambda t, i: t[i], table, rng.integers(0, 1000, (4096,)).astype(np.int32))


# Scatter: JAX idioms.

SCATTER_IDIOMS = {
  "set": lambda x, i, j, u: x.at[i].set(u[0, 0]),
  "add": lambda x, i, j, u: x.at[i].add(u[0, 0]),
  "add_rows": lambda x, i, j, u: x.at[i].add(jnp.ones(x.shape[1:], x.dtype)),
  "add[:, idx]": lambda x, i, j, u: x.at[:, j].add(u[: x.shape[0], : j.shape[0]]),
  "mul[i, j]": lambda x, i, j, u: x.at[i[:5], j].mul(u[0, :5]),
  "min[i, j]": lambda x, i, j, u: x.at[i[:5], j].min(u[0, :5]),
  "max[idx2d]": lambda x, i, j, u: x.at[i.reshape(2, 3)].max(u[0, 0]),
  "set_clip": lambda x, i, j, u: x.at[i].set(u[0, 0], mode="clip"),
  "set_unique_sorted": lambda x, i, j, u: x.at[:, j[:2]].set(
    u[:4, :2], unique_indices=True, indices_are_sorted=True
  ),
  "add_drop": lambda x, i, j, u: x.at[i].add(u[0, 0], mode="drop"),
  "add_slice_and_idx": lambda x, i, j, u: x.at[1:3, j].add(u[:2, :5]),
  "vmap_add": lambda x, i, j, u: jax.vmap(lambda r, k: r.at[k].add(r[0]))(
    x, j[None, :].repeat(4, 0)
  ),
  "vmap_set_indices_only": lambda x, i, j, u: jax.vmap(lambda k, v: x.at[k].set(v))(
    i[:3], u[:3, : x.shape[1]]
  ),
}


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.int64])
@pytest.mark.parametrize("idiom", SCATTER_IDIOMS)
def test_scatter_idioms(idiom, dtype):
  rng = np.random.default_rng(abs(hash(idiom)) % 1000)
  x = _array(rng, (4, 7), dtype)
  # Duplicates (harmless for "set": those idioms write one value per index, or one index
  # per vmap lane) and out-of-range indices: dropped, or clipped with mode="clip".
  i = np.array([0, 3, 3, -1, 9, -7], np.int32)
  j = np.array([1, 6, 1, -2, 12], np.int32)
  u = _array(rng, (4, 7), dtype)
  _check(SCATTER_IDIOMS[idiom], x, i, j, u)


def test_scatter_add_duplicates_accumulate():
  x = np.zeros((5,), np.int32)
  i = np.array([1, 1, 1, 4, 4, 0, 7, -9], np.int32)
  ours = _check(lambda x, i: x.at[i].add(1), x, i)
  np.testing.assert_array_equal(ours, [1, 3, 0, 0, 2])  # 7 and -9 (-4) are dropped.


@pytest.mark.parametrize("dtype", MOVE_DTYPES)
def test_scatter_set_element_widths(dtype):
  rng = np.random.default_rng(12)
  x, u = _array(rng, (6, 3), dtype), _array(rng, (3, 3), dtype)
  _check(lambda x, u, i: x.at[i].set(u), x, u, np.array([4, 0, 9], np.int32))


@pytest.mark.parametrize("op", ["min", "max"])
def test_scatter_pred(op):
  x = np.array([True, False, True, False, True])
  i = np.array([0, 1, 1, 9, 4], np.int32)
  u = np.array([False, True, False, True, False])
  _check(lambda x, i, u: getattr(x.at[i], op)(u), x, i, u)


def test_segment_sum():
  rng = np.random.default_rng(13)
  data = _array(rng, (50, 8), np.float32)
  segments = np.sort(rng.integers(0, 10, 50)).astype(np.int32)
  _check(
    lambda d, s: jax.ops.segment_sum(d, s, num_segments=10, indices_are_sorted=True), data, segments
  )
  _check(lambda d, s: jax.ops.segment_max(d, s, num_segments=12), data, segments)


def test_gather_grad_is_scatter_add():
  rng = np.random.default_rng(14)
  x = _array(rng, (6, 4), np.float32)
  i = np.array([0, 5, 5, 2, 0, 0], np.int32)
  _check(jax.grad(lambda x, i: jnp.sum(jnp.sin(x[i]) * x[i])), x, i)


def test_vmap_of_scatter_add_with_duplicates():
  rng = np.random.default_rng(15)
  x = _array(rng, (3, 5, 2), np.float32)
  i = rng.integers(-1, 6, (3, 7)).astype(np.int32)
  u = _array(rng, (3, 7, 2), np.float32)
  _check(jax.vmap(lambda x, i, u: x.at[i].add(u)), x, i, u)
  _check(
    jax.vmap(jax.vmap(lambda x, i, u: x.at[i].max(u)), in_axes=(None, 0, 0)),
    x,
    i.reshape(1, 3, 7).repeat(2, 0),
    u.reshape(1, 3, 7, 2).repeat(2, 0),
  )


# Random dimension numbers through lax.gather / lax.scatter.


def _random_dimension_numbers(rng):
  """A valid gather/scatter configuration with batching, collapsed and window dims."""
  rank = int(rng.integers(1, 5))
  operand = _shape(rng, rank, 1, 5)
  dims = list(rng.permutation(rank))
  n_batching = int(rng.integers(0, min(rank, 2)))
  operand_batching = sorted(int(d) for d in dims[:n_batching])
  rest = dims[n_batching:]
  n_start = int(rng.integers(1, len(rest) + 1)) if rest else 0
  start_map = [int(d) for d in rng.permutation(rest)[:n_start]]
  collapsed = sorted(d for d in start_map if rng.random() < 0.6)
  # Mostly non-empty windows; now and then an empty one.
  slice_sizes = [
    1
    if d in operand_batching or d in collapsed
    else int(rng.integers(rng.random() >= 0.1, operand[d] + 1))
    for d in range(rank)
  ]
  # Indices: batch dims (some of them the batching dims), index vector last.
  n_batch = n_batching + int(rng.integers(0, 3))
  batch_shape = list(_shape(rng, n_batch, 1, 4))
  indices_batching = [int(p) for p in rng.permutation(n_batch)[:n_batching]]
  for o, p in zip(operand_batching, indices_batching):
    batch_shape[p] = operand[o]
  out_rank = n_batch + rank - len(collapsed) - n_batching
  offset_dims = sorted(int(d) for d in rng.permutation(out_rank)[: out_rank - n_batch])
  return dict(
    operand=operand,
    start_map=start_map,
    collapsed=collapsed,
    operand_batching=operand_batching,
    indices_batching=indices_batching,
    slice_sizes=slice_sizes,
    indices_shape=(*batch_shape, len(start_map)),
    offset_dims=offset_dims,
  )


def _random_indices(rng, c):
  limits = [c["operand"][d] for d in c["start_map"]] or [1]
  high = np.array(limits) + 3
  return rng.integers(-3, high, c["indices_shape"]).astype(np.int32)


_MODES = ["promise_in_bounds", "clip", "fill"]


@pytest.mark.parametrize("seed", range(40))
def test_gather_random_dimension_numbers(seed):
  rng = np.random.default_rng(100 + seed)
  c = _random_dimension_numbers(rng)
  dn = lax.GatherDimensionNumbers(
    offset_dims=tuple(c["offset_dims"]),
    collapsed_slice_dims=tuple(c["collapsed"]),
    start_index_map=tuple(c["start_map"]),
    operand_batching_dims=tuple(c["operand_batching"]),
    start_indices_batching_dims=tuple(c["indices_batching"]),
  )
  x = _array(rng, c["operand"], np.int32)
  mode = _MODES[seed % 3]
  _check(
    lambda x, i: lax.gather(x, i, dn, tuple(c["slice_sizes"]), mode=mode),
    x,
    _random_indices(rng, c),
  )


_SCATTERS = [lax.scatter, lax.scatter_add, lax.scatter_mul, lax.scatter_min, lax.scatter_max]


@pytest.mark.parametrize("seed", range(40))
def test_scatter_random_dimension_numbers(seed):
  rng = np.random.default_rng(200 + seed)
  c = _random_dimension_numbers(rng)
  dn = lax.ScatterDimensionNumbers(
    update_window_dims=tuple(c["offset_dims"]),
    inserted_window_dims=tuple(c["collapsed"]),
    scatter_dims_to_operand_dims=tuple(c["start_map"]),
    operand_batching_dims=tuple(c["operand_batching"]),
    scatter_indices_batching_dims=tuple(c["indices_batching"]),
  )
  x = _array(rng, c["operand"], np.int32)
  i = _random_indices(rng, c)
  # The updates have the shape the gather with these dimension numbers would produce.
  gdn = lax.GatherDimensionNumbers(
    tuple(c["offset_dims"]),
    tuple(c["collapsed"]),
    tuple(c["start_map"]),
    tuple(c["operand_batching"]),
    tuple(c["indices_batching"]),
  )
  shape = jax.eval_shape(lambda x, i: lax.gather(x, i, gdn, tuple(c["slice_sizes"])), x, i).shape
  u = _array(rng, shape, np.int32)
  scatter = _SCATTERS[seed % len(_SCATTERS)]
  mode = ["promise_in_bounds", "clip", "drop"][seed % 3]
  if scatter is lax.scatter:
    u = np.full_like(u, 77)  # Which duplicate "set" keeps is unspecified: make them agree.
  _check(lambda x, i, u: scatter(x, i, u, dn, mode=mode), x, i, u)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
  rows=st.integers(1, 9),
  cols=st.integers(1, 5),
  n=st.integers(0, 12),
  axis=st.integers(0, 1),
  data=st.data(),
)
def test_take_and_add_hypothesis(rows, cols, n, axis, data):
  dim = (rows, cols)[axis]
  idx = np.array(
    data.draw(st.lists(st.integers(-2 * dim, 2 * dim), min_size=n, max_size=n)), np.int32
  )
  x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
  _check(lambda x, i: jnp.take(x, i, axis=axis, mode="clip"), x, idx)
  _check(
    lambda x, i: jnp.take_along_axis(
      x,
      jnp.broadcast_to(i[:1], (rows, cols)) if n else jnp.zeros((rows, cols), jnp.int32),
      axis=axis,
    ),
    x,
    idx,
  )
  upd = np.ones((rows, n) if axis else (n, cols), np.float32)
  _check(lambda x, i, u: x.at[:, i].add(u) if axis else x.at[i].add(u), x, idx, upd)


# Hand-written StableHLO: forms JAX does not emit.


def test_gather_index_vector_dim_first_u64_indices():
  text = """
  func.func public @main(%x: tensor<5x4xf32>, %i: tensor<2x3xui64>) -> tensor<3x2xf32> {
    %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<
        offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0, 1],
        index_vector_dim = 0>, slice_sizes = array<i64: 1, 2>}>
        : (tensor<5x4xf32>, tensor<2x3xui64>) -> tensor<3x2xf32>
    return %0 : tensor<3x2xf32>
  }"""
  x = np.arange(20, dtype=np.float32).reshape(5, 4)
  i = np.array([[0, 2**64 - 1, 4], [3, 2**63 + 5, 1]], np.uint64)
  out = assert_stablehlo_matches_cpu(text, x, i)[0]
  np.testing.assert_array_equal(out, [[2, 3], [18, 19], [17, 18]])


@pytest.mark.parametrize("body,dtype", [("and", "i1"), ("or", "i1"), ("and", "i32"), ("or", "ui8")])
def test_scatter_and_or_bodies(body, dtype):
  text = f"""
  func.func public @main(%x: tensor<6x{dtype}>, %i: tensor<4x1xi32>, %u: tensor<4x{dtype}>)
      -> tensor<6x{dtype}> {{
    %0 = "stablehlo.scatter"(%x, %i, %u) <{{scatter_dimension_numbers = #stablehlo.scatter<
        inserted_window_dims = [0], scatter_dims_to_operand_dims = [0],
        index_vector_dim = 1>}}> ({{
      ^bb0(%a: tensor<{dtype}>, %b: tensor<{dtype}>):
        %r = stablehlo.{body} %b, %a : tensor<{dtype}>
        stablehlo.return %r : tensor<{dtype}>
    }}) : (tensor<6x{dtype}>, tensor<4x1xi32>, tensor<4x{dtype}>) -> tensor<6x{dtype}>
    return %0 : tensor<6x{dtype}>
  }}"""
  np_dtype = {"i1": np.bool_, "i32": np.int32, "ui8": np.uint8}[dtype]
  rng = np.random.default_rng(16)
  x, u = _array(rng, (6,), np_dtype), _array(rng, (4,), np_dtype)
  assert_stablehlo_matches_cpu(text, x, np.array([[1], [1], [5], [6]], np.int32), u)


def test_scatter_apply_body():
  # Not a combiner: scatter_general runs the body as a lane plan.
  x = np.arange(5, dtype=np.int32)
  assert_matches_cpu(lambda x, i: x.at[i].apply(lambda v: v * 3), x, np.array([1, 3, 1], np.int32))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.complex64, np.complex128])
@pytest.mark.parametrize("combine", ["add", "multiply", "max"])
def test_scatter_combiners_on_half_and_complex(dtype, combine):
  """f16/bf16 combine in f32 and round per update (as XLA:CPU). Duplicate indices make the
  per-update rounding visible. Complex max orders lexicographically (the spec); random
  real parts never tie, where XLA:CPU (real parts only) would differ."""
  rng = np.random.default_rng(17)
  x, u = _array(rng, (5, 3), dtype), _array(rng, (4, 3), dtype)
  i = np.array([1, 1, 4, 1], np.int32)
  f = lambda x, u, i: getattr(x.at[i], combine)(u)
  _check(f, x, u, i)


# The kernels' own checks: a plan whose walk would leave a buffer is refused, not run.


def _corrupt_rule_output(monkeypatch, name, corrupt):
  from jax_plugins.workshop.compiler.rules import gather_scatter

  real = getattr(gather_scatter, name)
  monkeypatch.setattr(gather_scatter, name, lambda *a, **k: corrupt(real(*a, **k)))


def test_kernel_refuses_gather_walk_leaving_operand(monkeypatch):
  def corrupt(attrs):
    return {**attrs, "start_limits": [limit + 1 for limit in attrs["start_limits"]]}

  _corrupt_rule_output(monkeypatch, "_walk", corrupt)
  x = jax.device_put(np.zeros((4, 3), np.float32), jax.devices("workshop")[0])
  with pytest.raises(Exception, match="INVALID_ARGUMENT.*gather.*window walk leaves the operand"):
    np.asarray(jax.jit(lambda x, i: x[i] * 2)(x, np.array([7], np.int32)))


# ---- element scatter-add of many updates into a small result (kernels/gather_scatter.cc
# ScatterAddChunked: fixed chunks of 65536 updates summed into private copies, then the
# copies in chunk order): exact for integers, at least as accurate as XLA:CPU for floats
# against a long double reference, out-of-range ids dropped.


@pytest.mark.parametrize(
  "dtype",
  [np.float32, np.float64, np.complex64, np.int32, np.int8, np.uint32],
  ids=lambda d: np.dtype(d).name,
)
@pytest.mark.parametrize(
  "n,segments", [(1 << 20, 1000), (300000, 7), (131073, 16384), (131072, 16385), (70000, 3)]
)
def test_segment_sum_chunked(dtype, n, segments):
  rng = np.random.default_rng(n + segments)
  data = rng.normal(size=n) * 10
  if np.issubdtype(dtype, np.complexfloating):
    data = data + 1j * rng.normal(size=n)
  data = data.astype(dtype)
  ids = rng.integers(-5, segments + 5, n).astype(np.int32)  # some out of range
  f = lambda d, s: jax.ops.segment_sum(d, s, segments)  # noqa: E731
  with jax.enable_x64(True):
    ours = np.asarray(jax.jit(f)(*jax.device_put((data, ids), jax.devices("workshop")[0])))
    theirs = np.asarray(jax.jit(f)(*jax.device_put((data, ids), jax.devices("cpu")[0])))
  keep = (ids >= 0) & (ids < segments)
  if np.issubdtype(dtype, np.integer):
    ref = np.zeros(segments, np.int64)
    np.add.at(ref, ids[keep], data[keep].astype(np.int64))
    np.testing.assert_array_equal(ours, ref.astype(dtype))  # wraps as int arithmetic does
    np.testing.assert_array_equal(ours, theirs)
    return
  wide = np.clongdouble if np.issubdtype(dtype, np.complexfloating) else np.longdouble
  ref = np.zeros(segments, wide)
  np.add.at(ref, ids[keep], data[keep].astype(wide))
  scale = np.max(np.abs(ref))
  err = lambda y: float(np.max(np.abs(y.astype(wide) - ref)) / scale)  # noqa: E731
  eps = np.finfo(dtype).eps
  assert err(ours) <= 2 * err(theirs) + 4 * eps, (err(ours), err(theirs))


# ---- whole-row scatter-add (kernels/gather_scatter.cc ScatterRows): the result's rows are
# split between parts that each apply, in index order, the updates landing in their own
# rows, so duplicate ids add in the same order as XLA:CPU's sequential loop (same bits);
# out-of-range ids (negative or past the end) are dropped. A small result (at most 16384
# elements) with updates of two chunks of 65536 elements or more takes ScatterAddChunked
# instead: blocked sums, checked against float64 like the element case above.


@pytest.mark.parametrize(
  "dtype",
  [np.float32, np.float64, np.int8, ml_dtypes.bfloat16, np.complex64],
  ids=lambda d: np.dtype(d).name,
)
@pytest.mark.parametrize("row_bytes", [8, 16, 24, 32, 64, 128, 256, 512])
def test_row_gathers_and_scatters_at_every_row_length(dtype, row_bytes):
  """Rows of 8 to 256 bytes are copied and combined as constants (gather_scatter.cc
  WithRowBytes), others at run time: each length against numpy, indices out of range either
  side (gather clamps, scatter drops), a batch of two dims, and a hot row for the scatter.
  The scatter has more windows than one chunk into a result too large for private copies,
  so it takes the row path (ScatterRows), not the chunked one."""
  width = row_bytes // np.dtype(dtype).itemsize
  if width < 2:
    pytest.skip("a row of one element is an element gather")
  rows = max(3000, 20000 // width)
  rng = np.random.default_rng(row_bytes)
  workshop = jax.devices("workshop")[0]
  with _x64(dtype):
    table = _array(rng, (rows, width), dtype)
    ids = rng.integers(-20, rows + 20, (40, 50)).astype(np.int32)
    gather = lambda t, i: lax.gather(  # noqa: E731
      t,
      i[..., None],
      lax.GatherDimensionNumbers((2,), (0,), (0,)),
      (1, width),
      mode=lax.GatherScatterMode.CLIP,
    )
    got = np.asarray(jax.jit(gather)(*jax.device_put((table, ids), workshop)))
    np.testing.assert_array_equal(got, table[np.clip(ids, 0, rows - 1)])
    flat = rng.integers(-20, rows + 20, 70000 // width).astype(np.int32)
    flat[::7] = 5  # A hot row.
    updates = _array(rng, (flat.size, width), dtype)
    at = np.where(flat < 0, flat + rows, flat)  # .at[] wraps negative indices as numpy does
    keep = at < rows
    for name, ufunc in [("add", np.add), ("max", np.maximum)]:
      if name == "max" and dtype == np.complex64:
        continue
      f = lambda t, i, u: getattr(t.at[i], name)(u, mode="drop")  # noqa: B023, E731
      ours = np.asarray(jax.jit(f)(*jax.device_put((table, flat, updates), workshop)))
      ref = table.copy()
      if dtype == ml_dtypes.bfloat16:  # Combined in f32, rounded once per update.
        ref = ref.astype(np.float32)
        for k in np.flatnonzero(keep):
          ref[at[k]] = ufunc(ref[at[k]], updates[k].astype(np.float32)).astype(dtype)
        ref = ref.astype(dtype)
      else:
        ufunc.at(ref, at[keep], updates[keep])
      np.testing.assert_array_equal(ours, ref, err_msg=name)


def _chunked(segments, width, k):
  return segments * width <= 16384 and k >= 2 * max(1, 65536 // width)


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.int32], ids=lambda d: np.dtype(d).name
)
@pytest.mark.parametrize(
  "segments,width,k",
  [(4096, 16, 32768), (4096, 64, 32768), (300, 128, 5000), (64, 3, 70000), (64, 16, 20000)],
)
def test_segment_sum_of_rows_with_duplicates_and_dropped_ids(dtype, segments, width, k):
  rng = np.random.default_rng(segments + width)
  ids = rng.integers(-3, segments + 3, k).astype(np.int32)
  ids[::5] = ids[1]  # A hot row: a fifth of the updates.
  data = (rng.standard_normal((k, width)) * 4).astype(dtype)
  if dtype == np.int32:
    data = rng.integers(-1000, 1000, (k, width)).astype(dtype)
  f = lambda d, s: jax.ops.segment_sum(d, s, segments)  # noqa: E731
  with jax.enable_x64(True):
    ours = np.asarray(jax.jit(f)(*jax.device_put((data, ids), jax.devices("workshop")[0])))
    theirs = np.asarray(jax.jit(f)(*jax.device_put((data, ids), jax.devices("cpu")[0])))
  keep = (ids >= 0) & (ids < segments)
  ref = np.zeros((segments, width), np.float64)
  np.add.at(ref, ids[keep], data[keep].astype(np.float64))
  if dtype == np.int32:
    np.testing.assert_array_equal(ours, ref.astype(np.int32))
    np.testing.assert_array_equal(ours, theirs)
    return
  eps = float(np.finfo(np.float32 if dtype == ml_dtypes.bfloat16 else dtype).eps)
  if dtype == ml_dtypes.bfloat16:
    eps = 2.0**-8
  scale = np.abs(data.astype(np.float64)).sum() / segments + np.abs(ref).max()
  if _chunked(segments, width, k):  # Blocked sums: at least as accurate as the CPU backend's.
    err = lambda y: float(np.max(np.abs(y.astype(np.float64) - ref)))  # noqa: E731
    assert err(ours) <= 2 * err(theirs) + 4 * eps * scale, (err(ours), err(theirs))
    return
  np.testing.assert_array_equal(ours, theirs)  # the same order of additions
  # Sequential sums in the dtype: a relative error of about k_row * eps at worst.
  bound = (np.bincount(ids[keep], minlength=segments).max() + 1) * eps * scale
  assert np.max(np.abs(ours.astype(np.float64) - ref)) <= bound


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_scatter_add_chunked_onto_an_operand(dtype):
  """x.at[ids].add(rows) with a nonzero x, int64 ids, a window of a whole (4, 8) slab, and
  ids past the end (dropped) or negative (from the end): the chunked path adds each
  element's blocked sum onto x once."""
  rng = np.random.default_rng(7)
  x = rng.standard_normal((10, 4, 8)).astype(dtype)
  rows = rng.standard_normal((40000, 4, 8)).astype(dtype)
  ids = rng.integers(-2, 12, 40000)
  f = lambda x, i, u: x.at[i].add(u, mode="drop")  # noqa: E731
  with jax.enable_x64(True):
    ours = np.asarray(jax.jit(f)(*jax.device_put((x, ids, rows), jax.devices("workshop")[0])))
  ids = np.where(ids < 0, ids + 10, ids)  # .at[] counts negative ids from the end
  keep = ids < 10
  ref = x.astype(np.float64)
  np.add.at(ref, ids[keep], rows[keep].astype(np.float64))
  bound = 8 * np.finfo(dtype).eps * np.abs(rows).sum() / 10
  assert np.max(np.abs(ours - ref)) <= bound


def test_chunked_scatter_add_keeps_negative_zero():
  """Elements of -0 that no update reaches stay -0 (the private copies start at -0, the
  identity of +, as on the CPU backend), for single elements and rows alike."""
  f = jax.jit(lambda x, i, u: x.at[i].add(u, mode="drop"))
  ws = jax.devices("workshop")[0]
  for shape in ((8, 4), (300,)):
    x = np.full(shape, -0.0, np.float32)
    i = np.full(140000, 1000, np.int32)  # out of range: dropped
    i[::7] = 3  # and some that add zeros: -0 + 0 = +0 there
    u = np.zeros((140000, *shape[1:]), np.float32)
    ours = np.asarray(f(*jax.device_put((x, i, u), ws)))
    theirs = np.asarray(f(*jax.device_put((x, i, u), jax.devices("cpu")[0])))
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(theirs))
    assert np.signbit(ours).sum() == ours.size - np.prod(shape[1:], dtype=int)


_THREADS_SCRIPT = """
import jax, numpy as np
rng = np.random.default_rng(3)
x = rng.standard_normal((20000, 16)).astype(np.float32)
ids = rng.integers(0, 64, 20000).astype(np.int32)
v = rng.standard_normal(300000).astype(np.float32)
vid = rng.integers(0, 1000, 300000).astype(np.int32)
f = jax.jit(lambda d, s, n: jax.ops.segment_sum(d, s, n), static_argnums=2)
ws = jax.devices("workshop")[0]
a = np.asarray(f(*jax.device_put((x, ids), ws), 64))
b = np.asarray(f(*jax.device_put((v, vid), ws), 1000))
print(a.tobytes().hex()[:64], a.view(np.uint32).sum(dtype=np.uint64), b.view(np.uint32).sum(dtype=np.uint64))
"""


def test_chunked_scatter_add_bits_do_not_depend_on_threads():
  """The chunks are fixed by the shape, and taken on one thread too: a segment sum of rows
  and one of elements give the same bits with 1, 2 and 5 threads."""
  import os
  import subprocess
  import sys

  outs = set()
  for threads in ("1", "2", "5"):
    env = dict(os.environ, WORKSHOP_NUM_THREADS=threads, JAX_PLATFORMS="workshop,cpu")
    out = subprocess.run(
      [sys.executable, "-c", _THREADS_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    outs.add(out.stdout.strip())
  assert len(outs) == 1, outs


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8])
@pytest.mark.parametrize("width,n", [(1, 300000), (8, 100000), (3, 5000)])
@pytest.mark.parametrize("which", ["max", "min"])
def test_segment_max_min_chunked_match_numpy(which, width, n, dtype):
  # Scatters with maximum/minimum into a small result take the chunked path of scatter-add
  # (private copies from the combiner's identity, combined in chunk order): max and min
  # keep the first NaN and the first of equal values in any such bracketing, so the
  # result is the sequential one. Out-of-range ids are dropped; -inf/+inf updates and
  # segments nothing reaches (the identity) included.
  rng = np.random.default_rng(width * n)
  segments = 100
  shape = (n,) if width == 1 else (n, width)
  if np.issubdtype(dtype, np.floating):
    data = rng.normal(size=shape).astype(dtype)
    data.reshape(-1)[rng.choice(data.size, 40, replace=False)] = np.nan
    data.reshape(-1)[rng.choice(data.size, 40, replace=False)] = -np.inf
    data.reshape(-1)[rng.choice(data.size, 40, replace=False)] = np.inf
  else:
    info = np.iinfo(dtype)
    data = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
  ids = rng.integers(-3, segments - 2, n).astype(np.int32)  # out of range; 97-99 unreached
  fn = jax.ops.segment_max if which == "max" else jax.ops.segment_min
  with jax.enable_x64(True):
    ours = np.asarray(
      jax.jit(lambda d, s: fn(d, s, segments))(
        *jax.device_put((data, ids), jax.devices("workshop")[0])
      )
    )
  keep = (ids >= 0) & (ids < segments)
  if np.issubdtype(dtype, np.floating):
    ref = np.full((segments,) + shape[1:], -np.inf if which == "max" else np.inf, dtype)
  else:
    info = np.iinfo(dtype)
    ref = np.full((segments,) + shape[1:], info.min if which == "max" else info.max, dtype)
  with np.errstate(invalid="ignore"):  # NaN updates, propagated as in the program
    (np.maximum if which == "max" else np.minimum).at(ref, ids[keep], data[keep])
  np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.complex64])
def test_gather_of_points_by_two_index_arrays(dtype):
  # img[y, x]: one element per pair of indices (GatherElements with two index
  # components), each component clamped on its own into range as gather clamps starts;
  # 100000 points, so the pool splits them.
  rng = np.random.default_rng(8)
  img = (rng.standard_normal((300, 200)) * 10).astype(dtype)
  y = rng.integers(-5, 305, 100000).astype(np.int32)
  x = rng.integers(-5, 205, 100000).astype(np.int32)
  got = run_on(jax.devices("workshop")[0], lambda m, i, j: m[i, j], img, y, x)
  # jnp's m[i, j] wraps negative indices once, then the gather clamps.
  yy = np.where(y < 0, y + 300, y).clip(0, 299)
  xx = np.where(x < 0, x + 200, x).clip(0, 199)
  np.testing.assert_array_equal(got, img[yy, xx])
  stacked = np.stack([y.clip(0, 299), x.clip(0, 199)], 1)
  got = run_on(jax.devices("workshop")[0], lambda m, ij: m[ij[:, 0], ij[:, 1]], img, stacked)
  np.testing.assert_array_equal(got, img[stacked[:, 0], stacked[:, 1]])


# ---- gathers by several index arrays: the concatenate of the arrays folded into the gather
# (compiler/idioms.py fold_index_concatenates; the kernel reads component k from operand
# 1 + k, gather_scatter.cc IndexSource).

FOLDED_GATHERS = {
  # name: (f, operand shape, index shapes, element path or not)
  "m[i, j] points": (lambda m, i, j: m[i, j], (300, 200), [(5000,), (5000,)]),
  "m[i, j] of 2-D index arrays": (lambda m, i, j: m[i, j], (30, 20), [(40, 50), (40, 50)]),
  "m[i, j] rows of a 3-D operand": (lambda m, i, j: m[i, j], (30, 20, 8), [(700,), (700,)]),
  "m[i, :, j] strided windows": (lambda m, i, j: m[i, :, j], (30, 5, 20), [(70,), (70,)]),
  "m[i, j, k] three arrays": (lambda m, i, j, k: m[i, j, k], (9, 8, 7), [(400,)] * 3),
  "logp[arange(n), labels]": (
    lambda m, i: m[jnp.arange(m.shape[0]), i],
    (20000, 10),
    [(20000,)],
  ),
}


@pytest.mark.parametrize("name", FOLDED_GATHERS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64, np.uint8])
def test_gather_by_index_arrays_reads_them_without_a_concatenate(name, index_dtype):
  from compiler_helpers import compile_fn, ops

  f, shape, index_shapes = FOLDED_GATHERS[name]
  rng = np.random.default_rng(len(name))
  with jax.enable_x64(index_dtype == np.int64):
    m = _array(rng, shape, np.float32)
    limit = min(shape[0], 250) if index_dtype == np.uint8 else shape[0]
    # Out of range either side where the dtype allows: jnp wraps a negative index once,
    # then the gather clamps each component on its own.
    low = 0 if index_dtype == np.uint8 else -limit - 3
    idx = [rng.integers(low, limit + 3, s).astype(index_dtype) for s in index_shapes]
    plan = compile_fn(f, m, *idx, fuse=True).plan
    gathers = [i for i in plan.instrs if i.op == "gather"]
    assert len(gathers) == 1 and "concatenate" not in ops(plan), ops(plan)
    assert gathers[0].attrs["index_parts"] == len(gathers[0].attrs["start_strides"])
    got = run_on(jax.devices("workshop")[0], f, m, *idx)
    want = run_on(jax.devices("cpu")[0], f, m, *idx)
    np.testing.assert_array_equal(got, want)


def test_gather_by_index_arrays_against_numpy():
  rng = np.random.default_rng(5)
  m = _array(rng, (30, 20, 8), np.float32)
  i, j = rng.integers(-33, 33, 900).astype(np.int32), rng.integers(-23, 23, 900).astype(np.int32)
  got = run_on(jax.devices("workshop")[0], lambda m, i, j: m[i, j], m, i, j)
  ii = np.where(i < 0, i + 30, i).clip(0, 29)
  jj = np.where(j < 0, j + 20, j).clip(0, 19)
  np.testing.assert_array_equal(got, m[ii, jj])


def test_kernel_refuses_index_parts_that_disagree(monkeypatch):
  from jax_plugins.workshop.compiler import idioms

  real = idioms.fold_index_concatenates

  def corrupt(plan):
    plan = real(plan)
    for instr in plan.instrs:
      if instr.op == "gather" and "index_parts" in instr.attrs:
        instr.attrs["index_parts"] += 1
    return plan

  monkeypatch.setattr(idioms, "fold_index_concatenates", corrupt)
  m = jax.device_put(np.zeros((4, 3), np.float32), jax.devices("workshop")[0])
  i = np.array([1, 2], np.int32)
  with pytest.raises(Exception, match="INVALID_ARGUMENT.*gather with 3 index parts"):
    np.asarray(jax.jit(lambda m, i, j: m[i, j] * 2)(m, i, i))
