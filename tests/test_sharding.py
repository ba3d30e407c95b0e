"""Sharded programs: Shardy annotations and automatic SPMD partitioning.

Every program runs on `workshop` and on JAX's CPU backend (both with 4 devices) in this
process, and the results, and where JAX exposes them the output shardings, must agree.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.shard_alike import shard_alike


def _both(f, *args):
  """f(*args) with the arguments committed to device 0 of each backend, as numpy."""
  out = []
  for platform in ("workshop", "cpu"):
    placed = jax.device_put(args, jax.devices(platform)[0])
    out.append(jax.tree.map(np.asarray, f(*placed)))
  return out


def _assert_same(ours, ref, rtol=2e-6):
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6)


# One device: JAX wraps keys made outside jit in sdy.sharding_constraint on an empty mesh.

@pytest.mark.parametrize("sample", [
    lambda k: jax.random.normal(k, (3,)),
    lambda k: jax.random.uniform(k, (2, 3), minval=-1.0, maxval=2.0),
    lambda k: jax.random.randint(k, (5,), 0, 10),
    lambda k: jax.random.split(k)[0],
    lambda k: jax.vmap(lambda kk: jax.random.normal(kk, (2,)))(jax.random.split(k, 3)),
    lambda k: jax.jit(lambda kk: jax.random.bernoulli(kk, 0.3, (4,)))(k),
    lambda k: jax.random.permutation(k, 6),
], ids=["normal", "uniform", "randint", "split", "vmap_keys", "jit_bernoulli", "permutation"])
def test_random_with_key_made_outside_jit_matches_cpu(sample):
  # Threefry bits are integer arithmetic: samplers must match the CPU backend exactly
  # up to the float transforms' last ulp.
  ours, ref = _both(sample, jax.random.PRNGKey(0))
  _assert_same(ours, ref)


def test_new_style_key_and_flax_style_init_matches_cpu():
  def init(key):
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (4, 3)) * 0.1, "b": jax.random.uniform(k2, (3,))}

  def run(platform):
    with jax.default_device(jax.devices(platform)[0]):
      key = jax.random.key(42)
      params = jax.jit(init)(key)
      x = jnp.ones((2, 4))
      return jax.tree.map(np.asarray, jax.jit(lambda p, x: x @ p["w"] + p["b"])(params, x))

  _assert_same(run("workshop"), run("cpu"))


def test_array_copy_and_shard_alike_match_cpu():
  def f(x):
    y = jnp.array(x, copy=True) * 2
    a, b = shard_alike(y, x + 1)
    return a - b

  ours, ref = _both(jax.jit(f), np.arange(6.0, dtype=np.float32))
  _assert_same(ours, ref)
