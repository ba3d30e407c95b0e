"""A third set of held-out programs (`bench.heldout`'s group "third").

Written from outside the repo, as a user would, to find what the first two sets miss:
training steps of other model families (a transformer encoder layer, a CNN, a depthwise
separable block, WaveNet's gated dilated convolutions, a ViT patch embedding), samplers
(Ising Gibbs sweeps, a DDPM sampling loop, LSTM character sampling), solvers (Newton with
`solve`, conjugate gradients, a heat stencil, a linear recurrence by `associative_scan`),
an RL loss, word2vec, a graph attention layer, AdamW with clipping and an EM step. The
mechanisms for slices and concatenates in fusions and shared constants were found on
them (docs/performance.md). Each `make` returns
(function to jit, numpy arguments); sizes are a small step (1-100 ms on XLA:CPU, 2 cores).
"""

from __future__ import annotations

import numpy as np


def _normal(r: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
  return (r.standard_normal(shape) * scale).astype(np.float32)


def _layer_norm(x, g):
  import jax

  m = x.mean(-1, keepdims=True)
  v = ((x - m) ** 2).mean(-1, keepdims=True)
  return (x - m) * jax.lax.rsqrt(v + 1e-5) * g


def transformer_encoder_step():
  """SGD step of a pre-LN encoder layer: (8, 128, 256), 4 heads, MLP 1024."""
  import jax

  r = np.random.default_rng(201)
  b, s, d, h = 8, 128, 256, 4
  p = {
    "g1": np.ones(d, np.float32),
    "g2": np.ones(d, np.float32),
    "qkv": _normal(r, d, 3 * d, scale=1 / 16),
    "o": _normal(r, d, d, scale=1 / 16),
    "w1": _normal(r, d, 4 * d, scale=1 / 16),
    "w2": _normal(r, 4 * d, d, scale=1 / 32),
  }

  def layer(p, x):
    q, k, v = jax.numpy.split(_layer_norm(x, p["g1"]) @ p["qkv"], 3, -1)
    heads = lambda t: t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)  # noqa: E731
    a = jax.nn.softmax(heads(q) @ heads(k).transpose(0, 1, 3, 2) / 8.0, -1) @ heads(v)
    x = x + a.transpose(0, 2, 1, 3).reshape(b, s, d) @ p["o"]
    return x + jax.nn.gelu(_layer_norm(x, p["g2"]) @ p["w1"]) @ p["w2"]

  def step(p, x):
    g = jax.grad(lambda p: (layer(p, x) ** 2).mean())(p)
    return jax.tree.map(lambda w, gw: w - 1e-2 * gw, p, g)

  return step, (p, _normal(r, b, s, d))


def cnn_train_step():
  """SGD step of conv 3x3 (3->32), max-pool, conv 3x3 (32->64), global mean, dense; 16x32x32."""
  import jax
  from jax import lax

  r = np.random.default_rng(202)
  dn = ("NHWC", "HWIO", "NHWC")
  p = {"c1": _normal(r, 3, 3, 3, 32, scale=0.2), "c2": _normal(r, 3, 3, 32, 64, scale=0.06)}
  p["d"] = _normal(r, 64, 10, scale=0.125)
  x, labels = _normal(r, 16, 32, 32, 3), r.integers(0, 10, 16)
  y = np.eye(10, dtype=np.float32)[labels]

  def loss(p, x, y):
    h = jax.nn.relu(lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
    h = lax.reduce_window(h, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(lax.conv_general_dilated(h, p["c2"], (1, 1), "SAME", dimension_numbers=dn))
    return -(jax.nn.log_softmax(h.mean((1, 2)) @ p["d"]) * y).sum(-1).mean()

  def step(p, x, y):
    return jax.tree.map(lambda w, gw: w - 0.1 * gw, p, jax.grad(loss)(p, x, y))

  return step, (p, x, y)


def depthwise_separable():
  """MobileNet block: depthwise 3x3 (64 groups), relu6, pointwise 64->128, relu6; 8x56x56."""
  import jax
  from jax import lax

  r = np.random.default_rng(203)

  def block(x, dw, pw):
    dn = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(
      x, dw, (1, 1), "SAME", dimension_numbers=dn, feature_group_count=64
    )
    return jax.nn.relu6(jax.nn.relu6(h) @ pw)

  return block, (
    _normal(r, 8, 56, 56, 64),
    _normal(r, 3, 3, 1, 64, scale=0.3),
    _normal(r, 64, 128, scale=0.125),
  )


def wavenet_stack():
  """Six gated dilated causal 1-D convolutions (dilation 1..32) with residuals, 4x2048x32."""
  import jax
  from jax import lax

  r = np.random.default_rng(204)

  def net(x, ws):
    for i, w in enumerate(ws):
      h = lax.conv_general_dilated(
        x, w, (1,), [(2**i, 0)], rhs_dilation=(2**i,), dimension_numbers=("NWC", "WIO", "NWC")
      )
      a, g = jax.numpy.split(h, 2, -1)
      x = x + jax.numpy.tanh(a) * jax.nn.sigmoid(g)
    return x

  return net, (_normal(r, 4, 2048, 32), [_normal(r, 2, 32, 64, scale=0.125) for _ in range(6)])


def linear_recurrence_scan():
  """h_t = a_t h_{t-1} + b_t over 2048 steps of 256 channels by `associative_scan`."""
  from jax import lax

  r = np.random.default_rng(205)

  def scan(a, b):
    combine = lambda x, y: (x[0] * y[0], y[0] * x[1] + y[1])  # noqa: E731
    return lax.associative_scan(combine, (a, b), axis=0)[1]

  return scan, (np.exp(-np.abs(_normal(r, 2048, 256))), _normal(r, 2048, 256))


def newton_logistic():
  """Eight Newton steps of L2 logistic regression, 4096x64: Hessian and `solve` each step."""
  import jax
  from jax import lax

  r = np.random.default_rng(206)
  x, y = _normal(r, 4096, 64), (r.random(4096) > 0.5).astype(np.float32)

  def newton(w, x, y):
    def step(_, w):
      p = jax.nn.sigmoid(x @ w)
      g = x.T @ (p - y) + 1e-2 * w
      hess = (x * (p * (1 - p))[:, None]).T @ x + 1e-2 * jax.numpy.eye(64)
      return w - jax.numpy.linalg.solve(hess, g)

    return lax.fori_loop(0, 8, step, w)

  return newton, (np.zeros(64, np.float32), x, y)


def conjugate_gradient():
  """50 conjugate-gradient steps on a 1024x1024 SPD matrix the program closes over."""
  import jax.numpy as jnp
  from jax import lax

  r = np.random.default_rng(207)
  m = _normal(r, 1024, 1024)
  a = (m @ m.T / 1024 + np.eye(1024)).astype(np.float32)

  def cg(b):
    def step(_, s):
      x, res, p, rs = s
      ap = a @ p
      alpha = rs / (p @ ap)
      x, res = x + alpha * p, res - alpha * ap
      rn = res @ res
      return x, res, res + rn / rs * p, rn

    return lax.fori_loop(0, 50, step, (jnp.zeros_like(b), b, b, b @ b))[0]

  return cg, (_normal(r, 1024),)


def ising_gibbs():
  """64 checkerboard Gibbs sweeps of a 128x128 Ising model (rolls, uniform noise)."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  r = np.random.default_rng(208)

  def sample(s):
    mask = (jnp.arange(128)[:, None] + jnp.arange(128)[None]) % 2 == 0

    def sweep(s, key):
      for m, k in zip((mask, ~mask), jax.random.split(key)):
        nb = jnp.roll(s, 1, 0) + jnp.roll(s, -1, 0) + jnp.roll(s, 1, 1) + jnp.roll(s, -1, 1)
        new = jnp.where(jax.random.uniform(k, s.shape) < jax.nn.sigmoid(0.8 * nb), 1.0, -1.0)
        s = jnp.where(m, new, s)
      return s, s.mean()

    return lax.scan(sweep, s, jax.random.split(jax.random.key(3), 64))

  return sample, (np.sign(_normal(r, 128, 128)),)


def ppo_loss_grad():
  """Gradient of PPO's clipped loss with an entropy bonus: 2048 steps, MLP 64-256-18."""
  import jax
  import jax.numpy as jnp

  r = np.random.default_rng(209)
  p = {"w1": _normal(r, 64, 256, scale=0.125), "w2": _normal(r, 256, 18, scale=1 / 16)}
  obs, act = _normal(r, 2048, 64), r.integers(0, 18, 2048).astype(np.int32)
  adv, old = _normal(r, 2048), -np.abs(_normal(r, 2048))

  def loss(p, obs, act, adv, old):
    lp = jax.nn.log_softmax(jnp.tanh(obs @ p["w1"]) @ p["w2"])
    ratio = jnp.exp(jnp.take_along_axis(lp, act[:, None], 1)[:, 0] - old)
    entropy = -(jnp.exp(lp) * lp).sum(-1).mean()
    return -jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv).mean() - 0.01 * entropy

  return jax.grad(loss), (p, obs, act, adv, old)


def word2vec_step():
  """Skip-gram negative sampling SGD step: 1024 pairs, 5 negatives, 50000x128 tables."""
  import jax

  r = np.random.default_rng(210)
  emb, ctx = _normal(r, 50000, 128, scale=0.1), _normal(r, 50000, 128, scale=0.1)
  c, o = r.integers(0, 50000, 1024).astype(np.int32), r.integers(0, 50000, 1024).astype(np.int32)
  neg = r.integers(0, 50000, (1024, 5)).astype(np.int32)

  def step(emb, ctx, c, o, neg):
    def loss(emb, ctx):
      e = emb[c]
      pos = jax.nn.log_sigmoid((e * ctx[o]).sum(-1))
      return -(pos + jax.nn.log_sigmoid(-(ctx[neg] * e[:, None]).sum(-1)).sum(-1)).mean()

    ge, gc = jax.grad(loss, (0, 1))(emb, ctx)
    return emb - 0.1 * ge, ctx - 0.1 * gc

  return step, (emb, ctx, c, o, neg)


def graph_attention():
  """A GAT layer: 4096 nodes, 32768 edges, edge softmax by segment max and sum."""
  import jax
  import jax.numpy as jnp

  r = np.random.default_rng(211)
  n = 4096
  src, dst = r.integers(0, n, 32768).astype(np.int32), r.integers(0, n, 32768).astype(np.int32)

  def gat(h, w, a, src, dst):
    z = h @ w
    e = jax.nn.leaky_relu((z[src] * a[:64]).sum(-1) + (z[dst] * a[64:]).sum(-1), 0.2)
    ex = jnp.exp(e - jax.ops.segment_max(e, dst, n)[dst])
    att = ex / jax.ops.segment_sum(ex, dst, n)[dst]
    return jax.ops.segment_sum(att[:, None] * z[src], dst, n)

  return gat, (
    _normal(r, n, 64),
    _normal(r, 64, 64, scale=0.125),
    _normal(r, 128, scale=0.125),
    src,
    dst,
  )


def adamw_clipped():
  """AdamW with global-norm clipping over 50 leaves of 500-100K floats."""
  import jax.numpy as jnp

  r = np.random.default_rng(212)
  leaves = [_normal(r, int(k)) for k in r.integers(500, 100000, 50)]

  def update(p, g, m, v):
    norm = jnp.sqrt(sum(jnp.sum(x * x) for x in g))
    g = [x * jnp.minimum(1.0, 1.0 / (norm + 1e-6)) for x in g]
    m = [0.9 * a + 0.1 * b for a, b in zip(m, g)]
    v = [0.999 * a + 0.001 * b * b for a, b in zip(v, g)]
    new = [x - 1e-3 * (a / (jnp.sqrt(b) + 1e-8) + 0.01 * x) for x, a, b in zip(p, m, v)]
    return new, m, v

  return update, (leaves, leaves, leaves, [np.abs(x) for x in leaves])


def ddpm_sampler():
  """50 DDPM sampling steps of 4096 2-D points, an MLP 3-128-128-2 denoiser with SiLU."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  r = np.random.default_rng(213)
  w1, w2, w3 = (
    _normal(r, 3, 128, scale=0.5),
    _normal(r, 128, 128, scale=0.09),
    _normal(r, 128, 2, scale=0.09),
  )

  def sample(x, w1, w2, w3):
    def step(x, a):
      t, k = a
      h = jnp.concatenate([x, jnp.full((x.shape[0], 1), t / 50.0)], 1)
      eps = jax.nn.silu(jax.nn.silu(h @ w1) @ w2) @ w3
      return (x - 0.02 * eps) / 0.99 + 0.1 * jax.random.normal(k, x.shape), None

    keys = jax.random.split(jax.random.key(5), 50)
    return lax.scan(step, x, (jnp.arange(50.0)[::-1], keys))[0]

  return sample, (_normal(r, 4096, 2), w1, w2, w3)


def heat_stencil():
  """300 explicit steps of the 2-D heat equation on 256x256 (a 5-point stencil by rolls)."""
  import jax.numpy as jnp
  from jax import lax

  r = np.random.default_rng(214)

  def run(u):
    def step(_, u):
      lap = jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1) + jnp.roll(u, -1, 1) - 4 * u
      return u + 0.1 * lap

    return lax.fori_loop(0, 300, step, u)

  return run, (_normal(r, 256, 256),)


def gmm_em_step():
  """One EM step of a 16-component diagonal Gaussian mixture on 16384x8 points."""
  import jax
  import jax.numpy as jnp

  r = np.random.default_rng(215)

  def em(x, mu, log_var, log_w):
    ll = -0.5 * (((x[:, None] - mu[None]) ** 2) * jnp.exp(-log_var)[None] + log_var[None]).sum(-1)
    ll = ll + log_w[None]
    resp = jnp.exp(ll - jax.nn.logsumexp(ll, -1, keepdims=True))
    nk = resp.sum(0)
    mu2 = resp.T @ x / nk[:, None]
    var = resp.T @ (x * x) / nk[:, None] - mu2**2
    return mu2, jnp.log(var + 1e-6), jnp.log(nk / x.shape[0])

  args = (_normal(r, 16384, 8), _normal(r, 16, 8), np.zeros((16, 8), np.float32))
  return em, (*args, np.full(16, -np.log(16), np.float32))


def vit_patch_attention():
  """ViT front: 16x16 patches of 16 224x224 images, embed 768->256, LN, one attention."""
  import jax

  r = np.random.default_rng(216)

  def front(x, w, g):
    p = x.reshape(16, 14, 16, 14, 16, 3).transpose(0, 1, 3, 2, 4, 5).reshape(16, 196, 768)
    h = _layer_norm(p @ w, g)
    return jax.nn.softmax(h @ h.transpose(0, 2, 1) / 16, -1) @ h

  return front, (
    _normal(r, 16, 224, 224, 3),
    _normal(r, 768, 256, scale=1 / 28),
    np.ones(256, np.float32),
  )


def bf16_mlp():
  """bf16 inference: three 1024x1024 layers with GELU, batch 256."""
  import jax
  import ml_dtypes

  r = np.random.default_rng(217)
  bf = lambda a: a.astype(ml_dtypes.bfloat16)  # noqa: E731
  ws = [bf(_normal(r, 1024, 1024, scale=1 / 32)) for _ in range(3)]

  def mlp(x, a, b, c):
    return jax.nn.gelu(jax.nn.gelu(x @ a) @ b) @ c

  return mlp, (bf(_normal(r, 256, 1024)), *ws)


def lstm_char_sampling():
  """100 steps of batch-1 LSTM character sampling (hidden 256, 64 symbols, categorical)."""
  import jax
  import jax.numpy as jnp
  from jax import lax

  r = np.random.default_rng(218)

  def generate(w, wo):
    def step(s, k):
      h, c, x = s
      i, f, g, o = jnp.split(jnp.concatenate([x, h]) @ w, 4)
      c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
      h = jax.nn.sigmoid(o) * jnp.tanh(c)
      t = jax.random.categorical(k, h @ wo)
      return (h, c, jax.nn.one_hot(t, 64)), t

    init = (jnp.zeros(256), jnp.zeros(256), jnp.zeros(64))
    return lax.scan(step, init, jax.random.split(jax.random.key(7), 100))[1]

  return generate, (_normal(r, 320, 1024, scale=1 / 16), _normal(r, 256, 64, scale=1 / 16))


# (name, what, make, rtol): rtol bounds the largest difference from the CPU backend,
# relative to the result's largest magnitude.
THIRD = [
  (
    "transformer_encoder",
    "pre-LN encoder layer SGD step, 8x128x256",
    transformer_encoder_step,
    2e-3,
  ),
  ("cnn_train_step", "conv-pool-conv-dense SGD step, 16x32x32x3", cnn_train_step, 2e-3),
  ("depthwise_separable", "depthwise 3x3 + pointwise, 8x56x56x64", depthwise_separable, 2e-3),
  ("wavenet", "6 gated dilated causal convs, 4x2048x32", wavenet_stack, 2e-3),
  ("linear_recurrence", "associative_scan of 2048 steps x 256", linear_recurrence_scan, 2e-3),
  ("newton_logistic", "8 Newton steps with solve, 4096x64", newton_logistic, 1e-2),
  ("conjugate_gradient", "50 CG steps, 1024x1024 closed over", conjugate_gradient, 1e-2),
  # Spins are +-1 picked by comparing noise with a probability: exact on both backends.
  ("ising_gibbs", "64 Gibbs sweeps, 128x128 Ising", ising_gibbs, 1e-6),
  ("ppo_grad", "PPO clipped loss + entropy grad, 2048 steps", ppo_loss_grad, 2e-3),
  ("word2vec", "negative-sampling SGD step, 50000x128", word2vec_step, 2e-3),
  ("graph_attention", "GAT layer, 4096 nodes, 32768 edges", graph_attention, 2e-3),
  ("adamw_clipped", "AdamW + global-norm clip, 50 leaves", adamw_clipped, 2e-3),
  ("ddpm_sampler", "50 DDPM steps, 4096 points, MLP denoiser", ddpm_sampler, 1e-2),
  ("heat_stencil", "300 heat steps by rolls, 256x256", heat_stencil, 2e-3),
  ("gmm_em", "EM step, 16 diagonal Gaussians, 16384x8", gmm_em_step, 2e-3),
  ("vit_front", "ViT patch embed + LN + attention, 16x224x224", vit_patch_attention, 2e-3),
  ("bf16_mlp", "bf16 MLP 3x1024, batch 256", bf16_mlp, 3e-2),
  # Sampled symbols: the same on both backends unless a logit differs in its last bits
  # at a near-tie (none at this seed).
  ("lstm_char_sampling", "100 steps of batch-1 LSTM sampling", lstm_char_sampling, 1e-6),
]
