"""Donation as XLA does it: a result aliased to a donated parameter lives in its buffer.

JAX pairs results with donated parameters (`tf.aliasing_output`, or `jax.buffer_donor`
paired by the compiler); the executor reserves the parameter's storage for the result
(runtime/executor.cc, RunPlan): the producing instruction writes into it when the
parameter is dead by then or dies there (a fusion writes over it, an in-place update
updates it), else the result is copied in as soon as both are free. On JAX's CPU backend
`y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()` (taken before the call) for
these programs; so it must be here, with the values of numpy. (A pointer is read only
once the result is computed: PJRT_Buffer_UnsafePointer refuses a pending buffer.) Every test runs with the
code-generation tier off and forced (generated fusions write over their operands too).
The peak memory of a donated training step is one copy of the parameters (measured in a
subprocess: the device's peak is a high-water mark of the whole process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

pytestmark = pytest.mark.codegen_settings("0", "force")


def workshop():
  return jax.devices("workshop")[0]


def _put(tree):
  return jax.block_until_ready(jax.device_put(tree, workshop()))


def _pointers(tree):
  return [leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(tree)]


def test_elementwise_result_in_donated_buffer():
  x_np = np.arange(1000, dtype=np.float32)
  x = _put(x_np)
  before = x.unsafe_buffer_pointer()
  y = jax.block_until_ready(jax.jit(lambda x: x * 2 + 1, donate_argnums=0)(x))
  assert x.is_deleted()
  assert y.unsafe_buffer_pointer() == before
  np.testing.assert_array_equal(np.asarray(y), x_np * 2 + 1)


@pytest.mark.parametrize(
  "f",
  [
    lambda x: x.T,  # not elementwise, last use at the producer: copied in after it
    lambda x: (x.T @ x) + x,  # x read after the product: the fusion writes over it
    lambda x: x.at[1].set(7.0).at[2].add(1.0),  # in-place updates of the donated rows
    lambda x: jnp.flip(x, 0) * x.sum(),  # last use of x before the result's producer
    lambda x: jax.nn.softmax(x, axis=-1),  # a row fusion written over its operand
    lambda x: (jnp.sin(x) + 1, jnp.cos(x) * x),  # two results of one fusion, one aliased
  ],
  ids=["transpose", "dot_then_add", "scatter_chain", "reverse_scaled", "softmax", "two_results"],
)
def test_other_producers(f):
  rng = np.random.default_rng(0)
  x_np = rng.standard_normal((64, 64)).astype(np.float32)
  want = jax.tree.map(np.asarray, jax.jit(f)(jax.device_put(x_np, jax.devices("cpu")[0])))
  x = _put(x_np)
  before = x.unsafe_buffer_pointer()
  y = jax.block_until_ready(jax.jit(f, donate_argnums=0)(x))
  assert jax.tree.leaves(y)[0].unsafe_buffer_pointer() == before
  for a, b in zip(jax.tree.leaves(y), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), b, rtol=2e-5, atol=2e-4)


def test_while_loop_carry():
  x_np = np.linspace(-1, 1, 300, dtype=np.float32)
  x = _put(x_np)
  before = x.unsafe_buffer_pointer()
  f = jax.jit(lambda x: jax.lax.fori_loop(0, 5, lambda i, c: c * 0.5 + i, x), donate_argnums=0)
  y = jax.block_until_ready(f(x))
  want = x_np.copy()
  for i in range(5):
    want = want * np.float32(0.5) + np.float32(i)
  assert y.unsafe_buffer_pointer() == before
  np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6)


def _sgd_momentum(params, momentum, x):
  def loss(p):
    h = x
    for k in sorted(p):
      h = jnp.tanh(h @ p[k])
    return (h**2).sum()

  g = jax.grad(loss)(params)
  momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, g)
  params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
  return params, momentum, loss(params)


def test_training_step_pytree():
  rng = np.random.default_rng(1)
  params = {k: rng.standard_normal((32, 32)).astype(np.float32) * 0.2 for k in "abc"}
  momentum = {k: rng.standard_normal((32, 32)).astype(np.float32) * 0.01 for k in "abc"}
  x = rng.standard_normal((8, 32)).astype(np.float32)
  cpu = jax.devices("cpu")[0]
  want = jax.tree.map(
    np.asarray, jax.jit(_sgd_momentum)(*jax.device_put((params, momentum, x), cpu))
  )
  p, m, xs = _put((params, momentum, x))
  before = _pointers((p, m))
  step = jax.jit(_sgd_momentum, donate_argnums=(0, 1))
  got = jax.block_until_ready(step(p, m, xs))
  assert _pointers(got[:2]) == before
  assert not xs.is_deleted()  # not donated: still there, unchanged
  np.testing.assert_array_equal(np.asarray(xs), x)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)
  # A second step from the results (whose buffers are the first call's arguments) gives
  # the bits of the same step without donation.
  plain = jax.jit(_sgd_momentum)(*_put((jax.tree.map(np.asarray, got[:2]) + (x,))))
  again = step(got[0], got[1], xs)
  for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(plain)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_unaliased_and_non_donated_inputs():
  """x donated; y not: y's buffer is untouched, the result aliased to x is x's, the other
  result (same shape as y) gets a buffer of its own."""
  x_np = np.arange(12, dtype=np.float32).reshape(3, 4)
  y_np = np.ones((3, 4), np.float32) * 3
  x, y = _put((x_np, y_np))
  px, py = x.unsafe_buffer_pointer(), y.unsafe_buffer_pointer()
  a, b = jax.block_until_ready(jax.jit(lambda x, y: (x * y, y - 1), donate_argnums=0)(x, y))
  assert a.unsafe_buffer_pointer() == px
  assert b.unsafe_buffer_pointer() not in (px, py)
  np.testing.assert_array_equal(np.asarray(y), y_np)
  np.testing.assert_array_equal(np.asarray(a), x_np * y_np)
  np.testing.assert_array_equal(np.asarray(b), y_np - 1)


def test_sharded_donation_four_devices():
  mesh = jax.make_mesh((4,), ("x",), devices=jax.devices("workshop")[:4])
  sharding = NamedSharding(mesh, P("x"))
  x_np = np.arange(64, dtype=np.float32).reshape(16, 4)
  x = jax.block_until_ready(jax.device_put(x_np, sharding))
  before = {s.device.id: s.data.unsafe_buffer_pointer() for s in x.addressable_shards}
  y = jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) * 2 + x, donate_argnums=0)(x))
  assert y.sharding.is_equivalent_to(sharding, 2)
  after = {s.device.id: s.data.unsafe_buffer_pointer() for s in y.addressable_shards}
  assert after == before
  np.testing.assert_allclose(np.asarray(y), np.sin(x_np) * 2 + x_np, rtol=1e-6)


_PEAK = textwrap.dedent(
  """
  import jax, jax.numpy as jnp, numpy as np
  d = jax.devices("workshop")[0]
  params = {f"w{i}": jax.device_put(jnp.full((512, 512), 0.01 * i, jnp.float32), d)
            for i in range(8)}
  x = jax.device_put(jnp.ones((8, 512), jnp.float32), d)
  def step(params, x):
    def loss(p):
      h = x
      for k in sorted(p):
        h = jnp.tanh(h @ p[k])
      return (h ** 2).sum()
    g = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, g)
  jax.block_until_ready((params, x))
  new = jax.block_until_ready(jax.jit(step, donate_argnums=0)(params, x))
  print(d.memory_stats()["peak_bytes_in_use"])
  """
)


def test_training_step_peak_is_one_copy_of_parameters():
  """8 leaves of 1 MiB: parameters and gradients live at once (2 x 8 MiB), and the new
  parameters are written over the old (without that: 3 x 8 MiB at the update)."""
  env = dict(os.environ, JAX_PLATFORMS="workshop")
  out = subprocess.run(
    [sys.executable, "-c", _PEAK], env=env, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stderr[-2000:]
  peak = int(out.stdout.split()[-1])
  params = 8 << 20
  assert peak < 2 * params + params // 2, peak
