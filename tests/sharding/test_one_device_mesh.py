"""Programs sharded over a mesh of one device.

JAX keeps the axis names of a one-device mesh: pmap over one element shards its parameter
and result as [{"i"}] on `["i"=1]`, which splits nothing. The plugin must treat such a
sharding as replicated (notebook 03 runs the guide's pmap test with `num_devices:1`).
References: JAX's CPU backend on the same program.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P


def test_pmap_over_one_device_matches_cpu():
  def f(x):
    return x + lax.psum(x, "i")

  x = np.arange(1, dtype=np.int32)
  ours = jax.pmap(f, axis_name="i", devices=jax.devices("workshop")[:1])(x)
  ref = jax.pmap(f, axis_name="i", devices=jax.devices("cpu")[:1])(x)
  assert ours.devices() == {jax.devices("workshop")[0]}
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))


def test_shard_map_on_one_device_mesh_matches_cpu():
  def run(device):
    mesh = jax.sharding.Mesh(np.array([device]), ("i",))
    x = jax.device_put(jnp.arange(6.0).reshape(3, 2), NamedSharding(mesh, P("i")))
    f = jax.shard_map(lambda x: lax.psum(x * 2, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    return np.asarray(jax.jit(f)(x))

  # Exact: x * 2 and a sum over one device are exact in float32.
  np.testing.assert_array_equal(run(jax.devices("workshop")[0]), run(jax.devices("cpu")[0]))
