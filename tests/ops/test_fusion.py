"""Elementwise fusion (compiler/fusion.py, kernels/fusion.cc): which runs fuse, and that a
fused program computes what JAX's CPU backend computes, across block and thread boundaries.

Every test runs twice: with the code-generation tier off (WORKSHOP_CODEGEN=0: every fusion
is interpreted block by block) and forced on (WORKSHOP_CODEGEN=force: every fusion the tier
covers, whatever its size, becomes `jit_fusion`, the same body compiled to one native loop,
compiler/codegen/fusions.py). The structure checks read a `jit_fusion` as the fusion it
was made from.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_plugins.workshop.bench import heldout_third
from reference import assert_matches_cpu, run_on
from compiler_helpers import compile_fn
from jax_plugins.workshop.compiler.fusion import fusion_elements


pytestmark = pytest.mark.codegen_settings("0", "force")  # conftest.py


def ops(plan):
  return ["fusion" if i.op == "jit_fusion" else i.op for i in plan.instrs]


def fused_plan(f, *args):
  return compile_fn(f, *args, fuse=True).plan


def test_chain_with_scalar_constants_is_one_fusion():
  plan = fused_plan(lambda x: jnp.tanh(x * 2 + 1), np.ones(8, np.float32))
  assert ops(plan) == ["constant", "constant", "fusion"]
  body = plan.instrs[-1].attrs["body"]
  assert ops(body) == ["broadcast_in_dim", "multiply", "broadcast_in_dim", "add", "tanh"]
  assert plan.instrs[-1].outs == plan.results


def test_fusion_stops_at_a_reduction_and_keeps_values_used_later():
  # exp(x) is read by the fused divide after the reduction (over a leading axis: no row
  # fusion takes it), so the first fusion outputs it.
  plan = fused_plan(
    lambda x: jnp.exp(x - 1) / jnp.sum(jnp.exp(x - 1), axis=0), np.ones((8, 4), np.float32)
  )
  kinds = ops(plan)
  assert "reduce" in kinds and kinds.count("fusion") >= 1
  first = plan.instrs[kinds.index("fusion")]
  later_reads = {s for i in plan.instrs[kinds.index("fusion") + 1 :] for s in i.ins}
  assert set(first.outs) <= later_reads | set(plan.results)


def test_single_op_is_not_wrapped():
  assert ops(fused_plan(lambda x, y: x + y, np.ones(4, np.float32), np.ones(4, np.float32))) == [
    "add"
  ]


# Sizes around the 1024-element block and the thread pool's grain (64K elements).
@pytest.mark.parametrize("n", [1, 7, 1024, 1025, 65536 * 3 + 5])
def test_fused_chain_matches_cpu(n):
  x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
  assert_matches_cpu(lambda x: jnp.where(x > 0, jnp.exp(-x * x), x / 3) + 0.5, x, rtol=2e-6)


def test_fused_chain_with_two_outputs_and_mixed_dtypes():
  x = np.arange(-50, 50, dtype=np.float32)

  def f(x):
    y = jnp.abs(x) * 3
    return y, (y > 10).astype(jnp.int32) + jnp.int32(1)

  assert_matches_cpu(f, x)


def test_fused_integer_division_by_zero_follows_xla():
  x = np.arange(-8, 8, dtype=np.int32)
  assert_matches_cpu(lambda x: (x * 3) // (x % 4) + 1, x)


# ---- Broadcasts of smaller operands inside a fusion (fusion.cc writes each block's
# slice: fills for rows, copies for columns, a strided walk for other mappings).


def _layer_norm(x, gamma, beta):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta


def array_broadcasts(body):
  """The body's broadcasts of operands with more than one element."""
  return [
    i for i in body.instrs if i.op == "broadcast_in_dim" and math.prod(body.slots[i.ins[0]][1]) > 1
  ]


def test_moved_row_statistics_keep_a_run_going():
  # Statistics over a leading axis (not a row fusion) are computed between two full-size
  # ops: they move before the run, which stays one fusion with row and column broadcasts.
  def f(x, g):
    y = x * 2
    col = jnp.tanh(jnp.sum(x, axis=0))
    return (y - col[None, :]) * g[:, None] + 1

  x, g = np.ones((64, 1024), np.float32), np.ones(64, np.float32)
  plan = fused_plan(f, x, g)
  last = plan.instrs[-1]
  assert ops(plan)[-1] == "fusion" and last.outs == plan.results and last.attrs["row"] == 1
  body = last.attrs["body"]
  sizes = {math.prod(body.slots[i.ins[0]][1]) for i in array_broadcasts(body)}
  assert sizes == {64, 1024}


# Rows of 1000 and 333 elements do not divide the 1024-element block, so blocks start
# mid-row; 65 * 1000 elements take more than one thread-pool batch.
@pytest.mark.parametrize("shape", [(3, 5), (7, 333), (65, 1000), (2, 1024), (5, 4096)])
def test_layer_norm_matches_cpu(shape):
  rng = np.random.default_rng(sum(shape))
  x = rng.standard_normal(shape).astype(np.float32)
  g, b = (rng.standard_normal(shape[-1]).astype(np.float32) for _ in range(2))
  # f32 with a ~1000-term mean: summation order differs from XLA's.
  assert_matches_cpu(_layer_norm, x, g, b, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape", [(4, 1), (9, 700), (300, 1024)])
def test_softmax_matches_cpu(shape):
  x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
  assert_matches_cpu(lambda x: jax.nn.softmax(x, -1), x, rtol=2e-5, atol=1e-7)


DTYPES = [np.float32, np.float64, np.int32, np.bool_]


def _values(rng, shape, dtype):
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if dtype == np.int32:
    return rng.integers(-100, 100, shape).astype(np.int32)
  return rng.standard_normal(shape).astype(dtype)


def _combine(a, b):
  # An elementwise op every dtype here has, with a result that depends on both sides.
  return a ^ b if a.dtype == jnp.bool_ else a * 3 - b


@pytest.mark.parametrize("shape", [(0, 5), (2, 0, 4), (3, 0)], ids=str)
@pytest.mark.parametrize(
  "name", ["softmax", "log_softmax", "logsumexp", "center", "layer_norm", "scale"]
)
def test_fusions_of_no_elements_match_cpu(name, shape):
  # Row fusions over zero rows hold a one-element init or statistic: nothing to compute
  # (fusion.cc MakeSchedule), where the row count once failed the compile.
  f = {
    "softmax": lambda x: jax.nn.softmax(x, -1),
    "log_softmax": lambda x: jax.nn.log_softmax(x, -1),
    "logsumexp": lambda x: jax.nn.logsumexp(x, -1),
    "center": lambda x: x - x.sum(-1, keepdims=True),
    "layer_norm": lambda x: (
      (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)
    ),
    "scale": lambda x: x * 2 + 1,
  }[name]
  ours = assert_matches_cpu(f, np.ones(shape, np.float32))
  assert ours.shape == jax.eval_shape(f, jax.ShapeDtypeStruct(shape, np.float32)).shape


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 7), (37, 129), (3, 5000)])
def test_row_and_column_broadcasts_match_cpu(dtype, shape):
  rng = np.random.default_rng(7)
  x = _values(rng, shape, dtype)
  row, col = _values(rng, shape[:1], dtype), _values(rng, shape[1:], dtype)

  def f(x, row, col):
    return _combine(_combine(x, row[:, None]), col[None, :])

  with jax.enable_x64(True):  # Keep f64 f64.
    plan = fused_plan(f, x, row, col)
    assert ops(plan)[-1] == "fusion"
    assert len(array_broadcasts(plan.instrs[-1].attrs["body"])) == 2
    assert_matches_cpu(f, x, row, col, rtol=1e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
def test_general_broadcast_mapping_matches_cpu(dtype):
  # [a, 1, c] -> [a, b, c]: repeats along the middle dim, a pattern that is neither a row
  # nor a column fill; and [b] -> [a, b, c] (b in the middle, repeated outside and inside).
  rng = np.random.default_rng(11)
  x = _values(rng, (5, 41, 67), dtype)
  y = _values(rng, (5, 1, 67), dtype)
  z = _values(rng, (41,), dtype)

  def f(x, y, z):
    return _combine(_combine(x, jnp.broadcast_to(y, x.shape)), z[None, :, None])

  with jax.enable_x64(True):
    plan = fused_plan(f, x, y, z)
    assert len(array_broadcasts(plan.instrs[-1].attrs["body"])) == 2
    assert_matches_cpu(f, x, y, z, rtol=1e-6 if dtype == np.float32 else 1e-14)


def test_broadcast_result_that_is_also_a_fusion_output():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((33, 1000)).astype(np.float32)
  r = rng.standard_normal(33).astype(np.float32)

  def f(x, r):
    b = jnp.broadcast_to(r[:, None], x.shape)
    return b, x * b + 1

  plan = fused_plan(f, x, r)
  assert ops(plan)[-1] == "fusion" and len(plan.instrs[-1].outs) == 2
  assert_matches_cpu(f, x, r)


def test_invariant_column_broadcast_with_scalar_chain_matches_cpu():
  # Rows of 512 repeat twice per 1024-element block, so gamma * 2 + 1 is the same slice in
  # every block (computed once per thread) while x varies; 130 rows take several batches.
  rng = np.random.default_rng(5)
  x = rng.standard_normal((130, 512)).astype(np.float32)
  g = rng.standard_normal(512).astype(np.float32)
  assert_matches_cpu(lambda x, g: x * (g[None, :] * 2 + 1) - 0.5, x, g, rtol=1e-6)


def test_moved_instructions_keep_their_own_order_and_values():
  # Independent small ops between big ones (moved before the big run) and a value of the
  # moved part read after the fusion.
  rng = np.random.default_rng(9)
  x = rng.standard_normal((16, 256)).astype(np.float32)
  s = rng.standard_normal(16).astype(np.float32)

  def f(x, s):
    a = jnp.exp(x) * 2
    t = jnp.tanh(s) + 1
    b = a - t[:, None]
    return b * 3, t * 2

  assert_matches_cpu(f, x, s, rtol=2e-6)


# AdamW with global-norm clipping, traced stage by stage (every leaf's clipped gradient,
# then every m, then every v, then every parameter: jax.tree.map order).
adamw_stages, _ = heldout_third.adamw_clipped()


def test_a_stage_by_stage_pytree_update_is_one_fusion_per_leaf():
  rng = np.random.default_rng(12)
  sizes = [300, 1000, 257, 4096, 999]
  leaves = [rng.standard_normal(n).astype(np.float32) for n in sizes]
  args = (leaves, leaves, [x * 0.5 for x in leaves], [np.abs(x) for x in leaves])
  plan = fused_plan(adamw_stages, *args)
  members = [  # independent small fusions may run together as one horizontal_fusion
    (body, i)
    for body in [plan] + [h.attrs["body"] for h in plan.instrs if h.op == "horizontal_fusion"]
    for i in body.instrs
  ]
  updates = [
    body.slots[i.outs[0]][1][0]
    for body, i in members
    if i.op in ("fusion", "jit_fusion") and len(i.outs) == 3  # new, m and v of one leaf
  ]
  assert sorted(updates) == sorted(sizes), ops(plan)
  got = run_on(jax.devices("workshop")[0], adamw_stages, *args)
  want = run_on(jax.devices("cpu")[0], adamw_stages, *args)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
  # Against float64: the same update in numpy.
  g64 = [x.astype(np.float64) for x in args[1]]
  norm = np.sqrt(sum(np.sum(x * x) for x in g64))
  c = min(1.0, 1.0 / (norm + 1e-6))
  for k, (p, m, v) in enumerate(zip(args[0], args[2], args[3])):
    gk = g64[k] * c
    m64 = 0.9 * m.astype(np.float64) + 0.1 * gk
    v64 = 0.999 * v.astype(np.float64) + 0.001 * gk * gk
    p64 = p - 1e-3 * (m64 / (np.sqrt(v64) + 1e-8) + 0.01 * p)
    np.testing.assert_allclose(got[0][k], p64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1][k], m64, rtol=1e-5, atol=1e-7)


def test_many_readers_of_one_value_do_not_all_move_up():
  # K metrics of one activation, each reduced: moved up behind the activation, all K
  # temporaries would be results of one fusion, alive at once (K x 256 KiB here).
  n, k = 65536, 20
  x = np.linspace(-1, 1, n).astype(np.float32)

  def f(x):
    v = jnp.sin(x) * 2.0
    return jnp.stack([jnp.sum(v * (1.0 + i) + float(i)) for i in range(k)])

  compiled = jax.jit(f).lower(jax.device_put(x, jax.devices("workshop")[0])).compile()
  assert compiled.memory_analysis().temp_size_in_bytes <= 4 * 4 * n
  got = np.asarray(compiled(jax.device_put(x, jax.devices("workshop")[0])))
  v = np.sin(x.astype(np.float64)) * 2
  np.testing.assert_allclose(got, [np.sum(v * (1 + i) + i) for i in range(k)], rtol=1e-5, atol=5e-2)


def interleave(a, b, axis):  # JAX's associative_scan interleave, as user code
  a_pad, b_pad = [(0, 0, 0)] * a.ndim, [(0, 0, 0)] * b.ndim
  a_pad[axis], b_pad[axis] = (0, 1, 1), (1, 0, 1)
  op = jax.lax.bitwise_or if a.dtype == np.bool_ else jax.lax.add
  zero = jnp.zeros((), a.dtype)
  return op(jax.lax.pad(a, zero, a_pad), jax.lax.pad(b, zero, b_pad))


@pytest.mark.parametrize(
  "dtype,axis",
  [(np.float32, 0), (np.float32, 1), (np.float64, 2), (np.int32, 1), (np.bool_, 0), (np.uint8, 2)],
)
def test_an_interleave_is_a_fused_concatenate_with_the_adds_bits(dtype, axis):
  rng = np.random.default_rng(13)
  shape = [6, 5, 4]
  if dtype == np.bool_:
    a, b = rng.random(shape) > 0.5, rng.random(shape) > 0.5
  else:
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    b = (rng.standard_normal(shape) * 100).astype(dtype)
    if np.issubdtype(dtype, np.floating):
      a.reshape(-1)[::7] = -0.0  # -0.0 + 0.0 is +0.0, as the pads and add give
      b.reshape(-1)[::5] = np.nan
      b.reshape(-1)[1::5] = -np.inf

  def f(a, b):
    return interleave(a * 1, b * 1, axis) * 1  # elementwise neighbours to fuse with

  with jax.enable_x64(dtype == np.float64):
    plan = fused_plan(f, a, b)
    assert "pad" not in ops(plan), ops(plan)
    got = run_on(jax.devices("workshop")[0], f, a, b)
    want = run_on(jax.devices("cpu")[0], f, a, b)
  assert got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("n", [2048, 1000, 7])
def test_associative_scan_linear_recurrence(n):
  # h_t = a_t h_{t-1} + x_t by associative_scan, against the CPU backend and float64.
  rng = np.random.default_rng(14)
  a = rng.uniform(0.8, 1.0, (n, 64)).astype(np.float32)
  x = rng.standard_normal((n, 64)).astype(np.float32)

  def f(a, x):
    combine = lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1])  # noqa: E731
    return jax.lax.associative_scan(combine, (a, x))[1]

  got = run_on(jax.devices("workshop")[0], f, a, x)
  np.testing.assert_allclose(got, run_on(jax.devices("cpu")[0], f, a, x), rtol=1e-5, atol=1e-5)
  h, want = np.zeros(64), np.empty((n, 64))
  for t in range(n):
    h = a[t].astype(np.float64) * h + x[t]
    want[t] = h
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- Row fusions: reductions over trailing dims fused with their producers and consumers
# (fusion.py _joins, fusion.cc per-row views).


def row_fusions(plan):
  return [i for i in plan.instrs if i.op in ("fusion", "jit_fusion") and i.attrs["row"] > 1]


def test_softmax_is_one_row_fusion():
  plan = fused_plan(lambda x: jax.nn.softmax(x, -1), np.ones((8, 128), np.float32))
  [fusion] = row_fusions(plan)
  assert fusion.attrs["row"] == 128 and fusion.outs == plan.results
  body = ops(fusion.attrs["body"])
  assert body.count("reduce") == 2 and "exponential" in body and body[-1] == "divide"
  assert ops(plan).count("fusion") == 1 and "reduce" not in ops(plan)


def test_a_shared_scalar_broadcast_is_not_a_fusion_output():
  # CSE leaves one broadcast of 2.0 to [1000] for both chains; each fusion gets its own
  # copy, so the first does not write it out for the second to read.
  # y is shorter than x: the sum of a is not broadcast back over a's own row, so it
  # stays a reduce kernel between two fusions (_one_row_reductions).
  x, y = np.linspace(-1, 1, 1000, dtype=np.float32), np.linspace(2, 3, 500, dtype=np.float32)

  def f(x, y):
    a = x * 2.0 + 1.0
    return a, (y + jnp.sum(a)) * 2.0

  plan = fused_plan(f, x, y)
  fusions = [i for i in plan.instrs if i.op in ("fusion", "jit_fusion")]
  assert len(fusions) == 2 and all(len(i.outs) == 1 for i in fusions)
  assert "broadcast_in_dim" not in ops(plan)
  assert_matches_cpu(f, x, y)


def test_a_scalar_broadcast_read_across_a_kernel_moves_to_its_reader():
  # jax.random.normal: erf_inv's coefficients are broadcast before the hash's
  # bitcast_convert ends the run; each goes with its one reader, after the bitcast,
  # instead of being written out by the first fusion (22 results of 2^20 floats).
  key = np.asarray(jax.random.key_data(jax.random.key(4)))

  def f(k):
    return jax.random.normal(jax.random.wrap_key_data(k), (4096,))

  plan = fused_plan(f, key)
  fusions = [i for i in plan.instrs if i.op in ("fusion", "jit_fusion")]
  assert fusions and all(len(i.outs) <= 2 for i in fusions), [len(i.outs) for i in fusions]
  assert "broadcast_in_dim" not in ops(plan)
  got = run_on(jax.devices("workshop")[0], f, key)
  want = run_on(jax.devices("cpu")[0], f, key)
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_sibling_reduction_joins_its_producer_across_another_reader():
  # k is read by a dot and by k.sum(-1) after it (an RBF kernel's predictions and row
  # sums): the sum joins the fusion that makes k (multi-output), so k is read once.
  rng = np.random.default_rng(3)
  x, z = rng.standard_normal((64, 8), np.float32), rng.standard_normal((32, 8), np.float32)
  a = rng.standard_normal(64).astype(np.float32)

  def f(x, z, a):
    d2 = (z**2).sum(-1)[:, None] + (x**2).sum(-1)[None] - 2 * z @ x.T
    k = jnp.exp(-0.5 * jnp.maximum(d2, 0))
    return k @ a, k.sum(-1)

  plan = fused_plan(f, x, z, a)
  assert "reduce" not in ops(plan)
  [fused] = [i for i in row_fusions(plan) if i.attrs["row"] == 64]
  assert ops(fused.attrs["body"])[-1] == "reduce" and len(fused.outs) == 2
  assert_matches_cpu(f, x, z, a)
  x64, z64 = x.astype(np.float64), z.astype(np.float64)
  d2 = (z64**2).sum(-1)[:, None] + (x64**2).sum(-1)[None] - 2 * z64 @ x64.T
  k = np.exp(-0.5 * np.maximum(d2, 0))
  got = run_on(jax.devices("workshop")[0], f, x, z, a)
  np.testing.assert_allclose(got[1], k.sum(-1), rtol=1e-5)
  np.testing.assert_allclose(got[0], k @ a, rtol=1e-4, atol=1e-5)


def test_layer_norm_over_two_trailing_dims_is_one_row_fusion():
  x, g = np.ones((4, 6, 32), np.float32), np.ones((6, 32), np.float32)

  def f(x, g):
    mean = jnp.mean(x, axis=(1, 2), keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=(1, 2), keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g

  plan = fused_plan(f, x, g)
  [fusion] = row_fusions(plan)
  assert fusion.attrs["row"] == 6 * 32 and ops(fusion.attrs["body"]).count("reduce") == 2
  assert "reduce" not in ops(plan)


@pytest.mark.parametrize("shape", [(1, 512), (512,), (1, 1, 700), (1, 1, 7)])
def test_statistics_of_a_single_row_fuse_with_their_row(shape):
  # Batch-1 layer norm and the softmax of a vector: the mean and variance (or max and sum)
  # are broadcast back over the one row they reduce, so each is one row fusion of one row,
  # never a reduce kernel between fusions of scalars.
  rng = np.random.default_rng(len(shape))
  x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
  g, b = (rng.standard_normal(shape[-1]).astype(np.float32) for _ in range(2))
  vector_norm = lambda x, g, b: _layer_norm(x.reshape(-1), g, b)  # noqa: E731
  for f, args in [
    (_layer_norm, (x, g, b)),
    (vector_norm, (x, g, b)),
    (lambda x: jax.nn.softmax(x, -1), (x,)),
    (jax.nn.log_softmax, (x,)),
  ]:
    plan = fused_plan(f, *args)
    fusions = row_fusions(plan)
    assert len(fusions) == 1 and fusions[0].outs == plan.results, ops(plan)
    assert "reduce" not in ops(plan)
    got = assert_matches_cpu(f, *args, rtol=2e-5, atol=2e-6)
    with jax.enable_x64(True):
      want = run_on(jax.devices("cpu")[0], f, *(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


def test_scalar_work_beside_a_single_row_fusion_matches_cpu():
  # Scalar instructions between the softmax's ops join its fusion of one row (a scalar has
  # the one element a per-row value has there), but a reshape of a scalar operand is not a
  # per-row value: it stays out (a particle filter's threefry key, squeezed from [1]).
  def f(x, s):
    p = jax.nn.softmax(x)
    u = s.reshape(()) ^ jnp.uint32(0x9E3779B9)
    return p, (u >> 3) | (u << 29)

  x, s = np.linspace(-2, 2, 4096, dtype=np.float32), np.array([12345], np.uint32)
  assert len(row_fusions(fused_plan(f, x, s))) == 1
  p, u = assert_matches_cpu(f, x, s, rtol=2e-6, atol=1e-9)
  assert int(u) == ((12345 ^ 0x9E3779B9) >> 3 | (12345 ^ 0x9E3779B9) << 29) & 0xFFFFFFFF
  np.testing.assert_allclose(p, np.exp(x - x.max()) / np.exp(x - x.max()).sum(), rtol=2e-6)


def test_reductions_that_are_not_rows_stay_kernels():
  x = np.ones((16, 32), np.float32)
  # Over a leading axis; over everything (one row); rows longer than a fusion holds.
  for f, arg in [
    (lambda x: jnp.sum(jnp.exp(x), axis=0), x),
    (lambda x: jnp.sum(jnp.exp(x)), x),
    (lambda x: jnp.sum(jnp.exp(x), axis=1), np.ones((2, 40000), np.float32)),
  ]:
    plan = fused_plan(f, arg)
    assert not row_fusions(plan) and "reduce" in ops(plan)


# Rows of 333 and 1000 elements: several rows per block, a partial last block; 5000 and
# 16384: one row per block; 65 rows of 1000 take more than one thread-pool batch.
ROW_SHAPES = [(3, 5), (7, 333), (65, 1000), (2, 1024), (5, 5000), (3, 16384), (4, 6, 40)]


@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_fused_softmax_and_log_softmax_match_cpu(shape):
  x = np.random.default_rng(shape[-1]).standard_normal(shape).astype(np.float32) * 4
  plan = fused_plan(lambda x: jax.nn.softmax(x, -1), x)
  assert len(row_fusions(plan)) == 1
  assert_matches_cpu(lambda x: jax.nn.softmax(x, -1), x, rtol=2e-5, atol=1e-7)
  assert_matches_cpu(jax.nn.log_softmax, x, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_fused_layer_norm_matches_cpu(shape):
  rng = np.random.default_rng(sum(shape))
  x = (rng.standard_normal(shape) + 3).astype(np.float32)
  g, b = (rng.standard_normal(shape[-1]).astype(np.float32) for _ in range(2))
  assert_matches_cpu(_layer_norm, x, g, b, rtol=5e-5, atol=5e-5)


# Results of 8 MiB and more leave the fusion through non-temporal stores (fusion.cc
# StreamStore): lengths and row widths that leave blocks unaligned to 16 bytes.
def test_large_streamed_results_match_cpu():
  x = np.random.default_rng(0).standard_normal(2**21 + 3).astype(np.float32)
  assert_matches_cpu(lambda x: (x * 2 + 1, jnp.tanh(x) - x), x, rtol=2e-6, atol=2e-6)


def test_large_streamed_row_fusion_matches_cpu():
  rng = np.random.default_rng(1)
  x = (rng.standard_normal((2100, 1001)) + 3).astype(np.float32)
  g, b = (rng.standard_normal(1001).astype(np.float32) for _ in range(2))
  assert_matches_cpu(_layer_norm, x, g, b, rtol=5e-5, atol=5e-5)


def test_per_row_results_are_fusion_outputs():
  # The row max and the log-sum-exp are read after the fusion, next to the full result.
  x = np.random.default_rng(2).standard_normal((37, 129)).astype(np.float32)

  def f(x):
    m = jnp.max(x, axis=-1)
    lse = jnp.log(jnp.sum(jnp.exp(x - m[:, None]), axis=-1)) + m
    return x - lse[:, None], m, lse

  plan = fused_plan(f, x)
  [fusion] = row_fusions(plan)
  assert len(fusion.outs) == 3
  assert_matches_cpu(f, x, rtol=2e-6, atol=2e-6)


def test_row_fusion_whose_only_result_is_per_row():
  x = np.random.default_rng(4).standard_normal((300, 77)).astype(np.float32)
  plan = fused_plan(lambda x: jnp.sqrt(jnp.sum(x * x, axis=-1)), x)
  [fusion] = row_fusions(plan)
  assert fusion.outs == plan.results
  assert_matches_cpu(lambda x: jnp.sqrt(jnp.sum(x * x, axis=-1)), x, rtol=2e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_, jnp.bfloat16, np.float16])
def test_row_fusion_dtypes_match_cpu(dtype):
  # Every combiner the fused fold takes: add, multiply, maximum, minimum on numbers,
  # and/or on pred; f16/bf16 reduce in f32 between converts.
  rng = np.random.default_rng(6)
  x = _values(rng, (50, 97), np.float32 if dtype in (jnp.bfloat16, np.float16) else dtype)
  x = x.astype(dtype)

  def f(x):
    if x.dtype == jnp.bool_:
      return jnp.logical_xor(x, jnp.all(x, -1, keepdims=True) | ~jnp.any(x, -1, keepdims=True))
    y = x * 2 - 1
    return (
      y - jnp.max(y, -1, keepdims=True) + jnp.min(y, -1, keepdims=True),
      jnp.sum(y, -1),
      jnp.prod(jnp.sign(y), -1),
    )

  with jax.enable_x64(True):
    plan = fused_plan(f, x)
    assert len(row_fusions(plan)) == 1
    assert_matches_cpu(
      f,
      x,
      rtol=1e-2 if dtype in (jnp.bfloat16, np.float16) else 1e-12,
      atol=1e-2 if dtype in (jnp.bfloat16, np.float16) else 1e-12,
    )


def test_logsumexp_of_vocabulary_rows_is_one_row_fusion():
  # Rows of 32000 (a language model's logits): the max, the exponentials and their sum in
  # one fusion that never writes exp(x - max); rows of inf, -inf and NaN go through
  # jax.nn.logsumexp's is_finite guard (generated code's is_finite when forced).
  x = np.random.default_rng(9).standard_normal((6, 32000)).astype(np.float32) * 8
  x[1, 5], x[2, :], x[3, 9] = np.nan, -np.inf, np.inf
  plan = fused_plan(lambda x: jax.nn.logsumexp(x, -1), x)
  [fusion] = row_fusions(plan)
  assert fusion.attrs["row"] == 32000 and "reduce" not in ops(plan)
  assert_matches_cpu(lambda x: jax.nn.logsumexp(x, -1), x, rtol=1e-6, atol=1e-6)
  got = np.asarray(jax.jit(lambda x: jax.nn.logsumexp(x, -1))(x))
  x64 = x[[0, 4, 5]].astype(np.float64)
  want = np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1)) + x64.max(-1)
  np.testing.assert_allclose(got[[0, 4, 5]], want, rtol=2e-7)


def test_row_fusion_propagates_nan_and_inf_per_row():
  x = np.random.default_rng(8).standard_normal((6, 50)).astype(np.float32)
  x[1, 3] = np.nan
  x[2, :] = -np.inf
  x[4, 7] = np.inf
  assert_matches_cpu(lambda x: jax.nn.softmax(x, -1), x, rtol=2e-6, atol=1e-7)


# ---- full reductions fused with their producers (fusion.py _full_reductions_in_rows):
# the chain on rows of its operands reshaped, each row folded, then the rows' results.


def _full_reduction_fusions(plan):
  """The row fusions with a result that is the rows' partial results of a full reduction:
  one element per row, read by a reduce to one element."""
  to_scalar = {
    s for i in plan.instrs if i.op == "reduce" and not plan.slots[i.outs[0]][1] for s in i.ins
  }
  return [
    i
    for i in row_fusions(plan)
    if any(
      o in to_scalar
      and math.prod(plan.slots[o][1]) * i.attrs["row"] == fusion_elements(i.attrs["body"])
      for o in i.outs
    )
  ]


def test_sum_of_squares_never_writes_the_squares():
  g = np.random.default_rng(11).random(1 << 20, np.float32)
  plan = fused_plan(lambda g: jnp.sum(g * g), g)
  [fusion] = row_fusions(plan)
  # Rows of 2048 (fusion.py _FULL_MAX_ROW), one partial sum per row, nothing full size out.
  assert fusion.attrs["row"] == 2048
  assert [plan.slots[o][1] for o in fusion.outs] == [(512,)]
  assert [i.op for i in plan.instrs if i.op in ("multiply", "reduce")] == ["reduce"]
  got = assert_matches_cpu(lambda g: jnp.sum(g * g), g, rtol=1e-6)
  want = math.fsum(float(v) * float(v) for v in g.astype(np.float64))
  assert abs(float(got) - want) <= 2e-7 * want


@pytest.mark.parametrize(
  "name, dtype, n",
  [
    ("mse", np.float32, 784 * 512),
    ("mse", np.float64, 300000),
    ("max_abs", np.float32, 16384),
    ("min", np.float64, 3 * 2048 * 7),
    ("int_sum", np.int32, 300 * 700),
    ("bit_and", np.uint32, 4096 * 6),
    ("bit_or", np.int32, 4096 * 6),
    ("any", np.bool_, 1 << 20),
    ("all", np.bool_, 1 << 20),
    ("prod", np.float32, 20000),
    ("bf16_sumsq", jnp.bfloat16, 256 * 1024),
    ("nansum", np.float32, 65536),  # x read twice inside the chain (x != x, select)
    ("int8_max", np.int8, 49152),  # 1-byte values: unfused below 1M elements
    ("mse", np.float32, 65537),  # prime: no row length divides it, stays unfused
  ],
)
def test_full_reductions_of_chains_match_cpu_and_float64(name, dtype, n):
  rng = np.random.default_rng(n)
  a = rng.standard_normal(n).astype(np.float32)
  if name == "nansum":
    a[::1000] = np.nan
  if name in ("any", "all"):  # decided by the last element alone
    a = np.clip(a, -3, 3)
    a[-1] = 4
  b = rng.standard_normal(n).astype(np.float32)
  fns = {
    "mse": lambda a, b: jnp.mean((a - b) ** 2),
    "max_abs": lambda a, b: jnp.max(jnp.abs(a * b)),
    "min": lambda a, b: jnp.min(a * 2 - b),
    "int_sum": lambda a, b: jnp.sum(a * 7919 + b),  # wraps around: exact either way
    "bit_and": lambda a, b: jax.lax.reduce(a | b, ~a.dtype.type(0), jax.lax.bitwise_and, (0,)),
    "bit_or": lambda a, b: jax.lax.reduce(a & b, a.dtype.type(0), jax.lax.bitwise_or, (0,)),
    "any": lambda a, b: jnp.any(a > 3.5),
    "all": lambda a, b: jnp.all(a < 3.5),
    "prod": lambda a, b: jnp.prod(1 + a * 1e-3),
    "bf16_sumsq": lambda a, b: jnp.sum(jnp.square(a.astype(jnp.float32) - b)),
    "nansum": lambda a, b: jnp.nansum(a * b),
    "int8_max": lambda a, b: jnp.max(a * b + a),
  }
  f = fns[name]
  if name == "bit_and":  # every bit set but in the last element
    a, b = np.full(n, 0xFFFFFFFF, np.uint32), np.zeros(n, np.uint32)
    a[-1] = 0x12345678
  elif name == "bit_or":  # no bit set but in the last element
    a, b = np.zeros(n, np.int32), np.full(n, -1, np.int32)
    a[-1] = 0xF0
  elif dtype == np.int32:
    a, b = (
      rng.integers(-(2**30), 2**30, n).astype(np.int32),
      rng.integers(-9, 9, n).astype(np.int32),
    )
  elif dtype == np.int8:  # wraps around
    a, b = rng.integers(-128, 128, n).astype(np.int8), rng.integers(-3, 3, n).astype(np.int8)
  elif dtype == np.bool_:
    pass  # f32 operands, a pred chain
  else:
    a, b = a.astype(dtype), b.astype(np.float32 if dtype == jnp.bfloat16 else dtype)
  with jax.enable_x64(dtype == np.float64):
    plan = fused_plan(f, a, b)
    assert len(_full_reduction_fusions(plan)) == (0 if name in ("int8_max",) or n == 65537 else 1)
    got = assert_matches_cpu(f, a, b, rtol=1e-12 if dtype == np.float64 else 2e-6)
  if np.dtype(dtype).kind not in "iub" and dtype != np.float64:
    # Against float64 too: a product of 20000 roundings drifts further than a sum.
    with jax.enable_x64(True):
      want = run_on(jax.devices("cpu")[0], f, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(float(got), float(want), rtol=2e-5 if name == "prod" else 2e-6)


def test_full_reductions_over_trailing_dim_rows_take_broadcasts_and_siblings():
  # Rows of the operand's own last dim (784 of (256, 784); 1024 of (512, 1024)): the bias
  # broadcast along them joins the row fusion, and so do sibling full reductions (a mean
  # and a mean of squares of x * 2; a min and a max of one value).
  rng = np.random.default_rng(14)
  h, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(256, 64), (64, 784), (784,)])
  y = rng.random((256, 784), np.float32)

  def loss(h, w, b, y):
    return jnp.mean((jax.nn.sigmoid(h @ w + b) - y) ** 2)

  def moments(x):
    return jnp.mean(x * 2), jnp.mean((x * 2) ** 2)

  [fusion] = row_fusions(fused_plan(loss, h, w, b, y))
  assert fusion.attrs["row"] == 784
  x = rng.standard_normal((512, 1024)).astype(np.float32)
  [fusion] = row_fusions(fused_plan(moments, x))
  assert fusion.attrs["row"] == 1024 and len(fusion.outs) == 2
  got = assert_matches_cpu(loss, h, w, b, y, rtol=2e-6)
  with jax.enable_x64(True):
    want = run_on(jax.devices("cpu")[0], loss, *(a.astype(np.float64) for a in (h, w, b, y)))
  np.testing.assert_allclose(float(got), float(want), rtol=2e-6)
  got = assert_matches_cpu(moments, x, rtol=2e-6, atol=1e-7)
  extremes = lambda x: (jnp.min(x * 2), jnp.max(x * 2))  # noqa: E731
  [fusion] = row_fusions(fused_plan(extremes, x))
  assert len(fusion.outs) == 2 and len(_full_reduction_fusions(fused_plan(extremes, x))) == 1
  np.testing.assert_array_equal(jax.jit(extremes)(x), (x.min() * 2, x.max() * 2))
  x64 = x.astype(np.float64) * 2
  np.testing.assert_allclose(
    [float(v) for v in got], [x64.mean(), (x64**2).mean()], rtol=2e-6, atol=1e-7
  )


@pytest.mark.parametrize(
  "name, shape, row",
  [
    ("chain of a 2-D value", (4, 10000), 2000),  # no trailing row in [256, 4096]
    ("rows of two trailing dims", (8, 64, 1024), 1024),  # partials (8, 64)
    ("a (1,) scalar broadcast", (40000,), 2000),
    ("a leaf read twice", (40000,), 2000),
  ],
)
def test_full_reductions_of_each_form_match_cpu_and_float64(name, shape, row):
  rng = np.random.default_rng(16)
  x = (rng.random(shape) + 0.5).astype(np.float32)  # positive: no cancellation in the sums
  s = np.float32([0.5])
  fns = {
    "chain of a 2-D value": lambda x, s: jnp.sum(jnp.tanh(x) * 3),
    "rows of two trailing dims": lambda x, s: jnp.sum(x * x + 1),
    "a (1,) scalar broadcast": lambda x, s: jnp.sum(x * s),
    "a leaf read twice": lambda x, s: jnp.sum(jnp.exp(x) * x),
  }
  f = fns[name]
  [fusion] = _full_reduction_fusions(fused_plan(f, x, s))
  assert fusion.attrs["row"] == row
  got = assert_matches_cpu(f, x, s, rtol=2e-6, atol=2e-6)
  with jax.enable_x64(True):
    want = run_on(jax.devices("cpu")[0], f, x.astype(np.float64), s.astype(np.float64))
  np.testing.assert_allclose(float(got), float(want), rtol=2e-6, atol=2e-6)


def test_full_reduction_with_another_init_or_reader_keeps_its_kernel():
  x = np.random.default_rng(12).standard_normal(65536).astype(np.float32)

  def other_init(x):
    return jax.lax.reduce(x * x, np.float32(5), jax.lax.add, (0,))

  def also_read(x):
    y = x * x
    return jnp.sum(y), y

  for f in (other_init, also_read):
    assert not _full_reduction_fusions(fused_plan(f, x))
    assert_matches_cpu(f, x, rtol=2e-6)


def test_full_reduction_in_a_loop_body_and_of_two_dims():
  x = np.random.default_rng(13).standard_normal((96, 1024)).astype(np.float32)

  def f(x):
    def step(i, carry):
      y, total = carry
      y = y * 0.5 + 1
      return y, total + jnp.sum(jnp.tanh(y) * y)

    return jax.lax.fori_loop(0, 5, step, (x, jnp.float32(0)))

  assert_matches_cpu(f, x, rtol=2e-6)
  [loop] = [i for i in fused_plan(f, x).instrs if i.op in ("while", "jit_loop")]
  assert len(_full_reduction_fusions(loop.attrs["body"])) == 1
  assert len(_full_reduction_fusions(fused_plan(lambda x: jnp.sum(jnp.exp(-x * x)), x))) == 1
  # Rows of its last dim (4093, prime): no divisor of the size in [256, 2048] is needed.
  y = np.random.default_rng(15).standard_normal((5, 4093)).astype(np.float32)
  [fusion] = _full_reduction_fusions(fused_plan(lambda y: jnp.sum(jnp.exp(-y * y)), y))
  assert fusion.attrs["row"] == 4093
  assert_matches_cpu(lambda y: jnp.sum(jnp.exp(-y * y)), y, rtol=2e-6)


# ---- argmin/argmax fused with their producers (fusion.py _arg_reductions_as_row_folds):
# the extremum, then the first column matching it (or the first NaN), in one row fusion.


def _distances(x, c):
  return (x**2).sum(-1)[:, None] - 2 * x @ c.T + (c**2).sum(-1)[None]


def test_kmeans_assignment_is_one_row_fusion():
  # The distance matrix is never written: one fusion computes it and folds each row to
  # its argmin; the argmin kernel is gone.
  rng = np.random.default_rng(4)
  x, c = rng.standard_normal((500, 16), np.float32), rng.standard_normal((64, 16), np.float32)
  f = lambda x, c: jnp.argmin(_distances(x, c), -1)
  plan = fused_plan(f, x, c)
  assert "argmin" not in ops(plan)
  last = plan.instrs[-1]
  assert ops(plan)[-1] == "fusion" and last.attrs["row"] == 64
  assert [plan.slots[s][1] for s in last.outs] == [(500,)]
  assert_matches_cpu(f, x, c)


def _arg_edge_rows(rng, shape, dtype):
  # Small integers (many ties, exact in every dtype), and in float rows: +-0, NaN (first
  # wins), +-inf, a row all NaN, a row all +inf and one all -inf.
  x = rng.integers(-3, 4, shape).astype(dtype)
  if np.dtype(dtype).kind == "f":
    n = shape[-1]
    x = x.reshape(-1, n)  # Rows along the last axis (a view of the result).
    x[1, :] = 0.0
    x[1, n // 2] = -0.0
    x[2, [n - 1, n // 3]] = np.nan
    x[3, n // 2] = np.inf
    x[4, :] = -np.inf
    x[5, [0, n - 1]] = [np.inf, -np.inf]
    x[6, :] = np.nan
    x[7, :] = np.inf
    flat = x[8:].reshape(-1)
    flat[rng.choice(flat.size, flat.size // 50, replace=False)] = np.nan
  return x.reshape(shape)


@pytest.mark.parametrize("name", ["argmin", "argmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.uint32])
@pytest.mark.parametrize("n", [3, 16, 67, 1003])
def test_fused_argmin_argmax_match_numpy_and_cpu(name, dtype, n):
  # The producer (x * 2 - y, exact on these integers in every dtype) fuses with the
  # reduction; numpy's argmin/argmax take the first extremum and the first NaN, as the
  # sequential fold of jnp.argmin's body does.
  rng = np.random.default_rng(n)
  x, y = _arg_edge_rows(rng, (300, n), dtype), rng.integers(0, 2, (300, n)).astype(dtype)
  jfn, nfn = getattr(jnp, name), getattr(np, name)
  f = lambda x, y: jfn(x * 2 - y, axis=-1)
  with jax.enable_x64(dtype == np.float64):
    plan = fused_plan(f, x, y)
    assert name not in ops(plan) and ops(plan).count("fusion") == 1
    got = run_on(jax.devices("workshop")[0], f, x, y)
    with np.errstate(invalid="ignore", over="ignore"):
      want = (
        nfn(x.astype(np.float64) * 2 - y, axis=-1) if dtype != np.uint32 else nfn(x * 2 - y, -1)
      )
    np.testing.assert_array_equal(got, want)
    assert_matches_cpu(f, x, y)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("name", ["argmin", "argmax"])
def test_argmin_argmax_of_a_producer_along_each_axis(name, axis):
  # Only the last axis is a row fusion's; the others keep the argmin kernel. Both agree
  # with numpy and the CPU backend.
  rng = np.random.default_rng(axis)
  x = _arg_edge_rows(rng, (9, 10, 11), np.float32)
  f = lambda x: getattr(jnp, name)(jnp.exp(x) - 1, axis=axis)
  assert (name in ops(fused_plan(f, x))) == (axis != 2)
  with np.errstate(invalid="ignore", over="ignore"):
    want = getattr(np, name)(np.exp(x.astype(np.float64)) - 1, axis=axis)
  np.testing.assert_array_equal(run_on(jax.devices("workshop")[0], f, x), want)
  assert_matches_cpu(f, x)


def test_fused_argmin_of_bf16_and_many_rows_over_the_pool():
  # bf16 values are compared in f32 (legalize.py); 20000 rows of 64 split over threads.
  rng = np.random.default_rng(5)
  x = rng.integers(-8, 8, (20000, 64)).astype(jnp.bfloat16)
  x[rng.integers(0, 20000, 300), rng.integers(0, 64, 300)] = np.nan
  f = lambda x: (jnp.argmin(x * 2 + 1, -1), jnp.argmax(jnp.abs(x), -1))
  got = run_on(jax.devices("workshop")[0], f, x)
  x64 = x.astype(np.float64)
  np.testing.assert_array_equal(got[0], np.argmin(x64 * 2 + 1, -1))
  np.testing.assert_array_equal(got[1], np.argmax(np.abs(x64), -1))
  assert_matches_cpu(f, x)


# ---- Broadcasts taken as scalar operands (fusion.cc ElideBroadcasts): a binary kernel
# reads a broadcast scalar, or a row's value, instead of a written block.

BINARY = {
  "add": jnp.add,
  "subtract": jnp.subtract,
  "multiply": jnp.multiply,
  "divide": jnp.divide,
  "maximum": jnp.maximum,
  "minimum": jnp.minimum,
  "power": jnp.power,
  "atan2": jnp.arctan2,
  "remainder": jax.lax.rem,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_scalar_on_either_side_of_a_fused_binary_op_matches_cpu(name):
  op = BINARY[name]
  x = np.random.default_rng(1).uniform(0.5, 3, 3000).astype(np.float32)
  f = lambda x: op(op(jnp.exp(x), 1.7), 0.3) + op(2.5, jnp.sqrt(x))
  assert_matches_cpu(f, x, rtol=3e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.complex64])
def test_scalar_operands_in_other_dtypes_match_cpu(dtype):
  x = (np.arange(1, 301) % 97).astype(dtype)

  def f(x):
    if np.issubdtype(dtype, np.complexfloating):
      return (x * (1 + 2j) - x / (3 - 1j)) * 2
    return ((x * 3 + 7) // 2 - x % 5) << 1

  assert_matches_cpu(f, x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("row", [10, 64, 333, 2048, 3000])
def test_per_row_values_on_either_side_match_cpu(row):
  # Rows of 64 and more take the per-row scalar path (shorter rows write the fill), for
  # non-commutative ops on both sides, and for an op whose two operands are both fills.
  rng = np.random.default_rng(row)
  x = rng.standard_normal((9, row)).astype(np.float32)

  def f(x):
    m = jnp.max(x, -1, keepdims=True)
    s = jnp.sum(x, -1, keepdims=True)
    return (x - m) / s, m - x, jnp.broadcast_to(m * s, x.shape) + 0 * x, x / m

  assert_matches_cpu(f, x, rtol=2e-6, atol=1e-6)


def test_broadcast_also_read_by_another_kernel_is_written():
  x = np.random.default_rng(3).standard_normal((20, 100)).astype(np.float32)

  def f(x):
    m = jnp.broadcast_to(jnp.mean(x, -1, keepdims=True), x.shape)
    return jnp.where(x > m, x * m, jnp.tanh(m)), x - m

  assert_matches_cpu(f, x, rtol=2e-6, atol=1e-6)


def test_malformed_fusion_fails_the_compile(monkeypatch):
  # fusion.cc checks a body when the plan is prepared (KernelDef::prepare): a row length
  # that does not divide the fusion is a compile error naming it, not a crash at run time.
  from jax_plugins.workshop.compiler import compile as compile_module

  real = compile_module.fusion.fuse_plan

  def bad_rows(plan):
    plan = real(plan)
    for instr in plan.instrs:
      if instr.op == "fusion":
        instr.attrs["row"] = 7
    return plan

  monkeypatch.setattr(compile_module.fusion, "fuse_plan", bad_rows)
  with pytest.raises(Exception, match="rows of 7 do not divide its 10 elements"):
    jax.jit(lambda x: jnp.tanh(x * 2 + 1)).lower(np.ones(10, np.float32)).compile()


def test_a_run_nothing_reads_makes_no_fusion():
  """Dead values (their only user dropped by the compiler, as inspect_array_sharding is, or
  a hand-written program) make no fusion: one without results is invalid
  (kernels/fusion.cc refused the program with "empty fusion")."""
  from jax_plugins.workshop.compiler.compile import compile_program

  text = """
    func.func public @main(%arg0: tensor<8xf32>, %arg1: tensor<16xf32>) -> tensor<8xf32> {
      %0 = stablehlo.add %arg1, %arg1 : tensor<16xf32>
      %1 = stablehlo.multiply %0, %0 : tensor<16xf32>
      %2 = stablehlo.negate %arg0 : tensor<8xf32>
      return %2 : tensor<8xf32>
    }"""
  plan = compile_program(text.encode(), "mlir", b"", 1, fuse=True).plan
  assert all(i.outs for i in plan.instrs)
  assert ops(plan) == ["negate"]


# Slices of larger operands join fusions (kernels/fusion.cc reads each block of a slice
# from its operand in place; the generated tier reads each row's run of the operand, if
# the slice is contiguous along its last dim, and otherwise codegen.compile_fusions writes
# the slices out before the fusion it compiles).


def _linear_recurrence(a, b):
  op = lambda x, y: (x[0] * y[0], y[0] * x[1] + y[1])
  return jax.lax.associative_scan(op, (a, b), axis=0)[1]


def test_strided_slices_join_their_consumers():
  a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
  plan = fused_plan(lambda a, b: a[::2] * b[1::2] + a[1::2], a, a)
  assert ops(plan) == ["fusion"]
  assert ops(plan.instrs[0].attrs["body"]).count("slice") == 3


def test_slices_strided_along_rows_are_written_out_for_generated_code():
  a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
  f = lambda a: a[:, ::2] * a[:, 1::2] + 1
  plan = fused_plan(f, a)
  if plan.instrs[-1].op == "jit_fusion":
    assert ops(plan) == ["constant", "slice", "slice", "fusion"]
  else:
    assert ops(plan) == ["constant", "fusion"]
  assert_matches_cpu(f, a)


@pytest.mark.parametrize("shape", [(2048, 256), (1000, 3), (4097,)])
def test_associative_scan_matches_cpu_and_float64(shape):
  rng = np.random.default_rng(1)
  a = np.exp(-np.abs(rng.standard_normal(shape))).astype(np.float32)
  b = rng.standard_normal(shape).astype(np.float32)
  assert_matches_cpu(_linear_recurrence, a, b, rtol=2e-5, atol=2e-5)
  got = np.asarray(jax.jit(_linear_recurrence)(jax.device_put(a, jax.devices("workshop")[0]), b))
  h, want = np.zeros(shape[1:]), np.empty(shape)
  for t in range(shape[0]):
    h = a[t].astype(np.float64) * h + b[t]
    want[t] = h
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64, np.complex64, np.bool_])
def test_slices_in_every_position_match_cpu(dtype):
  # Starts, strides and limits on every dim, a slice that is itself a fusion result, one
  # operand sliced twice, rows longer and shorter than a block, on several threads.
  rng = np.random.default_rng(2)
  x = _values(rng, (9, 300, 70), dtype)
  y = _values(rng, (4, 100, 35), dtype)

  def f(x, y):
    s1 = x[1::2, ::3, 1::2]
    s2 = x[:8:2, 2::3, :35]
    return _combine(s1, y), s1, _combine(s2, s1)

  assert_matches_cpu(f, x, y)


def test_gru_gates_of_one_matmul_match_cpu():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((256, 64)).astype(np.float32)
  w = (rng.standard_normal((64, 3 * 128)) / 8).astype(np.float32)
  h = rng.standard_normal((256, 128)).astype(np.float32)

  def gru(x, w, h):
    z, r, n = jnp.split(x @ w, 3, -1)
    z, r = jax.nn.sigmoid(z), jax.nn.sigmoid(r)
    return (1 - z) * jnp.tanh(n * r) + z * h

  assert_matches_cpu(gru, x, w, h, rtol=2e-6, atol=2e-6)


def test_row_fusion_over_a_slice_matches_cpu():
  # softmax of the second half of each row: the slice joins the row fusion.
  x = np.random.default_rng(4).standard_normal((300, 2 * 1000)).astype(np.float32)
  assert_matches_cpu(lambda x: jax.nn.softmax(x[:, 1000:] * 2, -1), x, rtol=2e-6, atol=1e-7)


def test_slice_outside_its_operand_fails_the_compile(monkeypatch):
  # A crafted body that reads past its operand is refused when the plan is prepared
  # (fusion.cc checks the slice), not read out of bounds at run time.
  from jax_plugins.workshop.compiler import compile as compile_module

  real = compile_module.fusion.fuse_plan

  def bad_start(plan, *args):
    plan = real(plan, *args)
    for instr in plan.instrs:
      if instr.op == "fusion":
        for i in instr.attrs["body"].instrs:
          if i.op == "slice":
            i.attrs["start"] = [5]
    return plan

  monkeypatch.setattr(compile_module.fusion, "fuse_plan", bad_start)
  with pytest.raises(Exception, match="slice"):
    jax.jit(lambda x: x[::2] * x[1::2] + 1).lower(np.ones(10, np.float32)).compile()


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64, np.complex64, np.bool_])
def test_concatenates_in_a_fusion_match_cpu(dtype):
  # Along the first, a middle and the last dim; three operands, one of them empty; a
  # concatenate that is itself a fusion result; rows longer than a block.
  rng = np.random.default_rng(5)
  a, b = _values(rng, (6, 40, 300), dtype), _values(rng, (6, 40, 700), dtype)
  c, d = _values(rng, (6, 40, 1000), dtype), _values(rng, (6, 40, 0), dtype)
  e = _values(rng, (2, 40, 1000), dtype)

  def f(a, b, c, d, e):
    last = jnp.concatenate([a, d, b], -1)
    first = jnp.concatenate([c, e])
    mid = jnp.concatenate([c[:, :10], c[:, 10:]], 1)
    return _combine(last, c), last, _combine(first[2:], mid)

  assert_matches_cpu(f, a, b, c, d, e)


def test_concatenate_joins_its_consumers():
  x = np.ones((64, 32), np.float32)
  plan = fused_plan(lambda x, h: jnp.tanh(jnp.concatenate([x, h], -1) * 2), x, x)
  if plan.instrs[-1].op == "fusion":
    assert "concatenate" in ops(plan.instrs[-1].attrs["body"])
  else:  # generated: the concatenate is written out before it
    assert "concatenate" in ops(plan)


def test_concatenate_of_a_value_the_run_computes_is_not_fused_into_it():
  # [a, sum(y, -1)] * 2: the sum is a per-row value of the row fusion over y, which a
  # concatenate cannot read whole; the concatenate starts its own run.
  rng = np.random.default_rng(6)
  a, y = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 33))
  y = y.astype(np.float32)
  assert_matches_cpu(
    lambda a, y: jnp.concatenate([a, jnp.sum(y, -1, keepdims=True)], -1) * 2, a, y, rtol=2e-6
  )
  assert_matches_cpu(
    lambda a, y: (
      jnp.exp(jnp.concatenate([a, jnp.max(y, -1, keepdims=True)], -1)) / jnp.sum(jnp.exp(y))
    ),
    a,
    y,
    rtol=2e-6,
  )


def test_slices_of_a_prime_length_vector_match_cpu():
  # No row length divides 1000003: the generated tier writes the slices out and compiles
  # the rest flat, over every thread.
  v = np.random.default_rng(7).standard_normal(1000004).astype(np.float32)
  assert_matches_cpu(lambda v: jnp.sin(v[1:]) * 2 + jnp.cos(v[:-1]), v, rtol=2e-6, atol=1e-6)


def test_iotas_of_a_mask_fuse_as_broadcasts_of_one_dimension():
  # jnp.tril/triu compare two rank-2 iotas: each becomes the 1-D iota of its dim broadcast
  # inside the fusion (fusion._iotas_as_broadcasts), so no full-size iota is written. A
  # float iota along a middle dim, an iota that is a result and one a dot reads (not
  # elementwise: it gets the full broadcast) keep their values.
  x = np.random.default_rng(3).standard_normal((300, 200)).astype(np.float32)
  mask = lambda a: jnp.tril(a) + 2 * jnp.triu(a, 1)  # noqa: E731
  plan = fused_plan(mask, x)
  assert not [i for i in plan.instrs if i.op == "iota" and len(plan.slots[i.outs[0]][1]) > 1]
  assert [op for op in ops(plan) if op not in ("constant", "iota", "broadcast_in_dim")] == [
    "fusion"
  ]
  np.testing.assert_array_equal(
    run_on(jax.devices("workshop")[0], mask, x), np.tril(x) + 2 * np.triu(x, 1)
  )

  def mixed(a3, m):
    middle = jax.lax.broadcasted_iota(jnp.float32, a3.shape, 1)
    rows = jax.lax.broadcasted_iota(jnp.int32, (64, 48), 0)
    return a3 * middle + 1.0, rows, m @ jax.lax.broadcasted_iota(jnp.float32, (48, 5), 0)

  a3 = np.random.default_rng(4).standard_normal((4, 50, 60)).astype(np.float32)
  m = np.random.default_rng(5).standard_normal((64, 48)).astype(np.float32)
  got = run_on(jax.devices("workshop")[0], mixed, a3, m)
  np.testing.assert_array_equal(got[0], a3 * np.arange(50, dtype=np.float32)[None, :, None] + 1)
  np.testing.assert_array_equal(
    got[1], np.broadcast_to(np.arange(64, dtype=np.int32)[:, None], (64, 48))
  )
  np.testing.assert_allclose(
    got[2], m.astype(np.float64) @ np.broadcast_to(np.arange(48.0)[:, None], (48, 5)), rtol=1e-5
  )
