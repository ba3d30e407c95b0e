"""Collectives over the workshop backend's 4 devices, against JAX's CPU backend or numpy.

JAX 0.10 lowers both pmap and shard_map to one SPMD program (1 replica, 4 partitions); each
JAX collective runs here through pmap, through shard_map on a 1-D mesh and on a 2x2 mesh
(collectives over one axis: groups [[0, 2], [1, 3]] or [[0, 1], [2, 3]]; or both). The CPU
backend has 4 devices too (tests/conftest.py) and runs the same program as the reference.
Forms JAX never emits (variadic operands, collective_broadcast with a group that leaves a
device out, no channel) are run from StableHLO text and checked against numpy; JAX's own
collective_broadcast (jax.lax.pbroadcast, lowered on workshop since initialize() registers
its rule) is tested in test_multiprocess.py, in one process and across two.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax._src import xla_bridge
from jax._src.lib import xla_client
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jax_plugins.workshop.compiler as workshop_compiler
from jax_plugins.workshop.compiler import compile_program
from jax_plugins.workshop.compiler.rules.collectives import Mode, participant_groups
from reference import default_tol

N = 4
PLATFORMS = ("workshop", "cpu")


def _devices(platform):
  devices = jax.devices(platform)
  assert len(devices) >= N, f"{platform} has {len(devices)} devices; tests need {N}"
  return devices[:N]


def _data(shape, dtype, seed=0):
  """Distinct values per device; floats of mixed sign, ints small enough not to overflow."""
  rng = np.random.default_rng(seed)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    return rng.integers(-50, 50, shape).astype(dtype)
  if np.issubdtype(dtype, np.complexfloating):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def _assert_same(ours, ref):
  ours, ref = jax.tree.map(np.asarray, ours), jax.tree.map(np.asarray, ref)
  assert jax.tree.structure(ours) == jax.tree.structure(ref)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    # Exact for data movement and integers; float reductions may associate differently
    # from XLA:CPU's, so a few ulps scaled by the (4-term) sum.
    tol = default_tol(a.dtype)
    if a.dtype == ml_dtypes.bfloat16:  # Only data movement runs on bf16 here: bit-exact.
      np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    elif tol:
      np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    else:
      np.testing.assert_array_equal(a, b)


def _pmap(f, x):
  """pmap(f)(x) on the workshop devices and on the CPU devices."""
  return [jax.pmap(f, axis_name="i", devices=_devices(p))(x) for p in PLATFORMS]


def _shard_map(f, x, mesh_shape, names, spec):
  """jit(shard_map(f)) over a mesh of each platform's devices; in and out specs `spec`."""
  results = []
  for platform in PLATFORMS:
    mesh = Mesh(np.array(_devices(platform)).reshape(mesh_shape), names)
    # out_shardings: the plugin does not choose output shardings for jit, so declare them.
    g = jax.jit(
      jax.shard_map(f, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False),
      out_shardings=NamedSharding(mesh, spec),
    )
    results.append(g(jax.device_put(x, NamedSharding(mesh, spec))))
  return results


# Each JAX collective as a per-device function of one (8, 6) block, axis name "i"; the
# dtypes it accepts.
ALL = (np.float32, np.int32, np.bool_)
NUMERIC = (np.float32, np.int32)
# Sums of complex values fold (re, im) pairs (all_reduce and reduce_scatter take c64/c128).
SUMMED = (*NUMERIC, np.complex64)
# Data movement copies bytes, so it takes every dtype, including those without arithmetic
# kernels yet.
MOVE = (*ALL, ml_dtypes.bfloat16)
COLLECTIVES = {
  "psum": (lambda v: lax.psum(v, "i"), SUMMED),
  "pmean": (lambda v: lax.pmean(v, "i"), (np.float32, np.complex64)),
  "pmax": (lambda v: lax.pmax(v, "i"), ALL),
  "pmin": (lambda v: lax.pmin(v, "i"), ALL),
  "psum_pytree": (lambda v: lax.psum((v, 2 * v), "i"), NUMERIC),
  "all_gather": (lambda v: lax.all_gather(v, "i"), MOVE),
  "all_gather_axis1": (lambda v: lax.all_gather(v, "i", axis=1), MOVE),
  "all_gather_tiled": (lambda v: lax.all_gather(v, "i", tiled=True), MOVE),
  "all_gather_tiled_axis1": (lambda v: lax.all_gather(v, "i", axis=1, tiled=True), MOVE),
  "psum_scatter": (lambda v: lax.psum_scatter(v[:4], "i"), SUMMED),
  "psum_scatter_tiled": (lambda v: lax.psum_scatter(v, "i", tiled=True), SUMMED),
  "psum_scatter_tiled_dim1": (
    lambda v: lax.psum_scatter(v[:, :4], "i", scatter_dimension=1, tiled=True),
    NUMERIC,
  ),
  "all_to_all_0_0": (lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True), MOVE),
  "all_to_all_0_1": (lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True), MOVE),
  "all_to_all_1_0": (lambda v: lax.all_to_all(v[:, :4], "i", 1, 0, tiled=True), MOVE),
  "all_to_all_untiled": (lambda v: lax.all_to_all(v[:4], "i", 0, 0), MOVE),
  "ppermute_ring": (lambda v: lax.ppermute(v, "i", [(j, (j + 1) % N) for j in range(N)]), MOVE),
  "ppermute_partial": (lambda v: lax.ppermute(v, "i", [(0, 2), (3, 1)]), MOVE),
  "axis_index": (lambda v: v * 0 + lax.axis_index("i").astype(v.dtype), NUMERIC),
}
CASES = [
  pytest.param(name, dt, id=f"{name}-{np.dtype(dt).name}")
  for name, (_, dts) in COLLECTIVES.items()
  for dt in dts
]


@pytest.mark.parametrize("name,dtype", CASES)
def test_pmap(name, dtype):
  f, _ = COLLECTIVES[name]
  _assert_same(*_pmap(f, _data((N, 8, 6), dtype)))


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_shard_map(name):
  f, dtypes = COLLECTIVES[name]
  x = _data((N * 8, 6), dtypes[0])
  _assert_same(*_shard_map(f, x, (N,), ("i",), P("i")))


# The same collectives over one or both axes of a 2x2 mesh: each device holds a (4, 4)
# block of an (8, 8) array.
MESH_COLLECTIVES = {
  "psum": lambda v, ax: lax.psum(v, ax),
  "pmax": lambda v, ax: lax.pmax(v, ax),
  "all_gather": lambda v, ax: lax.all_gather(v, ax, axis=1),
  "all_gather_tiled": lambda v, ax: lax.all_gather(v, ax, tiled=True),
  "psum_scatter": lambda v, ax: lax.psum_scatter(v, ax, tiled=True),
  "all_to_all": lambda v, ax: lax.all_to_all(v, ax, 0, 1, tiled=True),
  "ppermute": lambda v, ax: lax.ppermute(
    v, ax, [(0, 1), (1, 0)] if isinstance(ax, str) else [(0, 3), (3, 2), (2, 0)]
  ),
  "axis_index": lambda v, ax: v + lax.axis_index(ax).astype(v.dtype),
}


@pytest.mark.parametrize("axes", ["a", "b", ("a", "b")], ids=["a", "b", "ab"])
@pytest.mark.parametrize("name", list(MESH_COLLECTIVES))
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_shard_map_2x2(name, axes, dtype):
  f = MESH_COLLECTIVES[name]
  _assert_same(
    *_shard_map(lambda v: f(v, axes), _data((8, 8), dtype), (2, 2), ("a", "b"), P("a", "b"))
  )


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("shape", [(257, 67), (256, 160)], ids=["uneven", "even"])
def test_large_all_reduce_splits_work(shape, dtype):
  # Big enough that each member folds only its slice and copies the others' (see
  # kSplitReductionElements); 257 * 67 elements do not split evenly four ways.
  x = _data((N, *shape), dtype)
  _assert_same(*_pmap(lambda v: (lax.psum(v, "i"), lax.pmin(v, "i")), x))
  mesh_x = _data((2 * shape[0], 2 * shape[1]), dtype)
  _assert_same(*_shard_map(lambda v: lax.psum(v, "b"), mesh_x, (2, 2), ("a", "b"), P("a", "b")))


def test_collectives_in_sequence_and_mixed_with_compute():
  def f(v):
    s = lax.psum(jnp.sin(v), "i")
    g = lax.all_gather(s * lax.axis_index("i"), "i", tiled=True)
    return lax.ppermute(g[:8] + lax.pmax(v, "i"), "i", [(j, (j + 3) % N) for j in range(N)])

  _assert_same(*_pmap(f, _data((N, 8, 6), np.float32)))


def test_independent_all_reduces_are_combined_and_dependent_ones_kept_apart():
  # A sharded program's all-reduces of one kind, group and element type that do not
  # depend on each other become one variadic all-reduce (compiler/spmd/combine.py
  # combine_all_reduces); one fed by another's result, one of another dtype or body
  # stays apart. The values must be those of separate all-reduces.
  def f(v):
    a, b = lax.psum(v, "i"), lax.psum(jnp.sin(v), "i")
    c = lax.psum(a * 2.0, "i")  # depends on a: not combined with it
    d = lax.psum(v.astype(jnp.int32), "i")  # another element type
    e = lax.pmax(v, "i")  # another body
    return a + b + c + d.astype(v.dtype) + e

  ours, ref = _shard_map(f, _data((N * 8, 6), np.float32), (N,), ("i",), P("i"))
  _assert_same(ours, ref)
  mesh = Mesh(np.array(_devices("workshop")), ("i",))
  g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False))
  text = g.lower(jnp.zeros((N * 8, 6), jnp.float32)).compile().as_text()
  # a+b, c, d, e (the variadic one has two operands).
  assert text.count("all-reduce(") == 4, text


def test_all_reduce_of_an_all_reduce_is_not_combined_with_it():
  # psum(psum(x)): the second is fed by the first directly; combined, the variadic
  # all-reduce took its own result ("value used before it is defined").
  x = _data((N, 8, 6), np.float32)
  _assert_same(*_pmap(lambda v: (lax.psum(lax.psum(v, "i"), "i"), lax.psum(v * 2, "i")), x))
  _assert_same(
    *_shard_map(
      lambda v: lax.pmax(lax.pmax(v, "i"), "i"), _data((N * 8, 6), np.float32), (N,), ("i",), P("i")
    )
  )


def test_combined_all_reduces_keep_each_results_sharding():
  # Two all-reduces in a shard_map over "a" of a value sharded on "b" too: combined,
  # the op kept the first member's one sharding for its two results, the optimized
  # program did not parse and JAX got no output shardings (UnspecifiedValue).
  x = _data((8, 8), np.float32)
  results = []
  for platform in PLATFORMS:
    mesh = Mesh(np.array(_devices(platform)).reshape(2, 2), ("a", "b"))
    f = jax.jit(
      jax.shard_map(
        lambda v: (lax.psum(v.sum(1), "a"), lax.psum(v.max(1), "a")),
        mesh=mesh,
        in_specs=P("a"),
        out_specs=P("a"),
        axis_names={"a"},
        check_vma=False,
      )
    )
    out = f(jax.device_put(x, NamedSharding(mesh, P("a", "b"))))
    results.append((out, [o.sharding.spec for o in out]))
  _assert_same(results[0][0], results[1][0])
  assert results[0][1] == results[1][1]


def test_fori_loop_of_collectives():
  def f(v):
    return lax.fori_loop(0, 3, lambda i, c: lax.psum(c, "i") * 0.25 + i, v)

  x = _data((N, 5), np.float32)
  try:
    ours, ref = _pmap(f, x)
  except Exception as e:  # pylint: disable=broad-except
    if "stablehlo.while" in str(e):
      pytest.skip("stablehlo.while is not supported yet")
    raise
  _assert_same(ours, ref)


# -- Forms JAX does not emit, from StableHLO text, against numpy. ----------------------------


def _module(body: str, replicas: int, partitions: int) -> str:
  return (
    f"module @m attributes {{mhlo.num_partitions = {partitions} : i32, "
    f"mhlo.num_replicas = {replicas} : i32}} {{\n{body}\n}}"
  )


def _run_text(body: str, args, replicas=1, partitions=N):
  """Compiles the functions `body` for replicas x partitions participants on the workshop
  devices and runs them; args[k][p] is argument k of participant p (= r * partitions + p).

  Returns:
    results[k][p]: result k of participant p, as numpy.
  """
  backend = xla_bridge.get_backend("workshop")
  devices = _devices("workshop")[: replicas * partitions]
  options = xla_client.CompileOptions()
  build = options.executable_build_options
  build.num_replicas, build.num_partitions = replicas, partitions
  build.device_assignment = xla_client.DeviceAssignment.create(
    np.arange(len(devices)).reshape(replicas, partitions)
  )
  exe = backend.compile_and_load(
    _module(body, replicas, partitions), xla_client.DeviceList(tuple(devices)), options
  )
  mesh = Mesh(np.array(devices), ("p",))
  arrays = []
  for per_device in args:
    shards = [jax.device_put(a, d) for a, d in zip(per_device, devices)]
    shape = (len(devices) * shards[0].shape[0], *shards[0].shape[1:])
    arrays.append(
      jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, P("p")), shards)
    )
  results = exe.execute_sharded(arrays).disassemble_into_single_device_arrays()
  return [[np.asarray(r) for r in result] for result in results]


CHANNEL = "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>"
ADD = """({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    })"""


def _parts(shape, dtype=np.float32):
  return [_data(shape, dtype, seed=p) for p in range(N)]


def test_variadic_all_reduce_in_groups():
  a, b = _parts((2,)), _parts((3, 2))
  [ra, rb] = _run_text(
    f"""
  func.func public @main(%a: tensor<2xf32>, %b: tensor<3x2xf32>)
      -> (tensor<2xf32>, tensor<3x2xf32>) {{
    %0:2 = "stablehlo.all_reduce"(%a, %b) <{{{CHANNEL},
        replica_groups = dense<[[3, 0], [1, 2]]> : tensor<2x2xi64>, use_global_device_ids}}> {ADD}
        : (tensor<2xf32>, tensor<3x2xf32>) -> (tensor<2xf32>, tensor<3x2xf32>)
    return %0#0, %0#1 : tensor<2xf32>, tensor<3x2xf32>
  }}""",
    [a, b],
  )
  for group in ([3, 0], [1, 2]):
    for p in group:
      np.testing.assert_allclose(ra[p], sum(a[q] for q in group), rtol=1e-6)
      np.testing.assert_allclose(rb[p], sum(b[q] for q in group), rtol=1e-6)


@pytest.mark.parametrize("n", [5, 20001], ids=["small", "large"])
def test_all_reduce_in_groups_of_unequal_size(n):
  # Large operands take the two-phase path (kSplitReductionElements); every participant
  # must choose it, whatever the size of its own group.
  a = _parts((n,))
  [r] = _run_text(
    f"""
  func.func public @main(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{
    %0 = "stablehlo.all_reduce"(%a) <{{{CHANNEL},
        replica_groups = dense<[[1, 0, 2], [3, -1, -1]]> : tensor<2x3xi64>,
        use_global_device_ids}}> {ADD} : (tensor<{n}xf32>) -> tensor<{n}xf32>
    return %0 : tensor<{n}xf32>
  }}""",
    [a],
  )
  for p in (0, 1, 2):
    np.testing.assert_allclose(r[p], a[1] + a[0] + a[2], rtol=1e-6)
  np.testing.assert_array_equal(r[3], a[3])


@pytest.mark.parametrize(
  "attrs,groups",
  [
    # A channel without use_global_device_ids: groups of replica ids spanning all partitions.
    (f"{CHANNEL}, replica_groups = dense<[[0]]> : tensor<1x1xi64>", [[0, 1, 2, 3]]),
    # No channel: cross-replica, and there is one replica: each partition alone.
    ("replica_groups = dense<[[0]]> : tensor<1x1xi64>", [[0], [1], [2], [3]]),
    ("replica_groups = dense<> : tensor<0x0xi64>", [[0], [1], [2], [3]]),
  ],
)
def test_all_reduce_group_modes(attrs, groups):
  a = _parts((3,))
  [r] = _run_text(
    f"""
  func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {{
    %0 = "stablehlo.all_reduce"(%a) <{{{attrs}}}> {ADD} : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }}""",
    [a],
  )
  for group in groups:
    for p in group:
      np.testing.assert_allclose(r[p], sum(a[q] for q in group), rtol=1e-6)


def test_variadic_all_gather_and_all_to_all():
  a, b = _parts((2, 4)), _parts((3, 8), np.int32)
  gather_a, gather_b, a2a_a, a2a_b = _run_text(
    f"""
  func.func public @main(%a: tensor<2x4xf32>, %b: tensor<3x8xi32>)
      -> (tensor<2x16xf32>, tensor<3x32xi32>, tensor<8x1xf32>, tensor<12x2xi32>) {{
    %0:2 = "stablehlo.all_gather"(%a, %b) <{{all_gather_dim = 1 : i64, {CHANNEL},
        replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}}>
        : (tensor<2x4xf32>, tensor<3x8xi32>) -> (tensor<2x16xf32>, tensor<3x32xi32>)
    %1:2 = "stablehlo.all_to_all"(%a, %b) <{{{CHANNEL}, split_dimension = 1 : i64,
        concat_dimension = 0 : i64, split_count = 4 : i64,
        replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}}>
        : (tensor<2x4xf32>, tensor<3x8xi32>) -> (tensor<8x1xf32>, tensor<12x2xi32>)
    return %0#0, %0#1, %1#0, %1#1
        : tensor<2x16xf32>, tensor<3x32xi32>, tensor<8x1xf32>, tensor<12x2xi32>
  }}""",
    [a, b],
  )
  for p in range(N):
    np.testing.assert_array_equal(gather_a[p], np.concatenate(a, axis=1))
    np.testing.assert_array_equal(gather_b[p], np.concatenate(b, axis=1))
    np.testing.assert_array_equal(a2a_a[p], np.concatenate([q[:, p : p + 1] for q in a]))
    np.testing.assert_array_equal(a2a_b[p], np.concatenate([q[:, 2 * p : 2 * p + 2] for q in b]))


MLIR_TYPES = [(np.float32, "f32"), (np.int32, "i32"), (np.bool_, "i1")]


@pytest.mark.parametrize("dtype,mlir", MLIR_TYPES)
def test_collective_broadcast(dtype, mlir):
  a = _parts((2, 3), dtype)
  [r] = _run_text(
    f"""
  func.func public @main(%a: tensor<2x3x{mlir}>) -> tensor<2x3x{mlir}> {{
    %0 = "stablehlo.collective_broadcast"(%a) <{{{CHANNEL},
        replica_groups = dense<[[2, 0, 3]]> : tensor<1x3xi64>}}>
        : (tensor<2x3x{mlir}>) -> tensor<2x3x{mlir}>
    return %0 : tensor<2x3x{mlir}>
  }}""",
    [a],
  )
  for p in (2, 0, 3):  # The group's first member sends; partition 1 is in no group: zeros.
    np.testing.assert_array_equal(r[p], a[2])
  np.testing.assert_array_equal(r[1], np.zeros((2, 3), dtype))


@pytest.mark.parametrize("dtype,mlir", MLIR_TYPES)
def test_collective_permute_receivers_and_zeros(dtype, mlir):
  a = _parts((3,), dtype)
  [with_channel, without] = _run_text(
    f"""
  func.func public @main(%a: tensor<3x{mlir}>) -> (tensor<3x{mlir}>, tensor<3x{mlir}>) {{
    %0 = "stablehlo.collective_permute"(%a) <{{{CHANNEL},
        source_target_pairs = dense<[[1, 3], [3, 0]]> : tensor<2x2xi64>}}>
        : (tensor<3x{mlir}>) -> tensor<3x{mlir}>
    %1 = "stablehlo.collective_permute"(%a) <{{
        source_target_pairs = dense<[[0, 0]]> : tensor<1x2xi64>}}>
        : (tensor<3x{mlir}>) -> tensor<3x{mlir}>
    return %0, %1 : tensor<3x{mlir}>, tensor<3x{mlir}>
  }}""",
    [a],
  )
  zeros = np.zeros(3, dtype)
  for p, want in enumerate([a[3], zeros, zeros, a[1]]):
    np.testing.assert_array_equal(with_channel[p], want)
  # Without a channel the ids are replica ids; with one replica, (0, 0) keeps each
  # partition's own value.
  for p in range(N):
    np.testing.assert_array_equal(without[p], a[p])


def test_partition_id_and_replica_id():
  x = _parts((1,), np.uint32)
  partition, replica = _run_text(
    """
  func.func public @main(%a: tensor<1xui32>) -> (tensor<ui32>, tensor<ui32>) {
    %0 = stablehlo.partition_id : tensor<ui32>
    %1 = stablehlo.replica_id : tensor<ui32>
    return %0, %1 : tensor<ui32>, tensor<ui32>
  }""",
    [x],
  )
  assert [int(v) for v in partition] == [0, 1, 2, 3]
  assert [int(v) for v in replica] == [0, 0, 0, 0]


def test_two_replicas_of_two_partitions():
  a = [np.full(2, 10.0**p, np.float32) for p in range(N)]
  summed, replica, partition = _run_text(
    f"""
  func.func public @main(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<ui32>, tensor<ui32>) {{
    %0 = "stablehlo.all_reduce"(%a) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}>
        {ADD} : (tensor<2xf32>) -> tensor<2xf32>
    %1 = stablehlo.replica_id : tensor<ui32>
    %2 = stablehlo.partition_id : tensor<ui32>
    return %0, %1, %2 : tensor<2xf32>, tensor<ui32>, tensor<ui32>
  }}""",
    [a],
    replicas=2,
    partitions=2,
  )
  # No channel: cross-replica, so participants r * 2 + p meet with the same p: {0, 2}, {1, 3}.
  for p, want in enumerate([101.0, 1010.0, 101.0, 1010.0]):
    np.testing.assert_array_equal(summed[p], np.full(2, want, np.float32))
  assert [int(v) for v in replica] == [0, 0, 1, 1]
  assert [int(v) for v in partition] == [0, 1, 0, 1]


# -- Compile-time group resolution and validation. ------------------------------------------


def test_participant_groups_in_every_mode():
  # 2 replicas x 2 partitions: participant r * 2 + p.
  assert participant_groups([[0, 1]], Mode.CROSS_REPLICA, 2, 2) == [[0, 2], [1, 3]]
  assert participant_groups([], Mode.CROSS_REPLICA, 2, 2) == [[0, 2], [1, 3]]
  assert participant_groups([[1, 0]], Mode.CROSS_PARTITION, 2, 2) == [[1, 0], [3, 2]]
  assert participant_groups([[1], [0]], Mode.CROSS_REPLICA_AND_PARTITION, 2, 2) == [[2, 3], [0, 1]]
  assert participant_groups([[3, 0], [1, 2]], Mode.FLATTENED_IDS, 2, 2) == [[3, 0], [1, 2]]
  with pytest.raises(ValueError, match="name 2"):
    participant_groups([[0, 2]], Mode.CROSS_PARTITION, 2, 2)
  with pytest.raises(ValueError, match="cannot be empty"):
    participant_groups([], Mode.FLATTENED_IDS, 1, 4)


def _compile_text(body: str):
  return compile_program(_module(body, 1, N).encode(), "mlir", b"", N)


def _all_reduce_text(attrs: str) -> str:
  return f"""
  func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {{
    %0 = "stablehlo.all_reduce"(%a) <{{{attrs}}}> {ADD} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }}"""


def _permute_text(pairs: str, attrs: str = CHANNEL) -> str:
  n = pairs.count("[") - 1
  return f"""
  func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {{
    %0 = "stablehlo.collective_permute"(%a) <{{{attrs}{", " if attrs else ""}
        source_target_pairs = dense<{pairs}> : tensor<{n}x2xi64>}}>
        : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }}"""


FLAT = f"{CHANNEL}, use_global_device_ids"


# The StableHLO verifier already rejects repeated ids and gaps in 0..max; what it cannot know
# is the number of partitions, which the compiler checks.
@pytest.mark.parametrize(
  "text,message",
  [
    (
      _all_reduce_text(
        f"{FLAT}, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>"
      ),
      r"name 4, outside \[0, 4\) \(flattened ids",
    ),
    (
      _all_reduce_text(f"{FLAT}, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"),
      r"leave out participants \[2, 3\] of 4",
    ),
    (
      _all_reduce_text(f"{CHANNEL}, replica_groups = dense<[[0], [1]]> : tensor<2x1xi64>"),
      r"name 1, outside \[0, 1\) \(replica ids, each spanning",
    ),
    (
      _all_reduce_text(f"{FLAT}, replica_groups = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>"),
      "seen more than once",
    ),
    (_permute_text("[[0, 5]]"), r"pairs \[\[0, 5\]\] name 5, outside \[0, 4\) \(partition ids"),
    (_permute_text("[[0, 1]]", attrs=""), r"name 1, outside \[0, 1\) \(replica ids"),
    (_permute_text("[[0, 1], [2, 1]]"), "duplicate targets"),
  ],
  ids=[
    "out-of-range",
    "uncovered",
    "replica-id",
    "repeated",
    "permute-out-of-range",
    "permute-no-channel",
    "permute-repeated",
  ],
)
def test_bad_groups_are_rejected_at_compile_time(text, message):
  with pytest.raises(ValueError, match=message):
    _compile_text(text)


def test_jax_collectives_lower_to_participant_groups():
  mesh = jax.make_mesh((2, 2), ("a", "b"), devices=jax.devices("cpu")[:N])
  x = jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P("a", "b")))

  def f(v):
    v = lax.psum(v, "a") + lax.all_to_all(v, "b", 0, 0, tiled=True)
    return lax.ppermute(v, "b", [(0, 1), (1, 0)]) + lax.axis_index("a").astype(v.dtype)

  g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("a", "b"), out_specs=P("a", "b")))
  exe = compile_program(g.lower(x).as_text().encode(), "mlir", b"", N)
  attrs = {i.op: i.attrs for i in exe.plan.instrs}
  assert attrs["all_reduce"] == {"body": "add", "groups": [[0, 2], [1, 3]]}
  assert attrs["all_to_all"] == {"split_dim": 0, "concat_dim": 0, "groups": [[0, 1], [2, 3]]}
  assert attrs["collective_permute"] == {"sources": [1, 0, 3, 2]}
  assert attrs["partition_id"] == {"num_partitions": 4}


# -- Runtime safety: a participant that fails does not leave the others waiting. -------------


def test_failing_participant_releases_the_others(monkeypatch):
  """A plan whose groups leave participant 3 out (the compiler never emits one): it fails
  before the exchange; the others, waiting in it, are released with an error."""
  real = workshop_compiler.compile_program

  def corrupt(*args):
    exe = real(*args)
    for instr in exe.plan.instrs:
      if instr.op == "all_reduce":
        instr.attrs["groups"] = [[0, 1], [2]]
    return exe

  monkeypatch.setattr(workshop_compiler, "compile_program", corrupt)
  x = _data((N, 7, 3), np.float32)  # A shape no other test compiles: no cached executable.
  f = jax.pmap(lambda v: lax.psum(v, "i") * 3, axis_name="i", devices=_devices("workshop"))
  with pytest.raises(Exception, match="participant 3 is in no replica group"):
    jax.block_until_ready(f(x))


def test_collective_not_reached_by_every_device_fails_instead_of_hanging():
  """Only partition 0 takes the branch with psum: the others finish the program, so the
  psum can never complete; partition 0 must fail, not wait forever."""

  def f(v):
    return lax.cond(lax.axis_index("i") == 0, lambda u: lax.psum(u, "i"), lambda u: u, v)

  g = jax.pmap(f, axis_name="i", devices=_devices("workshop"))
  try:
    out = g(_data((N, 3), np.float32))
  except Exception as e:  # pylint: disable=broad-except
    if "stablehlo.case" in str(e) or "stablehlo.if" in str(e):
      pytest.skip("stablehlo.case is not supported yet")
    raise
  with pytest.raises(Exception, match="finished the program while participant 0 waits"):
    jax.block_until_ready(out)


def test_complex_psum_in_shard_map_matches_numpy_and_cpu():
  # A psum of c64 inside shard_map had no kernel ("op 'stablehlo.all_reduce' has no
  # kernel for dtype c64"). Against numpy's complex128 sum and XLA:CPU, on the 1-D mesh
  # and over one axis of the 2x2 mesh.
  x = _data((N * 2, 3), np.complex64, seed=3)
  ours, ref = _shard_map(lambda v: lax.psum(v, "i"), x, (N,), ("i",), P("i"))
  _assert_same(ours, ref)
  expected = np.tile(x.astype(np.complex128).reshape(N, 2, 3).sum(0), (N, 1))
  np.testing.assert_allclose(np.asarray(ours), expected, rtol=1e-6, atol=1e-6)
  _assert_same(
    *_shard_map(
      lambda v: lax.psum(v, "b"), _data((8, 8), np.complex64), (2, 2), ("a", "b"), P("a", "b")
    )
  )
