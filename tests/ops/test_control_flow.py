"""Control flow vs JAX's CPU backend: while (fori_loop, scan, nested loops, values captured by
the regions), cond/switch/case/if (out-of-range indices, captured operands),
optimization_barrier, unknown custom calls, vmap of loops and branches, and collectives
inside a loop under shard_map. Family: control_flow.

Tolerances: everything here is exact (integers, selections, sums of small integers in
float) except where a test says otherwise.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from jax_plugins.workshop.compiler import compile_program, lowering
from reference import assert_matches_cpu, run_stablehlo


# Every test twice: loops and fusions interpreted, and compiled whatever their size.
pytestmark = pytest.mark.codegen_settings("0", "force")  # conftest.py

rng = np.random.default_rng(0)


def has_rule(op: str) -> bool:
  return f"stablehlo.{op}" in lowering._RULES  # pylint: disable=protected-access


needs_dynamic_slice = pytest.mark.skipif(
  not (has_rule("dynamic_slice") and has_rule("dynamic_update_slice")),
  reason="scan over xs needs dynamic_slice/dynamic_update_slice (another op family)",
)


def assert_mlir_matches_cpu(text: str, *args):
  ours = run_stablehlo(text, *args)
  ref = run_stablehlo(text, *args, platform="cpu")
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
  # The plain lowering (fuse=False): hoist.py would move x * y, of captures only, out.
  plan = compile_program(_WHILE_CAPTURING.encode(), "mlir", b"", 1, fuse=False).plan
  [loop] = plan.instrs
  x, y = plan.params
  # The carried value, then the captures in first-use order: y (by cond), x (by body).
  assert loop.ins == [x, y, x]
  cond, body = loop.attrs["cond"], loop.attrs["body"]
  assert len(cond.params) == len(body.params) == 3
  assert [i.op for i in body.instrs] == ["multiply", "add"]
  [ours] = run_stablehlo(_WHILE_CAPTURING, np.float32(0.5), np.float32(3))
  assert ours == 3.5  # 0.5 -> 2 -> 3.5 in steps of x * y = 1.5, until >= 3.


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

  assert_matches_cpu(
    jax.vmap(f), np.array([0, 3, 1, 5], np.int32), np.arange(4, dtype=np.float32), rtol=1e-6
  )


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
    f = jax.shard_map(
      lambda x: lax.fori_loop(0, 3, body, x), mesh=mesh, in_specs=P("i"), out_specs=P("i")
    )
    sharding = NamedSharding(mesh, P("i"))
    x = jax.device_put(np.arange(8, dtype=np.float32), sharding)
    return np.asarray(jax.jit(f, out_shardings=sharding)(x))

  np.testing.assert_array_equal(run(jax.devices("workshop")), run(jax.devices("cpu")))
