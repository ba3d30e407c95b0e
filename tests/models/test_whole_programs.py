"""Whole JAX programs of the op-coverage issue, each compared with JAX's CPU backend."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import assert_matches_cpu
from op_samples import vertical_slice
from op_samples import x64_each  # noqa: F401  (the fixture `vertical_slice` tests use)

RNG = np.random.default_rng(0)


def _layer_norm(x, eps=1e-5):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / jnp.sqrt(x.var(-1, keepdims=True) + eps)


def _transformer_block(x, wq, wk, wv, wo, w1, w2):
  """Pre-norm block: causal (masked) single-head attention, then an MLP."""
  h = _layer_norm(x)
  q, k, v = h @ wq, h @ wk, h @ wv
  scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  mask = jnp.tril(jnp.ones(scores.shape[-2:], bool))
  attn = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
  x = x + (attn @ v) @ wo
  return x + jax.nn.gelu(_layer_norm(x) @ w1) @ w2


def _weights(d, hidden):
  shapes = [(d, d)] * 4 + [(d, hidden), (hidden, d)]
  return [(RNG.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]


def test_transformer_block_forward():
  # f32 GEMMs summed in another order, through softmax and layer norm: 1e-4 relative.
  x = RNG.standard_normal((2, 16, 32)).astype(np.float32)
  assert_matches_cpu(_transformer_block, x, *_weights(32, 64), rtol=1e-4, atol=1e-5)


def test_transformer_block_gradient():
  x = RNG.standard_normal((2, 8, 16)).astype(np.float32)
  loss = lambda *a: jnp.sum(_transformer_block(*a) ** 2)
  assert_matches_cpu(jax.grad(loss, argnums=(0, 1, 5)), x, *_weights(16, 32), rtol=2e-4, atol=1e-4)


def test_vmapped_transformer_block():
  x = RNG.standard_normal((3, 2, 8, 16)).astype(np.float32)
  f = jax.vmap(_transformer_block, in_axes=(0,) + (None,) * 6)
  assert_matches_cpu(f, x, *_weights(16, 32), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [3, 8])
def test_linalg_solve_and_inv(n):
  a = RNG.standard_normal((n, n)) + n * np.eye(n)
  b = RNG.standard_normal((n, 2))
  with jax.enable_x64(True):
    # LU with partial pivoting in both; f64 leaves room for the different pivot arithmetic.
    assert_matches_cpu(jnp.linalg.solve, a, b, rtol=1e-10, atol=1e-12)
    assert_matches_cpu(jnp.linalg.inv, a, rtol=1e-10, atol=1e-12)


def test_cholesky_of_a_gram_matrix():
  m = RNG.standard_normal((6, 6)).astype(np.float32)
  assert_matches_cpu(
    jnp.linalg.cholesky, m @ m.T + 6 * np.eye(6, dtype=np.float32), rtol=1e-5, atol=1e-5
  )


@pytest.mark.parametrize(
  "name,sample",
  [
    ("normal", lambda k: jax.random.normal(k, (64,))),
    ("uniform", lambda k: jax.random.uniform(k, (64,))),
    (
      "categorical",
      lambda k: jax.random.categorical(k, jnp.log(jnp.arange(1.0, 6.0)), shape=(64,)),
    ),
    ("permutation", lambda k: jax.random.permutation(k, 50)),
    ("bernoulli", lambda k: jax.random.bernoulli(k, 0.3, (64,))),
  ],
)
def test_jax_random(name, sample):
  # Same key, same bits: threefry is plain integer arithmetic; floats within 1 ulp of math.
  assert_matches_cpu(lambda seed: sample(jax.random.key(seed)), np.uint32(7), rtol=1e-6, atol=1e-7)


def test_argsort_top_k_and_cumsum():
  x = RNG.standard_normal((4, 33)).astype(np.float32)
  assert_matches_cpu(
    lambda x: (jnp.argsort(x, axis=-1), jax.lax.top_k(x, 5), jnp.cumsum(x, axis=1)),
    x,
    rtol=1e-5,
    atol=1e-6,
  )


def test_scan_fori_and_while():
  x = RNG.standard_normal(16).astype(np.float32)

  def f(x):
    carry, ys = jax.lax.scan(lambda c, v: (c * 0.5 + v, c), 0.0, x)
    total = jax.lax.fori_loop(0, 10, lambda i, acc: acc + i * x, jnp.zeros_like(x))
    steps = jax.lax.while_loop(
      lambda s: s[0] < 100.0, lambda s: (s[0] * 2 + 1, s[1] + 1), (jnp.float32(1), jnp.int32(0))
    )
    return carry, ys, total, steps

  assert_matches_cpu(f, x, rtol=1e-6, atol=1e-6)


# ---- whole programs ----


def mlp_params(seed=28):
  rng = np.random.default_rng(seed)
  shapes = [(16, 32), (32,), (32, 10), (10,)]
  return [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]


def mlp(params, x):
  w1, b1, w2, b2 = params
  h = jnp.tanh(x @ w1 + b1)
  return jax.nn.softmax(h @ w2 + b2, axis=-1)


@vertical_slice
def test_mlp_forward():
  x = np.random.default_rng(29).standard_normal((8, 16)).astype(np.float32)
  ours = assert_matches_cpu(mlp, mlp_params(), x, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ours.sum(axis=-1), 1, rtol=1e-5)


@vertical_slice
def test_mlp_grad():
  x = np.random.default_rng(30).standard_normal((8, 16)).astype(np.float32)
  labels = np.arange(8) % 10

  def loss(params, x):
    # one_hot rather than probs[i, labels]: gather is outside the slice.
    probs = mlp(params, x)
    return -jnp.mean(jnp.sum(jnp.log(probs) * jax.nn.one_hot(labels, 10), axis=-1))

  # Gradients of O(0.1) summed over a batch of 8: a few f32 ulps of the largest entry.
  assert_matches_cpu(jax.value_and_grad(loss), mlp_params(), x, rtol=1e-5, atol=1e-6)
