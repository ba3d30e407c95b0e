"""Model-like programs that the benchmark suite's cases do not contain, timed on
`workshop` against JAX's CPU backend in one process, with a sweep over core counts.

    python -m jax_plugins.workshop.bench.heldout                 # every case, this process
    python -m jax_plugins.workshop.bench.heldout --cores 2,4,8,13 --out results.json
    python -m jax_plugins.workshop.bench.heldout --list

Each group gets its own geometric mean. `heldout`: training and inference
steps, a recurrent scan, an ODE solver, samplers, optimizers over pytrees, chosen to
exercise the general mechanisms (fusion of reductions with their producers, the thread
pool's part counts, loops, many small kernels) rather than any one kernel. The `fresh` group
(heldout_fresh.py: sequence models, a VAE, a Gaussian process, mixture of experts, optimal
transport, a particle filter, a GNN) was written after those mechanisms, to keep programs no
mechanism was shaped around; its geometric mean is reported apart, as is the `third`
group's (heldout_third.py: programs written from outside the repo, on which the later
mechanisms were found: other model families, samplers, solvers). The `issue`
group holds the examples of issue 36 (logsumexp over a vocabulary, Adam over 100 leaves, a
k-means step, an HMC sampler, a KV-cache decode loop), reported apart. The `ops` group
(heldout_ops.py) holds single ops and idioms at unusual shapes (argmax over rows of 4, a
tril mask, rounding), where one slow kernel is not hidden among others. Each case is timed
with bench/timing.py (both backends
interleaved, median of repetitions) after one check that the two backends agree; each
case's compile time (trace, lower, compile on a fresh jit) is reported beside it.

`--cores K1,K2,...` re-runs this module once per K under `taskset -c 0-(K-1)` (the first
K CPUs of this process's affinity mask) and prints one table: the workshop/cpu ratio of
every case at every core count, the geometric means, and each backend's time at the
smallest K over its time at the largest (how it scales: above 1 is faster on more cores).
Times are seconds per call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import heldout_fresh, heldout_ops, heldout_third


@dataclass(frozen=True)
class Case:
  name: str
  group: str  # "heldout", "fresh" (heldout_fresh.py), "third" (heldout_third.py), "issue"
  # or "ops" (heldout_ops.py)
  what: str
  make: Callable[[], tuple[Callable, tuple]]  # -> (function to jit, numpy arguments)
  rtol: float = 2e-3


def _rng(seed: int) -> np.random.Generator:
  return np.random.default_rng(seed)


def _f32(a) -> np.ndarray:
  return np.asarray(a, np.float32)


# ---- held-out programs ------------------------------------------------------------------


def _mlp_train_step():
  import jax
  import jax.numpy as jnp

  r = _rng(1)
  sizes = [256, 512, 512, 10]
  params = [
    (_f32(r.standard_normal((a, b)) / math.sqrt(a)), _f32(np.zeros(b)))
    for a, b in zip(sizes, sizes[1:])
  ]
  x, y = _f32(r.standard_normal((128, 256))), r.integers(0, 10, 128).astype(np.int32)

  def loss(params, x, y):
    h = x
    for w, b in params[:-1]:
      h = jax.nn.relu(h @ w + b)
    logits = h @ params[-1][0] + params[-1][1]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

  def step(params, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    return l, jax.tree.map(lambda p, g: p - 0.01 * g, params, g)

  return step, (params, x, y)


def _attention_block_fwd():
  import jax
  import jax.numpy as jnp

  r = _rng(2)
  b, s, d, h = 4, 128, 256, 4
  x = _f32(r.standard_normal((b, s, d)))
  wqkv = _f32(r.standard_normal((d, 3 * d)) / 16)
  wo, w1 = _f32(r.standard_normal((d, d)) / 16), _f32(r.standard_normal((d, 4 * d)) / 16)
  w2 = _f32(r.standard_normal((4 * d, d)) / 32)
  g = _f32(np.ones(d))

  def ln(x, g):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g

  def block(x, wqkv, wo, w1, w2, g):
    q, k, v = jnp.split(ln(x, g) @ wqkv, 3, -1)
    split = lambda t: t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    att = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // h)
    mask = jnp.tril(jnp.ones((s, s), bool))
    att = jax.nn.softmax(jnp.where(mask, att, -1e9), -1)
    o = jnp.einsum("bhqk,bhkd->bhqd", att, v).transpose(0, 2, 1, 3).reshape(b, s, d)
    x = x + o @ wo
    return x + jax.nn.gelu(ln(x, g) @ w1) @ w2

  return block, (x, wqkv, wo, w1, w2, g)


def _gru_scan():
  import jax
  import jax.numpy as jnp

  r = _rng(3)
  t, b, i, hd = 64, 32, 64, 128
  xs = _f32(r.standard_normal((t, b, i)))
  wx = _f32(r.standard_normal((i, 3 * hd)) / 8)
  wh = _f32(r.standard_normal((hd, 3 * hd)) / 12)

  def run(xs, wx, wh):
    def cell(h, x):
      zx, rx, nx = jnp.split(x @ wx, 3, -1)
      zh, rh, nh = jnp.split(h @ wh, 3, -1)
      z, rr = jax.nn.sigmoid(zx + zh), jax.nn.sigmoid(rx + rh)
      h = (1 - z) * jnp.tanh(nx + rr * nh) + z * h
      return h, h.sum(-1)

    return jax.lax.scan(cell, jnp.zeros((b, hd), jnp.float32), xs)

  return run, (xs, wx, wh)


def _lorenz96_rk4():
  import jax
  import jax.numpy as jnp

  x0 = _f32(8 + 0.01 * _rng(4).standard_normal((64, 256)))

  def f(x):
    return (jnp.roll(x, -1, -1) - jnp.roll(x, 2, -1)) * jnp.roll(x, 1, -1) - x + 8.0

  def solve(x):
    dt = 0.005

    def rk4(_, x):
      k1 = f(x)
      k2 = f(x + dt / 2 * k1)
      k3 = f(x + dt / 2 * k2)
      k4 = f(x + dt * k3)
      return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    return jax.lax.fori_loop(0, 200, rk4, x)

  return solve, (x0,)


def _lion_pytree():
  import jax
  import jax.numpy as jnp

  r = _rng(5)
  sizes = [int(s) for s in np.geomspace(500, 80_000, 60)]
  params = [_f32(r.standard_normal(n)) for n in sizes]
  grads = [_f32(r.standard_normal(n)) for n in sizes]
  moms = [_f32(np.zeros(n)) for n in sizes]

  def lion(params, grads, moms, lr=1e-4, b1=0.9, b2=0.99, wd=0.01):
    def upd(p, g, m):
      u = jnp.sign(b1 * m + (1 - b1) * g)
      return p - lr * (u + wd * p), b2 * m + (1 - b2) * g

    out = jax.tree.map(upd, params, grads, moms)
    return [o[0] for o in out], [o[1] for o in out]

  return lion, (params, grads, moms)


def _softmax_xent_8k():
  import jax
  import jax.numpy as jnp

  r = _rng(6)
  h, w = _f32(r.standard_normal((512, 256))), _f32(r.standard_normal((256, 8192)) / 16)
  y = r.integers(0, 8192, 512).astype(np.int32)

  def xent(h, w, y):
    logits = h @ w
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), y[:, None], 1))

  return jax.value_and_grad(xent, argnums=1), (h, w, y)


def _convnet_fwd():
  import jax
  import jax.numpy as jnp

  r = _rng(7)
  x = _f32(r.standard_normal((16, 32, 32, 3)))
  k1, k2 = _f32(r.standard_normal((3, 3, 3, 32)) / 5), _f32(r.standard_normal((3, 3, 32, 64)) / 17)
  wd = _f32(r.standard_normal((64, 10)) / 8)

  def net(x, k1, k2, wd):
    conv = lambda x, k: jax.lax.conv_general_dilated(
      x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    h = jax.nn.relu(conv(x, k1))
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(conv(h, k2))
    return jax.nn.softmax(h.mean((1, 2)) @ wd)

  return net, (x, k1, k2, wd)


def _langevin_sampler():
  import jax
  import jax.numpy as jnp

  x0 = _f32(_rng(8).standard_normal((4096, 2)))
  means = _f32([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]])

  def logp(x):
    d2 = ((x[:, None, :] - means[None]) ** 2).sum(-1)
    return jax.nn.logsumexp(-0.5 * d2, -1).sum()

  def sample(x, key):
    def step(x, k):
      g = jax.grad(logp)(x)
      x = x + 0.01 * g + jnp.sqrt(0.02) * jax.random.normal(k, x.shape)
      return x, x.mean(0)

    return jax.lax.scan(step, x, jax.random.split(key, 100))

  return sample, (x0, np.asarray(jax.random.key_data(jax.random.key(0))))


def _power_iteration():
  import jax
  import jax.numpy as jnp

  data = _f32(_rng(9).standard_normal((2000, 128)) * np.linspace(0.5, 3, 128))

  def top_pc(x):
    xc = x - x.mean(0)
    cov = xc.T @ xc / x.shape[0]

    def it(_, v):
      v = cov @ v
      return v / jnp.linalg.norm(v)

    v = jax.lax.fori_loop(0, 30, it, jnp.ones(128, jnp.float32) / math.sqrt(128))
    return v, v @ cov @ v

  return top_pc, (data,)


def _residual_mlp_grad():
  import jax
  import jax.numpy as jnp

  r = _rng(10)
  x = _f32(r.standard_normal((256, 384)))
  w1, w2 = _f32(r.standard_normal((384, 1536)) / 20), _f32(r.standard_normal((1536, 384)) / 40)
  g, b = _f32(np.ones(384)), _f32(np.zeros(384))

  def loss(w1, w2, g, b, x):
    m = x.mean(-1, keepdims=True)
    v = x.var(-1, keepdims=True)
    h = (x - m) / jnp.sqrt(v + 1e-5) * g + b
    y = x + jax.nn.gelu(h @ w1) @ w2
    return jnp.mean(y**2)

  return jax.grad(loss, argnums=(0, 1, 2, 3)), (w1, w2, g, b, x)


def _embedding_bag():
  import jax
  import jax.numpy as jnp

  r = _rng(11)
  table = _f32(r.standard_normal((50_000, 64)) * 0.1)
  ids = r.integers(0, 50_000, 8192).astype(np.int32)
  bags = np.sort(r.integers(0, 512, 8192)).astype(np.int32)
  w = _f32(r.standard_normal((64, 1)) / 8)

  def forward(table, ids, bags, w):
    e = jax.ops.segment_sum(table[ids], bags, num_segments=512)
    counts = jax.ops.segment_sum(jnp.ones_like(ids, jnp.float32), bags, num_segments=512)
    return jax.nn.sigmoid((e / jnp.maximum(counts, 1)[:, None]) @ w)

  return forward, (table, ids, bags, w)


def _batchnorm_train():
  import jax
  import jax.numpy as jnp

  r = _rng(12)
  x = _f32(r.standard_normal((32, 28, 28, 64)) * 2 + 1)
  g, b = _f32(np.ones(64)), _f32(np.zeros(64))

  def bn_loss(x, g, b):
    m = x.mean((0, 1, 2))
    v = ((x - m) ** 2).mean((0, 1, 2))
    y = (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b
    return jnp.mean(jax.nn.relu(y))

  return jax.value_and_grad(bn_loss, argnums=(1, 2)), (x, g, b)


def _rbf_kernel_regression():
  import jax.numpy as jnp

  r = _rng(13)
  x, z = _f32(r.standard_normal((2048, 16))), _f32(r.standard_normal((1024, 16)))
  alpha = _f32(r.standard_normal(2048))

  def predict(x, z, alpha):
    d2 = (z**2).sum(-1)[:, None] + (x**2).sum(-1)[None] - 2 * z @ x.T
    k = jnp.exp(-0.5 * jnp.maximum(d2, 0))
    return k @ alpha, k.sum(-1)

  return predict, (x, z, alpha)


# ---- the examples of issue 36 -----------------------------------------------------------


def _issue_logsumexp():
  import jax

  return (lambda x: jax.nn.logsumexp(x, -1)), (_f32(_rng(20).standard_normal((2048, 32000))),)


def _issue_adam_100():
  import jax
  import jax.numpy as jnp

  r = _rng(21)
  sizes = [int(s) for s in np.geomspace(1000, 60_000, 100)]
  p = [_f32(r.standard_normal(n)) for n in sizes]
  g = [_f32(r.standard_normal(n)) for n in sizes]
  m = [_f32(np.zeros(n)) for n in sizes]
  v = [_f32(np.zeros(n)) for n in sizes]

  def adam(p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
    p = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + eps), p, m, v)
    return p, m, v

  return adam, (p, g, m, v)


def _issue_kmeans():
  import jax
  import jax.numpy as jnp

  r = _rng(22)
  x, c = _f32(r.standard_normal((20_000, 16))), _f32(r.standard_normal((64, 16)))

  def step(x, c):
    d = (x**2).sum(-1)[:, None] - 2 * x @ c.T + (c**2).sum(-1)[None]
    a = jnp.argmin(d, -1)
    s = jax.ops.segment_sum(x, a, num_segments=64)
    n = jax.ops.segment_sum(jnp.ones(x.shape[0], jnp.float32), a, num_segments=64)
    return s / jnp.maximum(n, 1)[:, None]

  return step, (x, c)


def _issue_hmc():
  import jax
  import jax.numpy as jnp

  r = _rng(23)
  x = _f32(r.standard_normal((1000, 20)))
  y = _f32(r.random(1000) < 0.5)

  def logp(w):
    z = x @ w
    return jnp.sum(y * z - jax.nn.softplus(z)) - 0.5 * jnp.sum(w * w)

  grad = jax.grad(logp)

  def sample(key, w0):
    def leapfrog(_, state):
      w, p = state
      p = p + 0.5e-3 * grad(w)
      w = w + 1e-3 * p
      return w, p + 0.5e-3 * grad(w)

    def step(w, key):
      k1, k2 = jax.random.split(key)
      p0 = jax.random.normal(k1, w.shape)
      w1, p1 = jax.lax.fori_loop(0, 10, leapfrog, (w, p0))
      log_ratio = logp(w1) - 0.5 * p1 @ p1 - logp(w) + 0.5 * p0 @ p0
      accept = jnp.log(jax.random.uniform(k2)) < log_ratio
      w = jnp.where(accept, w1, w)
      return w, w

    return jax.lax.scan(step, w0, jax.random.split(key, 100))

  return sample, (np.asarray(jax.random.key_data(jax.random.key(0))), _f32(np.zeros(20)))


def _issue_decode():
  import jax
  import jax.numpy as jnp

  r = _rng(24)
  d, t = 256, 64
  wq, wk, wv, wo = (_f32(r.standard_normal((d, d)) / 16) for _ in range(4))
  x0 = _f32(r.standard_normal((1, d)))

  def decode(x, wq, wk, wv, wo):
    def step(i, state):
      x, kc, vc = state
      kc = jax.lax.dynamic_update_slice(kc, x @ wk, (i, 0))
      vc = jax.lax.dynamic_update_slice(vc, x @ wv, (i, 0))
      s = (x @ wq) @ kc.T / 16.0
      s = jnp.where(jnp.arange(t)[None] <= i, s, -jnp.inf)
      return jnp.tanh(jax.nn.softmax(s, -1) @ vc @ wo), kc, vc

    zeros = jnp.zeros((t, d), x.dtype)
    return jax.lax.fori_loop(0, t, step, (x, zeros, zeros))

  return decode, (x0, wq, wk, wv, wo)


CASES = [
  Case("mlp_train_step", "heldout", "MLP 256-512-512-10, batch 128, CE + SGD", _mlp_train_step),
  Case("attention_block", "heldout", "pre-LN block fwd 4x128x256, 4 heads", _attention_block_fwd),
  Case("gru_scan", "heldout", "GRU 64 steps, batch 32, hidden 128", _gru_scan),
  Case("lorenz96_rk4", "heldout", "RK4, 200 steps fori_loop, 64x256", _lorenz96_rk4),
  Case("lion_pytree", "heldout", "Lion update over 60 leaves of 500-80K", _lion_pytree),
  Case("softmax_xent_8k", "heldout", "CE over 8192 classes + grad, 512 rows", _softmax_xent_8k),
  Case("convnet_fwd", "heldout", "2 convs + maxpool + dense, 16x32x32x3", _convnet_fwd),
  Case("langevin", "heldout", "Langevin sampler, 100 steps, 4096 chains", _langevin_sampler),
  Case("power_iteration", "heldout", "covariance + 30 power steps, 2000x128", _power_iteration),
  Case("residual_mlp_grad", "heldout", "LN + GELU MLP block grad, 256x384", _residual_mlp_grad),
  Case("embedding_bag", "heldout", "gather 8192 rows + segment mean + dense", _embedding_bag),
  Case("batchnorm_train", "heldout", "batch norm fwd+bwd, 32x28x28x64", _batchnorm_train),
  Case("rbf_regression", "heldout", "RBF kernel 1024x2048 + matvec", _rbf_kernel_regression),
  Case("logsumexp_32k", "issue", "logsumexp (2048, 32000)", _issue_logsumexp),
  Case("adam_100_leaves", "issue", "Adam over 100 leaves of 1K-60K", _issue_adam_100),
  Case("kmeans_step", "issue", "k-means step 20000x16, 64 centers", _issue_kmeans),
  Case("hmc_logistic", "issue", "HMC: scan 100 x fori_loop 10, 1000x20", _issue_hmc, 1e-2),
  Case("kv_decode_64", "issue", "64-step KV-cache decode, d 256", _issue_decode),
  *(Case(name, "fresh", what, make, rtol) for name, what, make, rtol in heldout_fresh.FRESH),
  *(Case(name, "third", what, make, rtol) for name, what, make, rtol in heldout_third.THIRD),
  *(Case(name, "ops", what, make, rtol) for name, what, make, rtol in heldout_ops.OPS),
]


def _max_rel_diff(a, b) -> float:
  import jax

  worst = 0.0
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    scale = max(np.abs(y).max(initial=0.0), 1e-30)
    worst = max(worst, float(np.abs(x - y).max(initial=0.0) / scale))
  return worst


def run_cases(names: list[str] | None, quick: bool) -> list[dict]:
  """Times the selected cases on both backends in this process; one dict per case."""
  import jax

  from .timing import QUICK, Settings, time_interleaved

  settings = QUICK if quick else Settings(reps=9, min_reps=3, budget_s=1.5)
  devices = {"workshop": jax.devices("workshop")[0], "cpu": jax.devices("cpu")[0]}
  rows = []
  for case in CASES:
    if names and case.name not in names:
      continue
    fn, args = case.make()
    jitted, placed, outs, compile_s = {}, {}, {}, {}
    for backend, dev in devices.items():
      placed[backend] = jax.device_put(args, dev)
      # Trace, lower and compile once on a jit of its own: the compile time a user waits
      # for (the plugin's codegen object cache on disk included, JAX's persistent cache off).
      start = time.perf_counter()
      jax.jit(fn).lower(*placed[backend]).compile()
      compile_s[backend] = time.perf_counter() - start
      jitted[backend] = jax.jit(fn)
      outs[backend] = jax.block_until_ready(jitted[backend](*placed[backend]))
    diff = _max_rel_diff(outs["workshop"], outs["cpu"])
    stats = time_interleaved(
      {b: (lambda b=b: jitted[b](*placed[b])) for b in devices}, settings=settings
    )
    row = {
      "case": case.name,
      "group": case.group,
      "what": case.what,
      "workshop_s": stats["workshop"].median,
      "cpu_s": stats["cpu"].median,
      "ratio": stats["workshop"].median / stats["cpu"].median,
      "compile_workshop_s": compile_s["workshop"],
      "compile_cpu_s": compile_s["cpu"],
      "compile_ratio": compile_s["workshop"] / compile_s["cpu"],
      "max_rel_diff": diff,
    }
    flag = "" if diff <= case.rtol else f"  (outputs differ: {diff:.1e})"
    print(
      f"{case.name:20s} {row['workshop_s'] * 1e3:9.3f} ms {row['cpu_s'] * 1e3:9.3f} ms"
      f"  ratio {row['ratio']:5.2f}  compile {row['compile_ratio']:5.2f}{flag}",
      flush=True,
    )
    rows.append(row)
  return rows


GROUPS = ("heldout", "fresh", "third", "issue", "ops")


def geomean(values: list[float]) -> float:
  return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _summary(rows: list[dict]) -> dict:
  out = {}
  for group in GROUPS:
    ratios = [r["ratio"] for r in rows if r["group"] == group]
    compiles = [r["compile_ratio"] for r in rows if r["group"] == group]
    if ratios:
      out[group] = {
        "geomean": geomean(ratios),
        "worst": max(ratios),
        "n": len(ratios),
        "compile_geomean": geomean(compiles),
      }
  return out


def sweep(cores: list[int], argv: list[str]) -> dict:
  """Runs this module under `taskset` once per core count in `cores`, with the command-line
  arguments `argv` (e.g. ["--quick", "--cases", "logsumexp_32k"]); returns {k: rows}, rows as
  run_cases returns them (seconds per call). A count above this process's CPUs is skipped,
  saying so. Raises CalledProcessError if a run fails (`taskset` missing included)."""
  mask = sorted(os.sched_getaffinity(0))
  results = {}
  for k in cores:
    if k > len(mask):
      print(f"--cores {k}: this process may use only {len(mask)} CPUs; skipped", flush=True)
      continue
    cpus = ",".join(str(c) for c in mask[:k])
    out = f"/tmp/heldout_{os.getpid()}_{k}.json"
    cmd = ["taskset", "-c", cpus, sys.executable, "-m", __spec__.name, *argv, "--out", out]
    print(f"== {k} cores: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)
    with open(out) as f:
      results[k] = json.load(f)["rows"]
    os.unlink(out)
  return results


def _print_sweep(results: dict) -> None:
  ks = sorted(results)
  if not ks:
    return
  names = [r["case"] for r in results[ks[0]]]
  print("\nworkshop/cpu time ratio by core count")
  print(f"{'case':20s}" + "".join(f"{k:>8d}" for k in ks) + "   ws scaling  cpu scaling")
  for name in names:
    by_k = {k: next(r for r in results[k] if r["case"] == name) for k in ks}
    ratios = "".join(f"{by_k[k]['ratio']:8.2f}" for k in ks)
    ws = by_k[ks[0]]["workshop_s"] / by_k[ks[-1]]["workshop_s"]
    cpu = by_k[ks[0]]["cpu_s"] / by_k[ks[-1]]["cpu_s"]
    print(f"{name:20s}{ratios}   {ws:9.2f}x  {cpu:9.2f}x")
  for group in GROUPS:
    line = "".join(
      f"{_summary(results[k]).get(group, {}).get('geomean', float('nan')):8.2f}" for k in ks
    )
    print(f"{'geomean ' + group:20s}{line}")
  line = "".join(
    f"{geomean([r['compile_ratio'] for r in results[k]]):8.2f}" if results[k] else "     nan"
    for k in ks
  )
  print(f"{'compile geomean':20s}{line}")
  print(f"(scaling: time at {ks[0]} cores / time at {ks[-1]} cores; > 1 is faster on more)")


def main(argv: list[str] | None = None) -> None:
  argv = list(sys.argv[1:] if argv is None else argv)
  p = argparse.ArgumentParser(prog="python -m jax_plugins.workshop.bench.heldout")
  p.add_argument("--cases", help="comma-separated case names (default: all)")
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--cores", help="comma-separated core counts: re-run under taskset for each")
  p.add_argument("--out", help="write the results as JSON here")
  p.add_argument("--list", action="store_true")
  args = p.parse_args(argv)
  if args.list:
    for c in CASES:
      print(f"{c.name:20s} {c.group:8s} {c.what}")
    return
  if args.cores:
    child = [a for a in argv if not a.startswith("--cores") and not a.startswith("--out")]
    child = [a for a in child if a not in args.cores.split() and a != args.out]
    results = sweep([int(k) for k in args.cores.split(",")], child)
    _print_sweep(results)
    if args.out:
      with open(args.out, "w") as f:
        json.dump({str(k): v for k, v in results.items()}, f, indent=1)
    return
  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  rows = run_cases(args.cases.split(",") if args.cases else None, args.quick)
  summary = _summary(rows)
  for group, s in summary.items():
    print(
      f"{group}: geomean workshop/cpu {s['geomean']:.2f} over {s['n']}, worst {s['worst']:.2f};"
      f" compile geomean {s['compile_geomean']:.2f}"
    )
  if args.out:
    with open(args.out, "w") as f:
      json.dump({"cpus": len(os.sched_getaffinity(0)), "rows": rows, "summary": summary}, f)


if __name__ == "__main__":
  main()
