"""Control flow (while, case/if), region-carrying reduce and sort, vs JAX's CPU backend.

Tolerances: everything here is exact (integers, selections, permutations, sums of small
integers in float) except where a test says otherwise.
"""

import contextlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax._src.lax import lax as lax_internal
from jax._src.lib import xla_client
from jax.sharding import NamedSharding, PartitionSpec as P

from jax_plugins.workshop.compiler import compile_program, lowering
from reference import assert_matches_cpu, cpu_device, run_on
from test_compiler import compile_fn

# Every test twice: loops and fusions interpreted, and compiled whatever their size.
pytestmark = pytest.mark.codegen_settings("0", "force")  # conftest.py

rng = np.random.default_rng(0)


def has_rule(op: str) -> bool:
  return f"stablehlo.{op}" in lowering._RULES  # pylint: disable=protected-access


needs_dynamic_slice = pytest.mark.skipif(
    not (has_rule("dynamic_slice") and has_rule("dynamic_update_slice")),
    reason="scan over xs needs dynamic_slice/dynamic_update_slice (another op family)")


def run_mlir(text: str, device, *args):
  """Compiles StableHLO text directly on `device`'s client (ops JAX never emits as such)."""
  exe = device.client.compile_and_load(text, xla_client.DeviceList((device,)),
                                       xla_client.CompileOptions())
  results = exe.execute_sharded([jax.device_put(a, device) for a in args])
  return [np.asarray(r[0]) for r in results.disassemble_into_single_device_arrays()]


def assert_mlir_matches_cpu(text: str, *args):
  ours = run_mlir(text, jax.devices("workshop")[0], *args)
  ref = run_mlir(text, cpu_device(), *args)
  for a, b in zip(ours, ref, strict=True):
    np.testing.assert_array_equal(a, b)


# ---- while ----


def test_while_loop_with_captured_outer_value():
  def f(x):
    y = x * 2  # Used inside the body without being a loop-carried value.
    return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] + y), (0, x))

  assert_matches_cpu(f, rng.standard_normal((3, 4)).astype(np.float32), rtol=1e-6)


def test_while_loop_data_dependent_trip_count():
  # Collatz steps: the trip count depends on the data.
  def steps(n):
    def body(c):
      n, k = c
      return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1
    return lax.while_loop(lambda c: c[0] != 1, body, (n, 0))[1]

  for n in (1, 6, 27):
    assert_matches_cpu(steps, np.int32(n))


def test_while_loop_zero_iterations_returns_inputs():
  f = lambda x: lax.while_loop(lambda x: x.sum() > 100, lambda x: x + 1, x)
  assert_matches_cpu(f, np.arange(4, dtype=np.float32))


def test_fori_loop_static_and_dynamic_bounds():
  f_static = lambda x: lax.fori_loop(0, 5, lambda i, c: c * 2 + i, x)
  f_dynamic = lambda n, x: lax.fori_loop(0, n, lambda i, c: c * 2 + i, x)
  x = np.arange(6, dtype=np.int32)
  assert_matches_cpu(f_static, x)
  assert_matches_cpu(f_dynamic, np.int32(7), x)
  assert_matches_cpu(f_dynamic, np.int32(0), x)


def test_nested_loops_and_nested_jit():
  @jax.jit
  def inner(c, i):
    return c + jnp.sin(c) * i

  def f(x):
    def outer_body(i, c):
      return lax.fori_loop(0, i, lambda j, d: inner(d, j.astype(jnp.float32)), c)
    return lax.fori_loop(0, 4, outer_body, x)

  # sin differs by an ulp or so between libm and XLA; 6 dependent steps amplify it.
  assert_matches_cpu(f, rng.standard_normal(5).astype(np.float32), rtol=1e-5, atol=1e-6)


def test_scan_carry_only():
  f = lambda x: lax.scan(lambda c, _: (c * 3 + 1, None), x, length=6)[0]
  assert_matches_cpu(f, np.arange(5, dtype=np.int32))


@needs_dynamic_slice
def test_scan_cumulative_sum():
  f = lambda xs: lax.scan(lambda c, x: (c + x, c + x), jnp.zeros(xs.shape[1:], xs.dtype), xs)
  assert_matches_cpu(f, rng.integers(-9, 9, (7, 3)).astype(np.float32))


# ---- if / case ----


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_with_captured_operands(sign):
  def f(x):
    y = x + 1
    return lax.cond(x.sum() > 0, lambda: x * y, lambda: x - y)

  assert_matches_cpu(f, sign * np.arange(1, 7, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("index", [-3, 0, 1, 2, 9])
def test_switch(index):
  # lax.switch clamps the index; the branches capture x and y.
  f = lambda i, x, y: lax.switch(i, [lambda: x + y, lambda: x * y, lambda: (x - y) * 2])
  assert_matches_cpu(f, np.int32(index), np.arange(4, dtype=np.int32), np.int32(3))


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 7])
def test_case_out_of_range_index_runs_last_branch(index):
  # JAX clamps before emitting case; the raw op must run the last branch itself.
  text = """
    func.func public @main(%i: tensor<i32>, %x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "stablehlo.case"(%i) ({
        %1 = stablehlo.add %x, %x : tensor<3xf32>
        stablehlo.return %1 : tensor<3xf32>
      }, {
        %1 = stablehlo.multiply %x, %x : tensor<3xf32>
        stablehlo.return %1 : tensor<3xf32>
      }, {
        %1 = stablehlo.subtract %x, %x : tensor<3xf32>
        stablehlo.return %x : tensor<3xf32>
      }) : (tensor<i32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }"""
  assert_mlir_matches_cpu(text, np.int32(index), np.arange(3, dtype=np.float32) + 1)


def test_if_op():
  text = """
    func.func public @main(%p: tensor<i1>, %x: tensor<2xi32>) -> (tensor<2xi32>, tensor<i32>) {
      %c = stablehlo.constant dense<7> : tensor<i32>
      %0:2 = "stablehlo.if"(%p) ({
        stablehlo.return %x, %c : tensor<2xi32>, tensor<i32>
      }, {
        %1 = stablehlo.negate %x : tensor<2xi32>
        %2 = stablehlo.negate %c : tensor<i32>
        stablehlo.return %1, %2 : tensor<2xi32>, tensor<i32>
      }) : (tensor<i1>) -> (tensor<2xi32>, tensor<i32>)
      return %0#0, %0#1 : tensor<2xi32>, tensor<i32>
    }"""
  for p in (True, False):
    assert_mlir_matches_cpu(text, np.bool_(p), np.array([3, -4], np.int32))


def test_optimization_barrier_is_identity():
  f = lambda x: lax.optimization_barrier((x, x + 1))
  assert_matches_cpu(f, np.arange(5, dtype=np.float32))


def test_unknown_custom_call_names_target():
  f = lambda x: jax.ffi.ffi_call("my_target", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
  with pytest.raises(Exception, match="custom_call target 'my_target'"):
    jax.jit(f)(jnp.ones(3))


# ---- vmap: batched predicates and indices ----


def test_vmap_of_while_loop_with_batched_predicate():
  def f(n, x):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))[1]

  assert_matches_cpu(jax.vmap(f), np.array([0, 3, 1, 5], np.int32),
                     np.arange(4, dtype=np.float32), rtol=1e-6)


def test_vmap_of_cond_and_switch():
  f = lambda p, x: lax.cond(p, lambda: x + 1, lambda: x * 3)
  g = lambda i, x: lax.switch(i, [lambda: x + 1, lambda: x * 3, lambda: -x])
  x = np.arange(4, dtype=np.int32)
  assert_matches_cpu(jax.vmap(f), np.array([True, False, True, False]), x)
  assert_matches_cpu(jax.vmap(g), np.array([2, 0, 1, 5], np.int32), x)


# ---- collectives inside loops ----


def test_psum_inside_fori_loop_under_shard_map():
  # Every partition runs the loop's collectives in the same order.
  def run(devices):
    mesh = jax.sharding.Mesh(np.array(devices[:4]), ("i",))
    body = lambda _, c: lax.psum(c, "i") * 0.25 + c
    f = jax.shard_map(lambda x: lax.fori_loop(0, 3, body, x), mesh=mesh, in_specs=P("i"),
                      out_specs=P("i"))
    sharding = NamedSharding(mesh, P("i"))
    x = jax.device_put(np.arange(8, dtype=np.float32), sharding)
    return np.asarray(jax.jit(f, out_shardings=sharding)(x))

  np.testing.assert_array_equal(run(jax.devices("workshop")), run(jax.devices("cpu")))


# ---- reduce: argmax/argmin and general bodies ----


def _with_nans_and_ties(shape, dtype=np.float32):
  x = rng.integers(-3, 4, shape).astype(dtype)  # Small range: many ties.
  if np.dtype(dtype).kind == "f":
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, size=flat.size // 6, replace=False)] = np.nan
    x.reshape(-1)[:shape[-1]] = np.nan  # A row (or column) that is all NaN in places.
  return x


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
def test_argmax_argmin_each_axis_with_nans_and_ties(fn, axis):
  assert_matches_cpu(lambda x: fn(x, axis=axis), _with_nans_and_ties((4, 5, 6)))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.int8])
def test_argmax_argmin_integer_and_bool(dtype):
  x = rng.integers(0, 3, (6, 7)).astype(dtype)
  assert_matches_cpu(lambda x: (jnp.argmax(x, 0), jnp.argmin(x, 1), jnp.argmax(x)), x)


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
def test_argmax_argmin_long_rows(fn):
  # Long contiguous rows take the kernel's chunked path; the chunks must combine to the
  # first extremum / first NaN.
  x = rng.integers(-2, 3, (4, 1003)).astype(np.float32)
  x[0, [700, 30, 999]] = np.nan
  x[1, 1002] = np.nan
  x[2, 500] = 7 if fn is jnp.argmax else -7
  assert_matches_cpu(lambda x: fn(x, axis=1), x)


_WHILE_CAPTURING = """
    func.func public @main(%x: tensor<f32>, %y: tensor<f32>) -> tensor<f32> {
      %0 = stablehlo.while(%c = %x) : tensor<f32>
      cond {
        %1 = stablehlo.compare LT, %c, %y, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %1 : tensor<i1>
      } do {
        %1 = stablehlo.multiply %x, %y : tensor<f32>
        %2 = stablehlo.add %c, %1 : tensor<f32>
        stablehlo.return %2 : tensor<f32>
      }
      return %0 : tensor<f32>
    }"""


def test_while_region_captures_become_operands():
  plan = compile_program(_WHILE_CAPTURING.encode(), "mlir", b"", 1).plan
  [loop] = plan.instrs
  x, y = plan.params
  # The carried value, then the captures in first-use order: y (by cond), x (by body).
  assert loop.ins == [x, y, x]
  cond, body = loop.attrs["cond"], loop.attrs["body"]
  assert len(cond.params) == len(body.params) == 3
  assert [i.op for i in body.instrs] == ["multiply", "add"]
  [ours] = run_mlir(_WHILE_CAPTURING, jax.devices("workshop")[0], np.float32(0.5),
                    np.float32(3))
  assert ours == 3.5  # 0.5 -> 2 -> 3.5 in steps of x * y = 1.5, until >= 3.


def test_argmax_uses_dedicated_kernel():
  plan = compile_fn(lambda x: jnp.argmax(x, axis=1), np.ones((3, 4), np.float32)).plan
  assert "argmax" in [i.op for i in plan.instrs]


def test_vmap_of_argmax():
  assert_matches_cpu(jax.vmap(lambda x: jnp.argmin(x, axis=0)), _with_nans_and_ties((3, 4, 5)))


@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), (0, 1, 2)])
def test_variadic_reduce_general_body(dims):
  # (sum, max) in one reduce, plus a count of positives: a body no single kernel has.
  def f(x, y):
    init = (np.float32(0), np.float32(-np.inf), np.int32(0))
    body = lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1]), a[2] + b[2])
    return lax.reduce((x, x, y), init, body, dims)

  x = rng.integers(-9, 9, (5, 6, 7)).astype(np.float32)
  assert_matches_cpu(f, x, (x > 0).astype(np.int32))


def test_reduce_general_body_with_constant_and_empty_dim():
  # xor is no single-combiner kernel; the mask constant is broadcast across lanes.
  f = lambda x: lax.reduce(x, np.uint32(0), lambda a, b: (a ^ b) & np.uint32(0xFFFF00FF), (1,))
  assert_matches_cpu(f, rng.integers(0, 2**32, (4, 9)).astype(np.uint32))
  assert_matches_cpu(f, np.zeros((4, 0), np.uint32))


def test_reduce_general_body_with_captured_scalar():
  # The body uses %s from outside the region: a clamp from below, still associative.
  text = """
    func.func public @main(%x: tensor<4x5xf32>, %s: tensor<f32>) -> tensor<4xf32> {
      %z = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %0 = stablehlo.reduce(%x init: %z) across dimensions = [1]
          : (tensor<4x5xf32>, tensor<f32>) -> tensor<4xf32>
       reducer(%a: tensor<f32>, %b: tensor<f32>) {
        %1 = stablehlo.maximum %a, %b : tensor<f32>
        %2 = stablehlo.maximum %1, %s : tensor<f32>
        stablehlo.return %2 : tensor<f32>
      }
      return %0 : tensor<4xf32>
    }"""
  x = rng.integers(-4, 4, (4, 5)).astype(np.float32)
  # XLA refuses regions that capture values, so numpy is the reference.
  [ours] = run_mlir(text, jax.devices("workshop")[0], x, np.float32(1.5))
  np.testing.assert_array_equal(ours, np.maximum(x.max(1), 1.5))


# ---- sort ----


def _floats_with_specials(shape, dtype=np.float32):
  x = rng.integers(-4, 5, shape).astype(dtype)  # Many ties.
  flat = x.reshape(-1)
  specials = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf], dtype)
  idx = rng.choice(flat.size, size=min(flat.size, 3 * len(specials)), replace=False)
  flat[idx] = np.resize(specials, idx.size)
  return x


def _bits(a):
  """Bit patterns, so -0.0 vs 0.0 and NaN signs must match exactly too."""
  a = np.asarray(a)
  return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind in "fV" else a


def assert_sort_matches_cpu(f, *args):
  """Bit-exact: sorting only moves elements."""
  ours = jax.tree.leaves(run_on(jax.devices("workshop")[0], f, *args))
  ref = jax.tree.leaves(run_on(cpu_device(), f, *args))
  assert len(ours) == len(ref)
  for a, b in zip(ours, ref):
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_floats_nan_signed_zero_ties(axis):
  x = _floats_with_specials((9, 12))
  assert_sort_matches_cpu(lambda x: (jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis)), x)


def test_sort_3d_middle_axis_and_stability():
  x = _floats_with_specials((3, 40, 5))
  assert_sort_matches_cpu(lambda x: jnp.argsort(x, axis=1, stable=True), x)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16,
                                   np.uint32, np.bool_])
def test_sort_integer_and_bool_dtypes(dtype):
  info = np.iinfo(dtype) if dtype != np.bool_ else None
  lo, hi = (0, 2) if info is None else (max(info.min, -100), min(info.max, 100))
  x = rng.integers(lo, hi, (5, 33), endpoint=True).astype(dtype)
  if info is not None:
    x[0, :2] = [info.min, info.max]
  assert_sort_matches_cpu(lambda x: (jnp.sort(x), jnp.argsort(x, axis=0)), x)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_sort_16_bit_floats(dtype):
  x = _floats_with_specials((4, 17), dtype)
  assert_sort_matches_cpu(lambda x: (jnp.sort(x), jnp.argsort(x)), x)


def test_sort_64_bit_dtypes():
  with jax.enable_x64(True):
    x = _floats_with_specials((6, 21), np.float64)
    i = rng.integers(-2**62, 2**62, (6, 21))
    i[0, :2] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    u = rng.integers(0, 2**64 - 1, (6, 21), dtype=np.uint64, endpoint=True)
    assert_sort_matches_cpu(lambda x, i, u: (jnp.sort(x), jnp.argsort(x), jnp.sort(i),
                                             jnp.sort(u)), x, i, u)


def test_lax_sort_multi_operand_two_keys():
  keys = rng.integers(0, 3, (4, 30)).astype(np.int32)
  keys2 = _floats_with_specials((4, 30))
  payload = np.arange(4 * 30, dtype=np.float32).reshape(4, 30)
  f = lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2)
  assert_sort_matches_cpu(f, keys, keys2, payload)


def test_sort_along_axis_0_of_2d():
  x = _floats_with_specials((25, 3))
  assert_sort_matches_cpu(lambda x: lax.sort((x, x.astype(jnp.int32)), dimension=0), x)


def test_top_k_composite_inlines_its_decomposition():
  # lax.top_k is a stablehlo.composite whose decomposition sorts with GT TOTALORDER.
  x = _floats_with_specials((5, 31))
  assert_sort_matches_cpu(lambda x: lax.top_k(x, 4), x)


def test_vmap_of_sort_and_argsort():
  x = _floats_with_specials((4, 6, 7))
  assert_sort_matches_cpu(jax.vmap(lambda x: (jnp.sort(x, axis=0), jnp.argsort(x))), x)


@contextlib.contextmanager
def comparator(fn):
  """Makes lax.sort lower `fn(lhs_0, rhs_0, lhs_1, rhs_1, ..., num_keys)` as comparator."""
  saved = lax_internal._sort_lt_comparator  # pylint: disable=protected-access
  lax_internal._sort_lt_comparator = fn  # pylint: disable=protected-access
  try:
    yield
  finally:
    lax_internal._sort_lt_comparator = saved  # pylint: disable=protected-access


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_sort_general_comparator_stable(n):
  # Descending by |key|: not a comparator JAX emits, so the sorting-network kernel runs.
  keys = rng.integers(-5, 6, (3, n)).astype(np.int32)
  payload = np.arange(3 * n, dtype=np.float32).reshape(3, n)
  with comparator(lambda a, b, *_, num_keys: jnp.abs(a) > jnp.abs(b)):
    f = lambda k, p: lax.sort((k, p), dimension=1, is_stable=True, num_keys=1)
    assert_sort_matches_cpu(f, keys, payload)
    assert "sort_general" in [i.op for i in compile_fn(f, keys, payload).plan.instrs]


def test_sort_general_comparator_unstable_along_axis_0():
  # Distinct keys, so an unstable sort has only one right answer.
  keys = rng.permutation(60).reshape(20, 3).astype(np.float32) - 30
  with comparator(lambda a, b, *_, num_keys: (a + 0.25) * (a + 0.25) < (b + 0.25) * (b + 0.25)):
    f = lambda k: lax.sort((k, -k), dimension=0, is_stable=False, num_keys=1)
    assert_sort_matches_cpu(f, keys)
