"""Tests for jax_plugins.workshop.compiler on programs lowered by JAX's own CPU backend."""

import os

# Four host CPU devices for the SPMD tests; must be set before JAX initializes a backend.
os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax import lax  # noqa: E402
from jax._src.lib import xla_client  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from jax_plugins.workshop.compiler import Instr, compile_program  # noqa: E402
from jax_plugins.workshop.compiler.lowering import free_lists  # noqa: E402

from compiler_helpers import artifact, compile_fn, ops  # noqa: E402

F32, S32, PRED = 11, 4, 1  # PJRT_Buffer_Type codes


def f32(*shape):
  return np.ones(shape, np.float32)


def test_add():
  exe = compile_fn(lambda x, y: x + y, f32(2, 3), f32(2, 3))
  plan = exe.plan
  assert exe.name == "jit__lambda"
  assert (exe.num_replicas, exe.num_partitions, exe.device_assignment) == (1, 1, [[0]])
  assert plan.slots == [(F32, (2, 3))] * 3
  assert plan.params == [0, 1]
  assert plan.results == [2]
  [add] = plan.instrs
  assert (add.op, add.ins, add.outs, add.attrs) == ("add", [0, 1], [2], {})
  assert "test_compiler.py" in add.loc and "add" in add.loc
  assert plan.frees == [[0, 1]]  # Parameters are released; results never are.
  assert "stablehlo.add" in exe.text
  assert len(exe.fingerprint) == 64


def test_scalar_multiply_constant_is_splat_expanded():
  plan = compile_fn(lambda x: x * 2.0, f32(3)).plan
  assert ops(plan) == ["constant", "broadcast_in_dim", "multiply"]
  const, bcast, _ = plan.instrs
  assert const.attrs["data"] == np.float32(2.0).tobytes()
  assert bcast.attrs["dims"] == []
  assert plan.slots[bcast.outs[0]] == (F32, (3,))


@pytest.mark.parametrize(
  "dtype,code", [(np.int32, S32), (np.bool_, PRED), (np.float64, 12), (np.uint32, 8)]
)
def test_constant_data_in_output_dtype(dtype, code):
  value = np.array([[1, 0, 1], [0, 1, 1]], dtype)
  with jax.enable_x64(dtype == np.float64):
    plan = compile_fn(lambda: jnp.asarray(value)).plan
  [const] = plan.instrs
  assert plan.slots[const.outs[0]] == (code, (2, 3))
  assert const.attrs["data"] == value.tobytes()


def test_bf16_constant_read_despite_bindings():
  value = np.array([1.5, -2.0, np.inf, np.nan], ml_dtypes.bfloat16)
  [const] = compile_fn(lambda: jnp.asarray(value)).plan.instrs
  assert const.attrs["data"] == value.tobytes()


def test_mlp_with_inlined_call():
  @jax.jit
  def layer(x, w):
    return jnp.tanh(x @ w)

  def mlp(x, w1, w2):
    return jnp.sum(layer(layer(x, w1), w2), axis=1)

  plan = compile_fn(mlp, f32(8, 4), f32(4, 16), f32(16, 2)).plan
  assert ops(plan) == ["constant", "dot_general", "tanh", "dot_general", "tanh", "reduce"]
  dot = plan.instrs[1]
  assert dot.attrs == {"lhs_batch": [], "rhs_batch": [], "lhs_contract": [1], "rhs_contract": [0]}
  reduce = plan.instrs[-1]
  assert reduce.attrs == {"dims": [1], "body": "add"}
  assert plan.slots[plan.results[0]] == (F32, (8,))


def test_last_use_frees():
  # y = exp(x); z = y * y; return z, -z. Slots: x=0, y=1, z=2, -z=3.
  instrs = [
    Instr("exponential", [0], [1], {}, ""),
    Instr("multiply", [1, 1], [2], {}, ""),
    Instr("negate", [2], [3], {}, ""),
  ]
  # x dies at exp, y at multiply; z and -z are results and never freed.
  assert free_lists(instrs, results=[2, 3]) == [[0], [1], []]


def test_compare_select_and_default_compare_type():
  plan = compile_fn(
    lambda x, y: jnp.where(x > y, x, y), np.ones(3, np.int32), np.ones(3, np.int32)
  ).plan
  [compare] = [i for i in plan.instrs if i.op == "compare"]
  assert compare.attrs == {"direction": "GT", "compare_type": "SIGNED"}
  assert plan.slots[compare.outs[0]] == (PRED, (3,))
  assert "select" in ops(plan)


def test_donation():
  exe = compile_fn(lambda x, y: (x + y, y), f32(2), f32(2), donate_argnums=(0,))
  assert exe.donations == [(0, 0)]


def test_pmap_psum_uses_local_shapes():
  lowered = jax.pmap(lambda x: lax.psum(x, "i"), axis_name="i").lower(f32(4, 3))
  exe = compile_program(artifact(lowered), "mlir", b"", 4)
  plan = exe.plan
  assert (exe.num_partitions, exe.device_assignment) == (4, [[0, 1, 2, 3]])
  assert plan.slots[plan.params[0]] == (F32, (1, 3))
  assert plan.slots[plan.results[0]] == (F32, (1, 3))
  [all_reduce] = [i for i in plan.instrs if i.op == "all_reduce"]
  assert all_reduce.attrs == {"body": "add", "groups": [[0, 1, 2, 3]]}


def test_shard_map_with_options_and_device_assignment():
  mesh = jax.make_mesh((4,), ("i",))
  f = jax.shard_map(lambda x: lax.pmax(x * 2, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
  x = jax.ShapeDtypeStruct((8, 3), jnp.float32, sharding=NamedSharding(mesh, P("i")))
  options = xla_client.CompileOptions()
  build = options.executable_build_options
  build.num_partitions = 4
  build.device_assignment = xla_client.DeviceAssignment.create(np.array([[3, 2, 1, 0]]))
  exe = compile_fn(f, x, num_devices=4, options=options.SerializeAsString())
  plan = exe.plan
  assert exe.device_assignment == [[3, 2, 1, 0]]
  assert exe.device_assignment_proto == build.device_assignment.serialize()
  assert plan.slots[plan.params[0]] == (F32, (2, 3))
  assert plan.slots[plan.results[0]] == (F32, (2, 3))
  assert plan.instrs[-1].op == "all_reduce"
  assert plan.instrs[-1].attrs["body"] == "maximum"


def test_sharded_value_outside_shard_map_is_partitioned():
  # Shardy's passes make it per-device code: each device takes the sine of its shard.
  mesh = jax.make_mesh((4,), ("i",))
  x = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P("i")))
  exe = compile_fn(jnp.sin, x, num_devices=4)
  plan = exe.plan
  assert exe.num_partitions == 4
  assert ops(plan) == ["sine"]
  assert plan.slots[plan.params[0]] == plan.slots[plan.results[0]] == (F32, (2,))


def test_unsupported_op_names_op_dtype_and_location():
  @jax.jit
  def foreign(x):  # A custom_call to a target the plugin doesn't have, in a callee.
    return jax.ffi.ffi_call("no_such_target", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

  with pytest.raises(NotImplementedError) as e:
    compile_fn(foreign, f32(3))
  assert str(e.value).startswith("workshop: unsupported custom_call target 'no_such_target'")
  assert "'stablehlo.custom_call' (f32) at " in str(e.value)
  assert "; called from " in str(e.value) and "test_compiler.py" in str(e.value)


def test_unsupported_reduction_body():
  def loop_in_body(x):
    return lax.reduce(
      x, np.float32(0), lambda a, b: lax.fori_loop(0, 2, lambda i, c: c + b, a), (0,)
    )

  with pytest.raises(
    NotImplementedError,
    match=r"'while' is not elementwise.*"
    r"'stablehlo.reduce' \(f32\) at .*test_compiler.py",
  ):
    compile_fn(loop_in_body, f32(3))


def test_unsupported_dtype_is_named():
  # The op table gives convolution no pred kernel (XLA:CPU has one).
  with pytest.raises(NotImplementedError, match=r"'stablehlo.convolution' \(pred\)"):
    compile_fn(lambda x: lax.conv(x, x, (1, 1), "SAME"), np.ones((1, 1, 3, 3), bool))


def test_textual_mlir():
  text = """
    func.func public @main(%a: tensor<2xi32>) -> tensor<2xi32> {
      %0 = stablehlo.negate %a : tensor<2xi32>
      return %0 : tensor<2xi32>
    }"""
  exe = compile_program(text.encode(), "mlir", b"", 1)
  assert ops(exe.plan) == ["negate"]
  assert exe.plan.slots == [(S32, (2,)), (S32, (2,))]


def test_garbage_options():
  with pytest.raises(ValueError, match="failed to deserialize CompileOptionsProto"):
    compile_fn(jnp.sin, f32(2), options=b"not a proto at all")


def test_device_out_of_range():
  options = xla_client.CompileOptions()
  options.executable_build_options.device_assignment = xla_client.DeviceAssignment.create(
    np.array([[5]])
  )
  with pytest.raises(ValueError, match="device 5"):
    compile_fn(jnp.sin, f32(2), options=options.SerializeAsString())


def test_unknown_format():
  with pytest.raises(ValueError, match="Unknown program format 'invalid'."):
    compile_program(b"", "invalid", b"", 1)


def test_undecodable_program():
  with pytest.raises(ValueError, match="failed to parse"):
    compile_program(b"ML\xefRjunk", "mlir", b"", 1)
