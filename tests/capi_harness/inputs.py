"""The programs and compile options the conformance harness feeds to a plugin.

They are produced here, with JAX, the way jaxlib produces them for a plugin: StableHLO
portable artifacts (VHLO bytecode, sdy mixed in) at the StableHLO version both sides
support, and serialized CompileOptionsProtos from JAX's own get_compile_options. The
harness (harness.cc) then hands them to any plugin through the C API.

    python tests/capi_harness/inputs.py OUT_DIR
"""

from __future__ import annotations

import os
import sys

import numpy as np

# Two host "CPU devices" for lowering the multi-device programs (before jax starts).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
from jax._src import compiler  # noqa: E402
from jax._src.lib import _jax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

# Older than every plugin's current version: both the workshop plugin (jaxlib's own
# version) and XLA's (newer) read it.
_TARGET = "1.9.0"
NUM_DEVICES = 2


def _artifact(lowered: jax.stages.Lowered) -> bytes:
  return _jax.mlir.serialize_portable_artifact(lowered.as_text(dialect="stablehlo"), _TARGET, True)


def _options(replicas: int, partitions: int, assignment: list[list[int]]) -> bytes:
  """CompileOptions as jit sends them, for `assignment` ([replica][partition] -> id)."""
  opts = compiler.get_compile_options(
    num_replicas=replicas, num_partitions=partitions, device_assignment=np.array(assignment)
  )
  return opts.SerializeAsString()


def write_inputs(out: str) -> None:
  os.makedirs(out, exist_ok=True)

  def write(name: str, data: bytes) -> None:
    with open(os.path.join(out, name), "wb") as f:
      f.write(data)

  f32 = jax.ShapeDtypeStruct
  # XLA's PjrtCApiTest.Compile uses a 1x1 assignment {0} (and device_ordinal 0, which
  # Python cannot set; it is implied by the assignment).
  write("options_1x1.pb", _options(1, 1, [[0]]))
  write("options_1x1_device1.pb", _options(1, 1, [[1]]))
  # XLA's PjrtCApiTest.CompileXlaComputation: an HloModuleProto with parameters f32[],
  # f32[3], f32[2,3] returning their tuple.
  lowered = jax.jit(lambda a, b, c: (a, b, c)).lower(
    f32((), np.float32), f32((3,), np.float32), f32((2, 3), np.float32)
  )
  computation = _jax.mlir.mlir_module_to_xla_computation(
    lowered.as_text(), use_tuple_args=False, return_tuple=True
  )
  write("tuple3.hlo.pb", computation.as_serialized_hlo_module_proto())

  # Two outputs on one device: (a + b, a * b) for f32[4].
  write(
    "two_outputs.mlirbc",
    _artifact(
      jax.jit(lambda a, b: (a + b, a * b)).lower(f32((4,), np.float32), f32((4,), np.float32))
    ),
  )
  # Donation: a + 1 with a donated (tf.aliasing_output on the parameter).
  write(
    "donate.mlirbc",
    _artifact(jax.jit(lambda a: a + 1, donate_argnums=0).lower(f32((4,), np.float32))),
  )

  # SPMD over two devices, as JAX sends pmap (a shard_map with explicit shardings):
  # per-device f32[2], outputs x * 2 (sharded) and psum(x) (replicated).
  mesh = Mesh(np.array(jax.devices()[:NUM_DEVICES]), ("i",))
  sharded, replicated = NamedSharding(mesh, P("i")), NamedSharding(mesh, P())
  spmd = jax.jit(
    jax.shard_map(
      lambda x: (x * 2, jax.lax.psum(x, "i")), mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P())
    ),
    in_shardings=sharded,
    out_shardings=(sharded, replicated),
  )
  write("spmd.mlirbc", _artifact(spmd.lower(f32((2 * NUM_DEVICES,), np.float32))))
  write("options_spmd.pb", _options(1, NUM_DEVICES, [list(range(NUM_DEVICES))]))


if __name__ == "__main__":
  write_inputs(sys.argv[1])
