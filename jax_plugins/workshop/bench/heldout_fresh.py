"""A second set of held-out programs (`bench.heldout`'s group "fresh").

Written after the mechanisms of issue 36 were designed, by someone not tuning them, so that
the suite keeps programs no mechanism was shaped around: sequence models, a VAE, a
Gaussian process, mixture-of-experts routing, optimal transport, a particle filter, a GNN.
Each `make` returns (function to jit, numpy arguments), as bench/heldout.py's cases do;
sizes are those of a small training or inference step (1-50 ms on XLA:CPU, 2 cores).
"""

from __future__ import annotations

import numpy as np


def _rng(seed: int) -> np.random.Generator:
  return np.random.default_rng(seed)


def _f32(a) -> np.ndarray:
  return np.asarray(a, np.float32)


def causal_lm_step():
  """One SGD step of a 1-layer causal transformer LM: (4, 128) tokens, d 128, vocab 1000."""
  import jax
  import jax.numpy as jnp

  r = _rng(101)
  b, t, d, v, h = 4, 128, 128, 1000, 4
  params = {
    "emb": _f32(r.standard_normal((v, d)) * 0.02),
    "qkv": _f32(r.standard_normal((d, 3 * d)) / np.sqrt(d)),
    "o": _f32(r.standard_normal((d, d)) / np.sqrt(d)),
    "w1": _f32(r.standard_normal((d, 4 * d)) / np.sqrt(d)),
    "w2": _f32(r.standard_normal((4 * d, d)) / np.sqrt(4 * d)),
  }
  tokens = r.integers(0, v, (b, t + 1)).astype(np.int32)

  def loss(p, tokens):
    x = p["emb"][tokens[:, :-1]]
    q, k, vv = jnp.split(x @ p["qkv"], 3, -1)
    split = lambda a: a.reshape(b, t, h, d // h).transpose(0, 2, 1, 3)  # noqa: E731
    s = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(d // h)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    a = (jax.nn.softmax(s, -1) @ split(vv)).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + a @ p["o"]
    x = x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]
    logits = x @ p["emb"].T
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1))

  def step(p, tokens):
    g = jax.grad(loss)(p, tokens)
    return jax.tree.map(lambda w, gw: w - 0.1 * gw, p, g)

  return step, (params, tokens)


def vae_step():
  """VAE loss and gradient: 784-256-32 encoder/decoder, batch 64, reparameterized normal."""
  import jax
  import jax.numpy as jnp

  r = _rng(102)
  x = _f32(r.random((64, 784)))
  p = {
    "e1": _f32(r.standard_normal((784, 256)) / 28),
    "e2": _f32(r.standard_normal((256, 64)) / 16),
    "d1": _f32(r.standard_normal((32, 256)) / 6),
    "d2": _f32(r.standard_normal((256, 784)) / 16),
  }

  def loss(p, x, key):
    h = jax.nn.relu(x @ p["e1"])
    mu, logvar = jnp.split(h @ p["e2"], 2, -1)
    z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape)
    logits = jax.nn.relu(z @ p["d1"]) @ p["d2"]
    rec = jnp.sum(jnp.logaddexp(0.0, logits) - x * logits, -1)
    kl = -0.5 * jnp.sum(1 + logvar - mu**2 - jnp.exp(logvar), -1)
    return jnp.mean(rec + kl)

  def step(p, x):
    return jax.value_and_grad(loss)(p, x, jax.random.key(0))

  return step, (p, x)


def lstm_scan():
  """LSTM over 50 steps, batch 32, input 64, hidden 128 (lax.scan), summed hidden states."""
  import jax
  import jax.numpy as jnp

  r = _rng(103)
  xs = _f32(r.standard_normal((50, 32, 64)))
  w = _f32(r.standard_normal((64 + 128, 4 * 128)) / 12)
  bias = _f32(np.zeros(4 * 128))

  def run(xs, w, bias):
    def cell(carry, x):
      h, c = carry
      i, f, g, o = jnp.split(jnp.concatenate([x, h], -1) @ w + bias, 4, -1)
      c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
      h = jax.nn.sigmoid(o) * jnp.tanh(c)
      return (h, c), h

    zeros = jnp.zeros((32, 128), jnp.float32)
    (h, _), hs = jax.lax.scan(cell, (zeros, zeros), xs)
    return h, hs.sum(0)

  return run, (xs, w, bias)


def neural_ode():
  """Euler integration of a tanh MLP vector field (64-128-64), 100 steps, batch 256."""
  import jax
  import jax.numpy as jnp

  r = _rng(104)
  x0 = _f32(r.standard_normal((256, 64)))
  w1 = _f32(r.standard_normal((64, 128)) / 8)
  w2 = _f32(r.standard_normal((128, 64)) / 11)

  def solve(x, w1, w2):
    return jax.lax.fori_loop(0, 100, lambda _, x: x + 0.01 * jnp.tanh(x @ w1) @ w2, x)

  return solve, (x0, w1, w2)


def gp_marginal_likelihood():
  """Gaussian-process log marginal likelihood and its gradient in the length scale (n 512)."""
  import jax
  import jax.numpy as jnp

  r = _rng(105)
  x = r.standard_normal((512, 3))
  y = np.sin(x[:, 0]) + 0.1 * r.standard_normal(512)

  def nll(log_ls, x, y):
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    k = jnp.exp(-0.5 * d2 / jnp.exp(2 * log_ls)) + 1e-2 * jnp.eye(x.shape[0])
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return 0.5 * y @ alpha + jnp.log(jnp.diag(chol)).sum()

  return jax.value_and_grad(nll), (np.float32(0.0), _f32(x), _f32(y))


def moe_layer():
  """Top-2 mixture-of-experts layer: 1024 tokens, d 128, 8 experts of 256, softmax gating."""
  import jax
  import jax.numpy as jnp

  r = _rng(106)
  x = _f32(r.standard_normal((1024, 128)))
  wg = _f32(r.standard_normal((128, 8)) / 11)
  w1 = _f32(r.standard_normal((8, 128, 256)) / 11)
  w2 = _f32(r.standard_normal((8, 256, 128)) / 16)

  def layer(x, wg, w1, w2):
    gates, idx = jax.lax.top_k(jax.nn.softmax(x @ wg), 2)
    onehot = jax.nn.one_hot(idx, 8) * gates[..., None]  # (tokens, 2, experts)
    combine = onehot.sum(1)  # (tokens, experts)
    h = jax.nn.gelu(jnp.einsum("td,edf->etf", x, w1))
    y = jnp.einsum("etf,efd->etd", h, w2)
    return jnp.einsum("te,etd->td", combine, y)

  return layer, (x, wg, w1, w2)


def sinkhorn():
  """Entropic optimal transport: 100 log-domain Sinkhorn iterations, 512 x 512 costs."""
  import jax
  import jax.numpy as jnp
  from jax.scipy.special import logsumexp

  r = _rng(107)
  a, b = r.standard_normal((512, 2)), r.standard_normal((512, 2)) + 1.0
  cost = _f32(((a[:, None] - b[None]) ** 2).sum(-1))

  def solve(cost):
    eps, n = 0.05, cost.shape[0]
    logw = -jnp.log(n) * jnp.ones(n, jnp.float32)

    def it(_, fg):
      f, g = fg
      f = -eps * logsumexp((g[None, :] - cost) / eps + logw[None, :], 1)
      g = -eps * logsumexp((f[:, None] - cost) / eps + logw[:, None], 0)
      return f, g

    z = jnp.zeros(n, jnp.float32)
    f, g = jax.lax.fori_loop(0, 100, it, (z, z))
    return jnp.sum(jnp.exp((f[:, None] + g[None, :] - cost) / eps) * cost) / n**2

  return solve, (cost,)


def particle_filter():
  """Bootstrap particle filter: 50 steps of propagate, weight, resample; 4096 particles."""
  import jax
  import jax.numpy as jnp

  obs = _f32(np.cumsum(_rng(108).standard_normal(50)) * 0.5)

  def run(obs, key):
    def step(carry, y):
      x, key = carry
      key, k1, k2 = jax.random.split(key, 3)
      x = 0.9 * x + 0.5 * jax.random.normal(k1, x.shape)
      logw = -0.5 * (y - x) ** 2
      w = jax.nn.softmax(logw)
      u = (jax.random.uniform(k2) + jnp.arange(x.shape[0])) / x.shape[0]
      idx = jnp.clip(jnp.searchsorted(jnp.cumsum(w), u), 0, x.shape[0] - 1)
      return (x[idx], key), jnp.sum(w * x)

    _, means = jax.lax.scan(step, (jnp.zeros(4096, jnp.float32), key), obs)
    return means

  def fn(obs):
    return run(obs, jax.random.key(1))

  return fn, (obs,)


def gcn_layer_grad():
  """Two graph-convolution layers and their gradient: 4096 nodes, 32768 edges, 64 features."""
  import jax
  import jax.numpy as jnp

  r = _rng(109)
  n, e, f = 4096, 32768, 64
  src, dst = r.integers(0, n, e).astype(np.int32), r.integers(0, n, e).astype(np.int32)
  x = _f32(r.standard_normal((n, f)))
  w1, w2 = _f32(r.standard_normal((f, f)) / 8), _f32(r.standard_normal((f, 16)) / 8)
  deg = np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float32)

  def loss(w1, w2, x, src, dst, deg):
    def conv(h, w):
      msg = (h @ w)[src]
      return jax.ops.segment_sum(msg, dst, num_segments=n) / deg[:, None]

    h = jax.nn.relu(conv(x, w1))
    return jnp.mean(conv(h, w2) ** 2)

  return jax.grad(loss, argnums=(0, 1)), (w1, w2, x, src, dst, deg)


def ridge_cv():
  """Ridge regression over 16 penalties by batched solves of 256x256 normal equations."""
  import jax.numpy as jnp

  r = _rng(110)
  x, y = _f32(r.standard_normal((4096, 256))), _f32(r.standard_normal(4096))
  lams = _f32(np.logspace(-3, 2, 16))

  def fit(x, y, lams):
    g = x.T @ x
    rhs = jnp.broadcast_to(x.T @ y, (lams.shape[0], x.shape[1]))
    a = g[None] + lams[:, None, None] * jnp.eye(x.shape[1])
    w = jnp.linalg.solve(a, rhs[..., None])[..., 0]
    return jnp.mean((x @ w.T - y[:, None]) ** 2, 0)

  return fit, (x, y, lams)


def rope_attention_bf16():
  """Inference attention with rotary embeddings in bfloat16: (2, 8 heads, 256, 64)."""
  import jax
  import jax.numpy as jnp
  import ml_dtypes

  r = _rng(111)
  q, k, v = (r.standard_normal((2, 8, 256, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))

  def attend(q, k, v):
    t, dh = q.shape[-2], q.shape[-1]
    freq = 1.0 / 10000 ** (jnp.arange(0, dh, 2, dtype=jnp.float32) / dh)
    ang = jnp.arange(t, dtype=jnp.float32)[:, None] * freq[None]
    cos, sin = jnp.cos(ang).astype(q.dtype), jnp.sin(ang).astype(q.dtype)

    def rope(z):
      z1, z2 = z[..., ::2], z[..., 1::2]
      return jnp.concatenate([z1 * cos - z2 * sin, z1 * sin + z2 * cos], -1)

    s = rope(q) @ rope(k).swapaxes(-1, -2) / np.sqrt(dh).astype(np.float32)
    return jax.nn.softmax(s.astype(jnp.float32), -1).astype(q.dtype) @ v

  return attend, (q, k, v)


def mlp_latency_batch1():
  """Inference latency: batch-1 LayerNorm + 4-layer GELU MLP of width 512."""
  import jax
  import jax.numpy as jnp

  r = _rng(112)
  x = _f32(r.standard_normal((1, 512)))
  ws = [_f32(r.standard_normal((512, 512)) / 22) for _ in range(4)]

  def run(x, ws):
    for w in ws:
      mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
      x = x + jax.nn.gelu(((x - mu) / jnp.sqrt(var + 1e-5)) @ w)
    return x

  return run, (x, ws)


# (name, what, make, relative tolerance of the two backends' agreement)
FRESH = [
  ("causal_lm_step", "1-layer causal LM SGD step, 4x128 tokens, vocab 1000", causal_lm_step, 2e-3),
  ("vae_step", "VAE loss + grad, 784-256-32, batch 64", vae_step, 2e-3),
  ("lstm_scan", "LSTM 50 steps, batch 32, hidden 128", lstm_scan, 2e-3),
  ("neural_ode", "Euler 100 steps of a tanh MLP field, 256x64", neural_ode, 2e-3),
  ("gp_nll", "GP marginal likelihood + grad, n 512 (Cholesky)", gp_marginal_likelihood, 1e-2),
  ("moe_layer", "top-2 MoE, 1024 tokens, 8 experts", moe_layer, 2e-3),
  ("sinkhorn", "100 log-domain Sinkhorn iterations, 512x512", sinkhorn, 2e-3),
  # Resampling is discontinuous: a last-bit difference in the weights' cumsum (the plugin's
  # is the more accurate against float64) picks another particle, and the runs drift apart
  # from there (equal for the first 3 steps, 1e-2 of the largest mean after 50).
  ("particle_filter", "50 steps, 4096 particles, systematic resampling", particle_filter, 3e-2),
  ("gcn_grad", "2 GCN layers + grad, 4096 nodes, 32768 edges", gcn_layer_grad, 2e-3),
  ("ridge_cv", "16 ridge solves of 256x256 normal equations", ridge_cv, 1e-2),
  ("rope_attention_bf16", "RoPE attention in bf16, 2x8x256x64", rope_attention_bf16, 3e-2),
  ("mlp_latency_b1", "batch-1 LN + GELU MLP, 4 layers of 512", mlp_latency_batch1, 2e-3),
]
