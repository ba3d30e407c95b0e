"""The fast paths of reduce (kernels/reduce/reduce.cc) and dot_general (kernels/dot/dot.cc, the
transpose fold in compiler/rules/dot.py), against numpy or JAX's CPU backend. Families:
dot (most tests) and reduce.

Shapes are chosen to reach each path: the inner dim reduced (one run per output, runs cut
into 32K-element blocks), the inner dim kept (output rows accumulated in 4 KB column tiles,
several tiles per row), several reduced groups, size-1 dims, and sizes over the thread
pool's split threshold (64K elements) so work is spread over threads.

Tolerances: integers, pred, min and max are exact. Float sums are reassociated (vector
lanes, blocks) differently from numpy's pairwise sum: rtol 1e-5 (f32) / 1e-12 (f64) and an
absolute term n * eps * 4 for n unit-normal terms, for sums that cancel to ~0. Float
GEMMs: OpenBLAS and XLA's Eigen block differently, same bound as
test_elementwise_vertical_slice.dot_tol.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu, results_with_helpers_awake_and_parked, run_on
from compiler_helpers import compile_fn, ops
from op_samples import F32, NUMERIC, PRED, S32, ids, sample, vertical_slice
from op_samples import x64_each  # noqa: F401  (the fixture `vertical_slice` tests use)


pytestmark = pytest.mark.usefixtures("x64")  # conftest.py: x64 on for the module.


def workshop(f, *args):
  return run_on(jax.devices("workshop")[0], f, *args)


def data(dtype, shape, seed):
  rng = np.random.default_rng(seed)
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.9  # Mostly true, so `all` is not trivially false.
  if dtype.kind == "f":
    return rng.standard_normal(shape).astype(dtype)
  info = np.iinfo(dtype)  # Full range: integer sums wrap around.
  return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


# (shape, axes): which path each one takes.
REDUCTIONS = [
  ((7, 33, 65), (2,)),  # inner reduced, short runs
  ((3, 70001), (1,)),  # inner reduced, runs in 3 blocks, 3 outputs
  ((100003,), (0,)),  # everything into one output, 4 blocks
  ((257, 1031), (0,)),  # inner kept: a row of 1031, two column tiles
  ((70001, 3), (0,)),  # inner kept: width 3, 70001 rows accumulated
  ((5, 301, 2001), (1,)),  # inner kept, 5 output rows x 2 tiles, over the pool
  ((40, 33, 50), (0, 2)),  # reduced groups on both sides of a kept one
  ((9, 1, 11), (1,)),  # a size-1 reduced dim: a copy
  ((9, 1, 11), (0, 1)),  # size-1 dim merged with a reduced one
  ((64, 64, 65), (0, 1)),  # inner kept, 4096 rows into one output row
  ((6, 5, 4, 3), (0, 2)),  # alternating kept/reduced, inner kept
  ((2, 3), ()),  # nothing reduced
  ((33, 13), (1,)),  # runs of one vector (f32) or three (f64) and a remainder
  ((17, 5), (1,)),  # runs shorter than a vector
]
REDUCE_IDS = [f"{'x'.join(map(str, s))}-{a}" for s, a in REDUCTIONS]


def float_tol(dtype, n):
  eps = np.finfo(dtype).eps
  return (1e-5 if dtype == np.float32 else 1e-12), 4 * n * eps * np.sqrt(n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,axes", REDUCTIONS, ids=REDUCE_IDS)
def test_float_sum_matches_numpy(shape, axes, dtype):
  x = data(dtype, shape, 1)
  ours = workshop(lambda x: lax.reduce(x, np.array(0, dtype), lax.add, axes), x)
  ref = np.sum(x.astype(np.float64), axis=axes)
  n = int(np.prod([shape[a] for a in axes]))
  rtol, atol = float_tol(dtype, n)
  assert ours.dtype == dtype and ours.shape == ref.shape
  np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
  "dtype",
  [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64],
  ids=["s8", "u8", "s16", "s32", "u32", "s64"],
)
@pytest.mark.parametrize("body", ["add", "max", "min", "mul", "and", "or"])
@pytest.mark.parametrize("shape,axes", REDUCTIONS, ids=REDUCE_IDS)
def test_int_reduce_exact(shape, axes, body, dtype):
  x = data(dtype, shape, 2)
  combine, init, ref_fn = {
    "add": (lax.add, 0, np.add.reduce),
    "mul": (lax.mul, 1, np.multiply.reduce),
    "max": (lax.max, np.iinfo(dtype).min, np.maximum.reduce),
    "min": (lax.min, np.iinfo(dtype).max, np.minimum.reduce),
    "and": (
      lax.bitwise_and,
      -1 if np.iinfo(dtype).min < 0 else np.iinfo(dtype).max,
      np.bitwise_and.reduce,
    ),
    "or": (lax.bitwise_or, 0, np.bitwise_or.reduce),
  }[body]
  ours = workshop(lambda x: lax.reduce(x, np.array(init, dtype), combine, axes), x)
  with np.errstate(over="ignore"):
    ref = ref_fn(x, axis=axes) if axes else x  # numpy wraps around as XLA does
  np.testing.assert_array_equal(ours, np.asarray(ref, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,axes", REDUCTIONS, ids=REDUCE_IDS)
def test_float_max_min_exact_with_nan(shape, axes, dtype):
  x = data(dtype, shape, 3)
  flat = x.reshape(-1)
  flat[len(flat) // 3] = np.nan  # lands in one output (or block) of every shape
  ours = workshop(lambda x: (jnp.max(x, axis=axes), jnp.min(x, axis=axes)), x)
  np.testing.assert_array_equal(ours[0], np.max(x, axis=axes))
  np.testing.assert_array_equal(ours[1], np.min(x, axis=axes))


@pytest.mark.parametrize(
  "jnp_reduce,np_reduce", [(jnp.all, np.all), (jnp.any, np.any)], ids=["all", "any"]
)
@pytest.mark.parametrize("shape,axes", REDUCTIONS, ids=REDUCE_IDS)
def test_pred_reduce(shape, axes, jnp_reduce, np_reduce):
  x = data(np.bool_, shape, 4)
  if np_reduce is np.any:
    x = ~x  # mostly false
  np.testing.assert_array_equal(
    workshop(lambda x: jnp_reduce(x, axis=axes), x), np_reduce(x, axis=axes)
  )


def test_complex_sum_matches_numpy():
  rng = np.random.default_rng(5)
  x = (rng.standard_normal((300, 257)) + 1j * rng.standard_normal((300, 257))).astype(np.complex64)
  for axis in (0, 1, None):
    np.testing.assert_allclose(
      workshop(lambda x: jnp.sum(x, axis=axis), x),
      np.sum(x.astype(np.complex128), axis=axis),
      rtol=1e-5,
      atol=1e-3,
    )


def test_large_sum_is_deterministic():
  # The summation order depends on the shape only, whichever threads ran which block.
  x = data(np.float32, (3, 200001), 6)
  first = workshop(lambda x: (jnp.sum(x), jnp.sum(x, axis=0), jnp.sum(x, axis=1)), x)
  for _ in range(3):
    again = workshop(lambda x: (jnp.sum(x), jnp.sum(x, axis=0), jnp.sum(x, axis=1)), x)
    for a, b in zip(first, again):
      np.testing.assert_array_equal(a, b)


def test_dot_bits_do_not_depend_on_whether_the_helpers_are_awake():
  # How many threads share a kernel depends on whether the pool's helpers still poll after
  # their last task (thread_pool.cc, PartsFor); a dot's blocks, whose rows choose its
  # GEMV / register-tile / GEMM path, depend on the shape and thread count only
  # (BlocksFor). Called right after a split kernel (helpers polling) and after they have
  # parked, the product is the same to the bit; and close to float64.
  a, b = data(np.float32, (16, 60000), 7), data(np.float32, (60000, 16), 8)
  results = results_with_helpers_awake_and_parked(jnp.matmul, a, b)
  for r in results:
    np.testing.assert_array_equal(r, results[0])
  exact = a.astype(np.float64) @ b.astype(np.float64)
  np.testing.assert_allclose(results[0], exact, rtol=1e-4, atol=1e-2)


# ---- dot_general ----


def dot_tol(dtype, k):
  if np.dtype(dtype).kind not in "fc":
    return 0, 0
  eps = np.finfo(dtype).eps
  return 10 * eps, 4 * k * eps * 100


def dot_data(dtype, shape, seed):
  rng = np.random.default_rng(seed)
  if np.dtype(dtype).kind in "fc":
    return (rng.standard_normal(shape) * 3).astype(dtype)
  return rng.integers(0 if np.dtype(dtype).kind == "u" else -20, 20, shape).astype(dtype)


TRANSPOSED_RESULTS = {
  # name: (lhs, rhs, dimension numbers, permutation of the result)
  "matmul_T": ((5, 7), (7, 3), (((1,), (0,)), ((), ())), (1, 0)),
  "grad_w": ((130, 67), (130, 33), (((0,), (0,)), ((), ())), (1, 0)),  # (x.T @ g).T
  "batched_T": ((4, 9, 6), (4, 6, 5), (((2,), (1,)), ((0,), (0,))), (0, 2, 1)),
  "two_free_dims": ((2, 3, 4), (4, 5), (((2,), (0,)), ((), ())), (2, 0, 1)),
}


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, np.int32, np.complex64], ids=["f32", "f64", "s32", "c64"]
)
@pytest.mark.parametrize("name", list(TRANSPOSED_RESULTS))
def test_transposed_dot_result(name, dtype):
  lhs, rhs, dn, perm = TRANSPOSED_RESULTS[name]
  x, y = dot_data(dtype, lhs, 7), dot_data(dtype, rhs, 8)
  f = lambda x, y: lax.dot_general(x, y, dn).transpose(perm)
  kinds = ops(compile_fn(f, x, y).plan)
  assert "transpose" not in kinds and kinds.count("dot_general") == 1, kinds
  rtol, atol = dot_tol(dtype, int(np.prod([lhs[d] for d in dn[0][0]])))
  assert_matches_cpu(f, x, y, rtol=rtol, atol=atol)


def test_transpose_not_folded_when_it_does_not_swap_or_result_is_reused():
  x, y = dot_data(np.float32, (4, 9, 6), 9), dot_data(np.float32, (4, 6, 5), 10)
  dn = (((2,), (1,)), ((0,), (0,)))

  def two_users(x, y):
    d = lax.dot_general(x, y, dn)
    return d.transpose(0, 2, 1), d * 2

  for f in (
    lambda x, y: lax.dot_general(x, y, dn).transpose(1, 0, 2),  # moves the batch
    two_users,
  ):
    assert "transpose" in ops(compile_fn(f, x, y).plan)
    assert_matches_cpu(f, x, y, rtol=1e-5, atol=1e-4)


FOLDED_OPERANDS = {
  # name: (function, lhs shape, rhs shape): transposes the dot absorbs.
  "x_at_xT": (lambda x, y: x @ x.T + y, (5, 7), (5, 5)),  # both operands read x
  "attention_scores": (  # q k^T per (batch, head) from [b, s, h, d] activations
    lambda q, k: jnp.einsum("bhsd,bhtd->bhst", q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3)),
    (2, 9, 3, 4),
    (2, 11, 3, 4),
  ),
  "chain": (
    lambda x, y: jnp.swapaxes(x.transpose(0, 2, 1, 3), -1, -2) @ y,
    (2, 6, 3, 5),
    (2, 3, 6, 4),
  ),  # two transposes of x in a row
  "rhs_transposed_batch": (lambda x, y: x @ y.transpose(2, 0, 1), (4, 3, 5), (5, 6, 4)),
}


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, np.int32, np.complex64], ids=["f32", "f64", "s32", "c64"]
)
@pytest.mark.parametrize("name", list(FOLDED_OPERANDS))
def test_transposed_dot_operands(name, dtype):
  f, lhs, rhs = FOLDED_OPERANDS[name]
  x, y = dot_data(dtype, lhs, 16), dot_data(dtype, rhs, 17)
  kinds = ops(compile_fn(f, x, y).plan)
  assert "transpose" not in kinds, kinds
  rtol, atol = dot_tol(dtype, 16)
  assert_matches_cpu(f, x, y, rtol=rtol, atol=atol)


def test_operand_transpose_reordering_free_dims_is_kept():
  # Folding would list the lhs free dims in another order than the result does.
  x, y = dot_data(np.float32, (3, 2, 4), 18), dot_data(np.float32, (4, 5), 19)
  f = lambda x, y: lax.dot_general(x.transpose(1, 0, 2), y, (((2,), (0,)), ((), ())))
  assert "transpose" in ops(compile_fn(f, x, y).plan)
  assert_matches_cpu(f, x, y, rtol=1e-5, atol=1e-4)


def test_transposed_bf16_dot_result():
  # Upcast dots (computed in f32, converted) keep their transpose; the result still matches.
  x = dot_data(np.float32, (8, 16), 11).astype(jnp.bfloat16)
  y = dot_data(np.float32, (16, 4), 12).astype(jnp.bfloat16)
  assert_matches_cpu(lambda x, y: (x @ y).T, x, y, rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, np.int32, np.complex64], ids=["f32", "f64", "s32", "c64"]
)
@pytest.mark.parametrize(
  "shapes,dn",
  [
    (((64, 16, 17), (64, 17, 15)), (((2,), (1,)), ((0,), (0,)))),
    (((33, 17, 16), (33, 15, 17)), (((1,), (2,)), ((0,), (0,)))),  # both transposed
    (((16, 3, 8, 8), (16, 3, 8, 8)), (((3,), (3,)), ((0, 1), (0, 1)))),  # attention q k^T
    (((5, 1, 7), (5, 7, 1)), (((2,), (1,)), ((0,), (0,)))),  # 1x1 results
  ],
  ids=["bmm", "transposed", "heads", "size1"],
)
def test_batched_small_gemms(shapes, dn, dtype):
  # Small entries: whole entries are spread over the thread pool.
  x, y = dot_data(dtype, shapes[0], 13), dot_data(dtype, shapes[1], 14)
  rtol, atol = dot_tol(dtype, shapes[0][dn[0][0][0]])
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, dn), x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, np.int32, np.complex64], ids=["f32", "f64", "s32", "c64"]
)
@pytest.mark.parametrize(
  "shapes,dn",
  [
    (((1, 131, 129), (1, 129, 121)), (((2,), (1,)), ((0,), (0,)))),  # one entry, by rows
    (((3, 131, 129), (3, 129, 121)), (((2,), (1,)), ((0,), (0,)))),  # odd batch
    (((2, 129, 67), (2, 133, 129)), (((1,), (2,)), ((0,), (0,)))),  # by columns, both T
    (((67, 300), (300, 133)), (((1,), (0,)), ((), ()))),  # no batch, by columns
    (((3, 5, 0), (3, 0, 4)), (((2,), (1,)), ((0,), (0,)))),  # empty contraction
  ],
  ids=["one", "odd_batch", "by_columns", "plain", "k0"],
)
def test_big_gemms_split_in_blocks(shapes, dn, dtype):
  # Entries over 4 MFLOP: every entry is cut into one block of rows (or columns, when the
  # result has fewer rows than columns) per thread, all in one ParallelFor.
  x, y = dot_data(dtype, shapes[0], 20), dot_data(dtype, shapes[1], 21)
  rtol, atol = dot_tol(dtype, shapes[0][dn[0][0][0]])
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, dn), x, y, rtol=rtol, atol=atol)


_MANY_THREADS_SCRIPT = """
import jax, numpy as np
from jax import lax
jax.config.update("jax_enable_x64", True)
ws, cpu = jax.devices("workshop")[0], jax.devices("cpu")[0]
rng = np.random.default_rng(0)
cases = [  # lhs, rhs, dimension numbers, dtype
  ((512, 512), (512, 512), (((1,), (0,)), ((), ())), np.float32),  # 12 blocks of rows
  ((256, 1536), (1536, 384), (((1,), (0,)), ((), ())), np.float32),  # of columns
  ((300, 257), (263, 300), (((0,), (1,)), ((), ())), np.float32),  # both transposed, by columns
  ((300, 263), (257, 300), (((0,), (1,)), ((), ())), np.float32),  # both transposed, by rows
  ((2, 384, 300), (2, 300, 384), (((2,), (1,)), ((0,), (0,))), np.float64),  # batched
  ((192, 256), (256, 200), (((1,), (0,)), ((), ())), np.complex64),
  ((2, 200, 170), (2, 170, 190), (((2,), (1,)), ((0,), (0,))), np.float64),  # fewer blocks
]
for lhs, rhs, dn, dtype in cases:
  x = rng.standard_normal(lhs).astype(dtype)
  y = rng.standard_normal(rhs).astype(dtype)
  f = jax.jit(lambda x, y: lax.dot_general(x, y, dn, precision=lax.Precision.HIGHEST))
  got = np.asarray(f(*jax.device_put((x, y), ws)))
  want = np.asarray(f(*jax.device_put((x.astype(np.complex128), y.astype(np.complex128)), cpu)))
  tol = 4 * lhs[dn[0][0][0]] * np.finfo(dtype).eps * np.max(np.abs(want))
  err = float(np.max(np.abs(got - want)))
  print(lhs, rhs, "OK" if err <= tol else f"BAD {err} > {tol}")
"""


def test_big_gemms_split_over_many_threads():
  # This project's 2-core machines cut a big GEMM into 2 blocks; users' machines into up
  # to one per thread (dot.cc, Gemm: ranges of C's rows, or of its columns when it has
  # fewer rows, each block at its offsets into A or B and into C). In a process of 12
  # threads (on 2 cores they mostly run one after another: this checks the cut, not the
  # concurrency), each case against the product in complex128 on the CPU backend; the
  # pool trace shows the first products cut into 12 blocks.
  import os
  import subprocess
  import sys

  env = dict(
    os.environ, WORKSHOP_NUM_THREADS="12", WORKSHOP_POOL_TRACE="1", JAX_PLATFORMS="workshop,cpu"
  )
  out = subprocess.run(
    [sys.executable, "-c", _MANY_THREADS_SCRIPT],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert out.returncode == 0, out.stderr[-3000:]
  lines = out.stdout.strip().splitlines()
  assert len(lines) == 7 and all(line.endswith("OK") for line in lines), out.stdout
  assert "workshop pool: 12 chunks" in out.stderr, out.stderr[-3000:]


def test_mlp_gradient_matches_cpu():
  rng = np.random.default_rng(15)
  w1 = (rng.standard_normal((48, 64)) / 7).astype(np.float32)
  w2 = (rng.standard_normal((64, 10)) / 8).astype(np.float32)
  x = rng.standard_normal((32, 48)).astype(np.float32)

  def loss(w1, w2, x):
    return jnp.sum(jax.nn.log_softmax(jax.nn.relu(x @ w1) @ w2) ** 2)

  assert_matches_cpu(jax.grad(loss, argnums=(0, 1)), w1, w2, x, rtol=1e-4, atol=1e-4)


def test_transposed_result_feeding_another_dot():
  # t = (x @ y).T is written by the first dot and then read by the second as it is.
  x, y, z = (dot_data(np.float32, s, 20 + i) for i, s in enumerate([(5, 6), (6, 7), (5, 3)]))
  f = lambda x, y, z: (x @ y).T @ z
  assert "transpose" not in ops(compile_fn(f, x, y, z).plan)
  assert_matches_cpu(f, x, y, z, rtol=1e-5, atol=1e-3)


# ---- Matrix-vector products (kernels/dot/dot.cc GemmBlock: one GEMV per row or column of a
# block of C when it has one, or up to 4 when the block's matrix is over 4 MiB), against
# the CPU backend and numpy in float64 / complex128.

GEMV_CASES = {
  # name: (lhs shape, rhs shape, dimension numbers)
  "vec_mat": ((1, 300), (300, 257), (((1,), (0,)), ((), ()))),  # x @ W: W read transposed
  "vec_matT": ((1, 300), (257, 300), (((1,), (1,)), ((), ()))),  # x @ W.T: W read as stored
  "mat_vec": ((257, 300), (300,), (((1,), (0,)), ((), ()))),  # N == 1: C's column
  "matT_vec": ((300, 257), (300,), (((0,), (0,)), ((), ()))),  # W.T @ v
  "vecT_mat": ((300, 1), (300, 257), (((0,), (0,)), ((), ()))),  # x stored as a column
  "vec_vec": ((300,), (300,), (((0,), (0,)), ((), ()))),  # M == N == 1
  "one_col": ((257, 300), (300, 1), (((1,), (0,)), ((), ()))),  # N == 1 as a matrix
  # Just past and at kSmallRowsMax free rows: DotGeneral's SmallGemv and the general path.
  "mat9_vec": ((9, 300), (300,), (((1,), (0,)), ((), ()))),
  "vec_mat8": ((300,), (300, 8), (((0,), (0,)), ((), ()))),
  "k1_vec_mat": ((1,), (1, 20), (((0,), (0,)), ((), ()))),  # one contracted element
  # Per batch entry a vector whose elements are 5 apart (the batch dim is minor).
  "batched_strided": ((300, 5), (5, 300, 33), (((0,), (1,)), ((1,), (0,)))),
  "batched_mat_vec": ((4, 33, 300), (4, 300), (((2,), (1,)), ((0,), (0,)))),
  "k0": ((1, 0), (0, 7), (((1,), (0,)), ((), ()))),  # empty contraction: zeros
  "m0": ((0, 9), (9,), (((1,), (0,)), ((), ()))),
  "n0": ((9,), (9, 0), (((0,), (0,)), ((), ()))),
}

_GEMV_DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int32]


def _reference_f64(x, y, dn):
  """The product in float64 (complex128 for complex operands) with numpy's einsum-free
  tensordot over the same dimension numbers (batch dims by a loop)."""
  (lc, rc), (lb, rb) = dn
  wide = np.complex128 if np.iscomplexobj(x) else np.float64
  x, y = x.astype(wide), y.astype(wide)
  if not lb:
    return np.tensordot(x, y, (lc, rc))
  x = np.moveaxis(x, lb[0], 0)
  y = np.moveaxis(y, rb[0], 0)
  shift = lambda dims, b: [d - (d > b) for d in dims]
  return np.stack(
    [np.tensordot(x[i], y[i], (shift(lc, lb[0]), shift(rc, rb[0]))) for i in range(x.shape[0])]
  )


@pytest.mark.parametrize("dtype", _GEMV_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(GEMV_CASES))
def test_matrix_vector_products(name, dtype):
  lhs, rhs, dn = GEMV_CASES[name]
  x, y = dot_data(dtype, lhs, 30), dot_data(dtype, rhs, 31)
  k = int(np.prod([lhs[d] for d in dn[0][0]]))
  rtol, atol = dot_tol(dtype, k)
  f = lambda x, y: lax.dot_general(x, y, dn)
  ours = assert_matches_cpu(f, x, y, rtol=rtol, atol=atol)
  want = _reference_f64(x, y, dn)
  assert ours.shape == want.shape
  if rtol == 0:
    np.testing.assert_array_equal(ours, want.astype(dtype))
  else:
    np.testing.assert_allclose(ours, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", ["vec_mat", "vec_matT", "mat_vec", "matT_vec", "mat9_vec"])
def test_unbatched_matrix_vector_product_bits_equal_the_general_path(name, dtype):
  # DotGeneral's SmallGemv (no batch dims, in-cache matrix) calls the GEMV the general path
  # calls for the same product: a batch of one entry takes the general path.
  lhs, rhs, dn = GEMV_CASES[name]
  x, y = dot_data(dtype, lhs, 36), dot_data(dtype, rhs, 37)
  (lc, rc), _ = dn
  batched_dn = (((lc[0] + 1,), (rc[0] + 1,)), ((0,), (0,)))
  plain = workshop(lambda x, y: lax.dot_general(x, y, dn), x, y)
  batched = workshop(lambda x, y: lax.dot_general(x[None], y[None], batched_dn)[0], x, y)
  np.testing.assert_array_equal(plain, batched)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", ["vec_mat", "vec_matT", "mat_vec", "matT_vec", "batched_strided"])
def test_half_matrix_vector_products(name, dtype):
  # Computed in f32 (compiler/rules/dot.py) then rounded: within a few units of the last
  # place of the f64 product's magnitude.
  lhs, rhs, dn = GEMV_CASES[name]
  x = dot_data(np.float32, lhs, 32).astype(dtype)
  y = dot_data(np.float32, rhs, 33).astype(dtype)
  f = lambda x, y: lax.dot_general(x, y, dn)
  ours = assert_matches_cpu(f, x, y, rtol=2e-2, atol=1.0)
  want = _reference_f64(np.asarray(x, np.float64), np.asarray(y, np.float64), dn)
  np.testing.assert_allclose(np.asarray(ours, np.float64), want, rtol=2e-2, atol=1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
  "lhs,rhs",
  [
    ((1, 2000), (2000, 1600)),  # 6.4 MFLOP: split over threads by columns
    ((1600, 2000), (2000, 1)),  # by rows
    ((3, 1500), (1500, 800)),  # few rows of an out-of-cache matrix: 3 GEMVs per block
    ((1500, 800), (800, 4)),  # few columns
    ((1024, 1024), (1024, 1)),  # 4 MiB: split by rows (cost model counts the bytes)
    ((1027, 1553), (1553, 1)),  # rows past the last 4, k past the last 16 and 512 block
  ],
  ids=["vec_mat", "mat_vec", "rows3", "cols4", "mat_vec_4mib", "mat_vec_tails"],
)
def test_big_matrix_vector_products(lhs, rhs, dtype):
  x, y = dot_data(dtype, lhs, 34), dot_data(dtype, rhs, 35)
  rtol, atol = dot_tol(dtype, lhs[1])
  ours = assert_matches_cpu(lambda x, y: x @ y, x, y, rtol=rtol, atol=atol)
  np.testing.assert_allclose(ours, x.astype(np.float64) @ y, rtol=rtol, atol=atol)


# Blocks of 3 to 8 rows (or columns) of an f32 product whose matrix operand has contiguous
# rows, over 100^3 multiply-adds: register tiles (kernels/dot/small_rows.cc). Widths that are
# not a multiple of the 16-column strip and contractions that are not a multiple of the
# 64-row block reach the tails.
SMALL_ROWS_CASES = {
  "x_at_w": ((5, 520), (520, 517), (((1,), (0,)), ((), ()))),
  "xT_at_w": ((520, 5), (520, 517), (((0,), (0,)), ((), ()))),  # x read transposed
  "wT_at_v": ((520, 517), (520, 6), (((0,), (0,)), ((), ()))),  # C's 6 columns as the rows
  "rows8": ((8, 300), (300, 700), (((1,), (0,)), ((), ()))),
  "rows3": ((3, 700), (700, 600), (((1,), (0,)), ((), ()))),
  "batched": ((4, 6, 400), (4, 400, 450), (((2,), (1,)), ((0,), (0,)))),
  "split": ((4, 2000), (2000, 1600), (((1,), (0,)), ((), ()))),  # blocks over threads
}


@pytest.mark.parametrize("name", list(SMALL_ROWS_CASES))
def test_few_row_products(name):
  lhs, rhs, dn = SMALL_ROWS_CASES[name]
  x, y = dot_data(np.float32, lhs, 36), dot_data(np.float32, rhs, 37)
  k = int(np.prod([lhs[d] for d in dn[0][0]]))
  rtol, atol = dot_tol(np.float32, k)
  f = lambda x, y: lax.dot_general(x, y, dn)
  ours = assert_matches_cpu(f, x, y, rtol=rtol, atol=atol)
  np.testing.assert_allclose(ours, _reference_f64(x, y, dn), rtol=rtol, atol=atol)


def test_few_row_products_bf16_and_nonfinite():
  # bf16 runs as an f32 product (compiler/rules/dot.py); inf and NaN in the operands reach
  # the same outputs as on the CPU backend.
  lhs, rhs, dn = SMALL_ROWS_CASES["x_at_w"]
  x, y = dot_data(np.float32, lhs, 38), dot_data(np.float32, rhs, 39)
  f = lambda x, y: lax.dot_general(x, y, dn)
  assert_matches_cpu(f, x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), rtol=2e-2, atol=1.0)
  x[1, 7], x[3, 100], y[200, 33] = np.inf, np.nan, -np.inf
  ours = assert_matches_cpu(f, x, y, rtol=1e-4, atol=1e-2)
  assert np.isnan(ours[3]).all() and not np.isfinite(ours[1]).any()


# ---- 8-bit operands into s32 (kernels/dot/dot.cc NarrowIntGemm): exact f32 GEMMs over
# blocks of the contraction (1024 elements for s8 x s8, 514 for s8 x u8, 258 for u8 x u8),
# compared bit for bit with numpy's int64 product and with the CPU backend.

_NARROW = [(np.int8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]


def _int_operand(rng, dtype, shape, extreme=False):
  info = np.iinfo(dtype)
  if extreme:  # every product the largest the dtypes allow
    return np.full(shape, info.min if info.min else info.max, dtype)
  return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("lhs_dtype,rhs_dtype", _NARROW, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
  "m,k,n", [(5, 3000, 7), (64, 1025, 33), (17, 258, 9), (1, 1, 1), (3, 0, 4), (0, 5, 2)]
)
@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
def test_narrow_int_dot_exact(lhs_dtype, rhs_dtype, m, k, n, extreme):
  rng = np.random.default_rng(m * 7 + k)
  a = _int_operand(rng, lhs_dtype, (m, k), extreme)
  b = _int_operand(rng, rhs_dtype, (k, n), extreme)
  f = lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32)  # noqa: E731
  got = workshop(f, a, b)
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
  assert_matches_cpu(f, a, b)


@pytest.mark.parametrize("spec", ["bik,bjk->bij", "bki,bkj->bij", "ik,bjk->bij"])
def test_narrow_int_dot_batched_and_transposed(spec):
  rng = np.random.default_rng(5)
  shapes = {
    "bik": (3, 40, 1100),
    "bki": (3, 1100, 40),
    "ik": (40, 1100),
    "bjk": (3, 50, 1100),
    "bkj": (3, 1100, 50),
  }
  lhs, rhs = spec.split("->")[0].split(",")
  a = _int_operand(rng, np.int8, shapes[lhs])
  b = _int_operand(rng, np.int8, shapes[rhs])
  f = lambda x, y: jnp.einsum(spec, x, y, preferred_element_type=jnp.int32)  # noqa: E731
  np.testing.assert_array_equal(
    workshop(f, a, b), np.einsum(spec, a.astype(np.int64), b.astype(np.int64))
  )
  assert_matches_cpu(f, a, b)


def test_narrow_int_dot_wraps_like_int32():
  """A contraction long enough to overflow s32 wraps as the CPU backend's does."""
  a = np.full((1, 140000), -128, np.int8)
  b = np.full((140000, 1), -128, np.int8)
  f = lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32)  # noqa: E731
  assert_matches_cpu(f, a, b)


# ---- dot_general ----


def dot_operand(dtype, shape, seed):
  # Small integers: products and sums stay exact in every dtype (no overflow).
  rng = np.random.default_rng(seed)
  if np.dtype(dtype).kind == "f":
    return (rng.standard_normal(shape) * 3).astype(dtype)
  lo = 0 if np.dtype(dtype).kind == "u" else -20
  return rng.integers(lo, 20, shape).astype(dtype)


DOTS = {
  # name: (lhs shape, rhs shape, ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)))
  "matmul": ((5, 7), (7, 3), (((1,), (0,)), ((), ()))),
  "matvec": ((5, 7), (7,), (((1,), (0,)), ((), ()))),
  "vector_dot": ((9,), (9,), (((0,), (0,)), ((), ()))),
  "outer": ((4,), (3,), (((), ()), ((), ()))),
  "lhs_transposed": ((7, 5), (7, 3), (((0,), (0,)), ((), ()))),  # x.T @ y
  "rhs_transposed": ((5, 7), (3, 7), (((1,), (1,)), ((), ()))),  # x @ y.T
  "both_transposed": ((7, 5), (3, 7), (((0,), (1,)), ((), ()))),
  "batched": ((2, 5, 7), (2, 7, 3), (((2,), (1,)), ((0,), (0,)))),
  "batch_last": ((5, 7, 2), (7, 3, 2), (((1,), (0,)), ((2,), (2,)))),
  "two_contractions": ((3, 4, 5), (4, 5, 2), (((1, 2), (0, 1)), ((), ()))),
  "odd_orders": ((3, 4, 2), (5, 2, 4), (((1,), (2,)), ((2,), (1,)))),
  "empty_contraction": ((3, 0), (0, 4), (((1,), (0,)), ((), ()))),
  "empty_result": ((0, 4), (4, 3), (((1,), (0,)), ((), ()))),
}


@vertical_slice
@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("name", list(DOTS))
def test_dot_general(name, dtype):
  lhs_shape, rhs_shape, dn = DOTS[name]
  x, y = dot_operand(dtype, lhs_shape, 17), dot_operand(dtype, rhs_shape, 18)
  k = int(np.prod([lhs_shape[d] for d in dn[0][0]]))
  rtol, atol = dot_tol(dtype, k)
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, dn), x, y, rtol=rtol, atol=atol)


@vertical_slice
def test_dot_general_pred():
  # Computed in s32 (optable.py): a nonzero sum of products converts back to true, XLA:CPU's
  # OR of ANDs.
  x = sample(PRED, (4, 5), seed=31)
  y = sample(PRED, (5, 3), seed=32)
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ()))), x, y)


@vertical_slice
@pytest.mark.parametrize("dtype", [F32, S32], ids=ids([F32, S32]))
@pytest.mark.parametrize(
  "expr,shapes",
  [
    ("x.T @ y", ((6, 4), (6, 3))),
    ("ibj,jkb->bki", ((2, 3, 4), (4, 5, 3))),
    ("bij,bjk->bik", ((3, 2, 4), (3, 4, 5))),
    ("ijk,kj->ij", ((2, 3, 4), (4, 3))),
  ],
  ids=["xT_at_y", "einsum_odd", "einsum_batched", "einsum_batch_in_rhs"],
)
def test_jnp_contractions(expr, shapes, dtype):
  # Whatever mix of transpose/dot_general jnp emits for these, the result must match.
  x, y = dot_operand(dtype, shapes[0], 19), dot_operand(dtype, shapes[1], 20)
  f = (lambda x, y: x.T @ y) if expr == "x.T @ y" else (lambda x, y: jnp.einsum(expr, x, y))
  assert_matches_cpu(f, x, y, rtol=1e-5 if dtype == F32 else 0, atol=1e-4 if dtype == F32 else 0)


@vertical_slice
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_large_float_matmul(transpose_a, transpose_b):
  # Big enough that the GEMM path (OpenBLAS) is taken rather than a small-loop fallback.
  x = dot_operand(F32, (65, 96) if not transpose_a else (96, 65), 21)
  y = dot_operand(F32, (96, 70) if not transpose_b else (70, 96), 22)
  dn = (((0 if transpose_a else 1,), (1 if transpose_b else 0,)), ((), ()))
  rtol, atol = dot_tol(F32, 96)
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, dn), x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
  "shapes,dn",
  [
    (((10000, 16), (10000, 16)), (((1,), (1,)), ((0,), (0,)))),  # vmap(jnp.dot)
    (((3000, 4, 4), (3000, 4)), (((2,), (1,)), ((0,), (0,)))),  # batched 4x4 matvec
    (((2000, 5, 3), (2000, 5, 2)), (((1,), (1,)), ((0,), (0,)))),  # both transposed views
    (((7, 37), (7, 37)), (((1,), (1,)), ((0,), (0,)))),  # k not a multiple of 8
    (((2, 50), (2, 50)), (((1,), (1,)), ((0,), (0,)))),  # two entries
  ],
  ids=["rows_of_16", "matvec_4x4", "transposed", "k37", "two"],
)
def test_tiny_batched_entries_match_float64(shapes, dn, dtype):
  # Batch entries of at most 2048 multiply-adds are computed in the dot kernel (dot.cc
  # TinyEntries: eight interleaved partial sums per output), not by one BLAS call each;
  # checked against float64 numpy within a few roundings per term, NaN and inf propagated.
  with jax.enable_x64(True):
    rng = np.random.default_rng(sum(shapes[0]))
    x = rng.standard_normal(shapes[0]).astype(dtype)
    y = rng.standard_normal(shapes[1]).astype(dtype)
    x.reshape(-1)[5] = np.nan
    y.reshape(-1)[-3] = np.inf
    f = lambda a, b: lax.dot_general(a, b, dn)  # noqa: E731
    got = run_on(jax.devices("workshop")[0], f, x, y)
    wide = lambda v: v.astype(np.float64)  # noqa: E731
    want = run_on(jax.devices("cpu")[0], f, wide(x), wide(y))
    # Each term and partial sum rounds once: |error| <= 2 k eps sum |x y| (Higham).
    k = shapes[0][dn[0][0][0]]
    scale = run_on(jax.devices("cpu")[0], f, np.abs(wide(x)), np.abs(wide(y)))
    bound = 2 * k * np.finfo(dtype).eps * scale
  assert got.dtype == dtype
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  finite = np.isfinite(want)
  np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
  assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite] + 1e-30)
