"""The benchmark cases: every program is float32, sized by one integer (see registry.py).

About 1,100 lines in one module on purpose: the registry (registry.py) takes every case
from here by name, and the families share the sizing and FLOP/byte helpers at its top.

Families: elementwise chains, reductions along each axis, matmul and batched matmul,
softmax, layer norm, conv2d and max-pool (NHWC), data movement (transposes, broadcasts,
slices, reverses, pads, concatenate, dynamic_update_slice, gather/scatter), an MLP
training step (also data-parallel over 4 devices), a transformer block, loops with small
bodies (`fori_scalar`, `newton_while`, `scan_rnn`), library ops (FFTs, which the plugin
runs through Intel oneMKL's DFTI and XLA:CPU through ducc0; dot_general in int8, bf16,
f16, f64 and c64; solve, LU, eigh, Cholesky, QR; random normal/uniform; segment_sum,
cumsum, argsort, top_k: not all float32), and `tiny_call` (per-call overhead and the
compile time of a small jit). The `models` family (training steps written with flax,
equinox, optax and transformers) is in model_cases.py.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import case, normal

F32 = 4  # bytes per element


def pow2(n: int) -> str:
  return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


# ---------------------------------------------------------------------------------------
# Overhead


@case(
  "tiny_call",
  family="overhead",
  sizes=(4,),
  quick=(4,),
  flops=lambda n: n,
  bytes=lambda n: 2 * F32 * n,
  compile_samples=5,
  size_name="elements",
)
def _tiny_call(n, rng):
  """x + 1 on f32[4]: the time is per-call overhead (dispatch, launch, completion event),
  the compile time that of a one-op program."""
  return (lambda x: x + 1), (normal(rng, n),)


# ---------------------------------------------------------------------------------------
# Elementwise


@case(
  "axpb",
  family="elementwise",
  sizes=(2**12, 2**16, 2**20, 2**24),
  quick=(2**12, 2**16, 2**20),
  flops=lambda n: 2 * n,
  bytes=lambda n: 2 * F32 * n,
  label=pow2,
  size_name="elements",
)
def _axpb(n, rng):
  """x * 2 + 1 on f32[n]: two ops, one read and one write when fused."""
  return (lambda x: x * 2 + 1), (normal(rng, n),)


@case(
  "gelu",
  family="elementwise",
  sizes=(2**12, 2**16, 2**20, 2**24),
  quick=(2**12, 2**16, 2**20),
  flops=lambda n: 9 * n,
  bytes=lambda n: 2 * F32 * n,
  label=pow2,
  size_name="elements",
)
def _gelu(n, rng):
  """jax.nn.gelu (tanh form) on f32[n]: a chain of ~9 elementwise ops."""
  return jax.nn.gelu, (normal(rng, n),)


def tanh_exp_chain(x):
  return jnp.tanh(jnp.exp(-x * x) * 2.0 - 1.0) * 0.5 + x * jnp.exp(x * 0.25 - 1.0)


@case(
  "tanh_exp_chain",
  family="elementwise",
  sizes=(2**16, 2**20, 2**22),
  quick=(2**16, 2**20),
  flops=lambda n: 10 * n,
  bytes=lambda n: 2 * F32 * n,
  label=pow2,
  tol=1e-5,
  size_name="elements",
)
def _tanh_exp_chain(n, rng):
  """tanh(exp(-x^2) * 2 - 1) * 0.5 + x * exp(x / 4 - 1) on f32[n]: a long elementwise chain
  with three transcendentals, no library idiom."""
  return tanh_exp_chain, (normal(rng, n),)


# ---------------------------------------------------------------------------------------
# Reductions of a d x d x d cube along each axis, and of everything


def _reduction(axis):
  def build(d, rng):
    return (lambda x: jnp.sum(x, axis=axis)), (normal(rng, d, d, d),)

  return build


for _axis, _name, _out in [
  (0, "sum_axis0", 2),
  (1, "sum_axis1", 2),
  (2, "sum_axis2", 2),
  (None, "sum_all", 0),
]:
  _build = _reduction(_axis)
  _build.__doc__ = (
    f"sum of f32[d,d,d] over axis {_axis}"
    if _axis is not None
    else "sum of all of f32[d,d,d] (the 16M-element sum at d=256)"
  )
  case(
    _name,
    family="reduction",
    sizes=(32, 64, 128, 256),
    quick=(32, 64, 128),
    flops=lambda d: d**3,
    bytes=lambda d, k=_out: F32 * (d**3 + d**k),
    label=lambda d: f"{d}^3",
    # Both backends reassociate the sum (vector lanes, tree order); the error grows with
    # the number of terms, up to d^3 for sum_all.
    tol=1e-3 if _axis is None else 1e-4,
    size_name="d",
  )(_build)


# ---------------------------------------------------------------------------------------
# Matrix products


@case(
  "matmul",
  family="matmul",
  sizes=(64, 128, 256, 512, 1024, 2048),
  quick=(64, 128, 256),
  flops=lambda n: 2 * n**3,
  bytes=lambda n: 3 * F32 * n * n,
  label=lambda n: f"{n}x{n}x{n}",
  tol=1e-4,
  size_name="n",
)
def _matmul(n, rng):
  """f32[n,n] @ f32[n,n]."""
  return (lambda a, b: a @ b), (normal(rng, n, n), normal(rng, n, n))


@case(
  "matvec",
  family="matmul",
  sizes=(256, 512, 1024, 2048, 4096),
  quick=(256, 1024),
  flops=lambda n: 2 * n * n,
  bytes=lambda n: F32 * (n * n + 2 * n),
  label=lambda n: f"1x{n}x{n}",
  tol=1e-4,
  size_name="n",
)
def _matvec(n, rng):
  """f32[1,n] @ f32[n,n]: a batch-1 layer (matrix-vector product, memory-bound)."""
  return (lambda a, b: a @ b), (normal(rng, 1, n), normal(rng, n, n))


SMALL_M_WIDTH = 1024


@case(
  "small_m_matmul",
  family="matmul",
  sizes=(2, 3, 4, 8),
  quick=(2, 4, 8),
  flops=lambda m: 2 * m * SMALL_M_WIDTH**2,
  bytes=lambda m: F32 * (SMALL_M_WIDTH**2 + 2 * m * SMALL_M_WIDTH),
  label=lambda m: f"{m}x{SMALL_M_WIDTH}x{SMALL_M_WIDTH}",
  tol=1e-4,
  size_name="m",
)
def _small_m_matmul(m, rng):
  """f32[m,1024] @ f32[1024,1024]: a small batch through a layer."""
  return (lambda a, b: a @ b), (
    normal(rng, m, SMALL_M_WIDTH),
    normal(rng, SMALL_M_WIDTH, SMALL_M_WIDTH),
  )


BMM_BATCH = 32


@case(
  "batched_matmul",
  family="matmul",
  sizes=(16, 32, 64, 128, 256),
  quick=(16, 32, 64),
  flops=lambda n: 2 * BMM_BATCH * n**3,
  bytes=lambda n: 3 * F32 * BMM_BATCH * n * n,
  label=lambda n: f"{BMM_BATCH}x{n}x{n}x{n}",
  tol=1e-4,
  size_name="n",
)
def _batched_matmul(n, rng):
  """f32[32,n,n] @ f32[32,n,n] (one dot_general with a batch dimension)."""
  return (lambda a, b: a @ b), (normal(rng, BMM_BATCH, n, n), normal(rng, BMM_BATCH, n, n))


# ---------------------------------------------------------------------------------------
# Normalizations over rows of 1024


ROW = 1024


@case(
  "softmax",
  family="normalization",
  sizes=(64, 256, 1024, 4096),
  quick=(64, 256, 1024),
  flops=lambda r: 5 * r * ROW,
  bytes=lambda r: 2 * F32 * r * ROW,
  label=lambda r: f"{r}x{ROW}",
  tol=1e-5,
  size_name="rows",
)
def _softmax(r, rng):
  """jax.nn.softmax over the last axis of f32[r,1024]: max, subtract, exp, sum, divide."""
  return (lambda x: jax.nn.softmax(x, axis=-1)), (normal(rng, r, ROW),)


def layer_norm(x, gamma, beta, eps=1e-5):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * lax.rsqrt(var + eps) * gamma + beta


@case(
  "layer_norm",
  family="normalization",
  sizes=(64, 256, 1024, 4096),
  quick=(64, 256, 1024),
  flops=lambda r: 8 * r * ROW,
  bytes=lambda r: F32 * (2 * r * ROW + 2 * ROW),
  label=lambda r: f"{r}x{ROW}",
  tol=1e-4,
  size_name="rows",
)
def _layer_norm(r, rng):
  """Layer norm over the last axis of f32[r,1024] with scale and shift."""
  return layer_norm, (normal(rng, r, ROW), normal(rng, ROW), normal(rng, ROW))


# ---------------------------------------------------------------------------------------
# Convolutional layers, NHWC, batch swept


HW, CH = 56, 64


@case(
  "conv2d",
  family="conv",
  sizes=(1, 4, 16),
  quick=(1, 2),
  flops=lambda b: 2 * b * HW * HW * CH * 9 * CH,
  bytes=lambda b: F32 * (2 * b * HW * HW * CH + 9 * CH * CH),
  label=lambda b: f"{b}x{HW}x{HW}x{CH} * 3x3x{CH}x{CH}",
  tol=1e-4,
  size_name="batch",
)
def _conv2d(b, rng):
  """3x3 'SAME' convolution, NHWC input, HWIO kernel, 64 -> 64 channels."""

  def conv(x, w):
    return lax.conv_general_dilated(
      x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )

  return conv, (normal(rng, b, HW, HW, CH), normal(rng, 3, 3, CH, CH, scale=(9 * CH) ** -0.5))


@case(
  "max_pool",
  family="conv",
  sizes=(1, 4, 16),
  quick=(1, 2),
  flops=lambda b: 9 * b * (HW // 2) ** 2 * CH,
  bytes=lambda b: F32 * (b * HW * HW * CH + b * (HW // 2) ** 2 * CH),
  label=lambda b: f"{b}x{HW}x{HW}x{CH}",
  tol=0,
  size_name="batch",
)
def _max_pool(b, rng):
  """3x3 max-pool, stride 2, 'SAME' padding, NHWC (ResNet's stem pool)."""

  def pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

  return pool, (normal(rng, b, HW, HW, CH),)


# ---------------------------------------------------------------------------------------
# Data movement


@case(
  "transpose",
  family="data movement",
  sizes=(256, 1024, 4096),
  quick=(128, 256, 1024),
  flops=lambda n: 0,
  bytes=lambda n: 2 * F32 * n * n,
  label=lambda n: f"{n}x{n}",
  tol=0,
  size_name="n",
)
def _transpose(n, rng):
  """f32[n,n].T, materialized."""
  return (lambda x: x.T), (normal(rng, n, n),)


HEADS, HEAD_DIM = 8, 64


@case(
  "transpose_0213",
  family="data movement",
  sizes=(128, 512, 2048),
  quick=(64, 128, 512),
  flops=lambda s: 0,
  bytes=lambda s: 2 * F32 * 8 * s * HEADS * HEAD_DIM,
  label=lambda s: f"8x{s}x{HEADS}x{HEAD_DIM}",
  tol=0,
  size_name="sequence length",
)
def _transpose_0213(s, rng):
  """(batch, seq, heads, head_dim) -> (batch, heads, seq, head_dim), as attention does."""
  return (lambda x: x.transpose(0, 2, 1, 3)), (normal(rng, 8, s, HEADS, HEAD_DIM),)


# The StableHLO op each single-op data-movement case below lowers to (tests/bench/test_bench.py
# checks it); on the workshop every one of them runs through StridedCopy (kernels/core/strided.h).
DATA_MOVEMENT_OPS: dict[str, str] = {}


def _square_case(name, op, doc, fn, *, reads=1.0, writes=1.0, vector=False, extra=None):
  """Registers a data-movement case on f32[n,n] (f32[n] if `vector`) and `extra(n, rng)`'s
  further operands; `reads`/`writes` are the compulsory traffic in units of n*n floats."""

  def build(n, rng):
    x = normal(rng, n) if vector else normal(rng, n, n)
    return fn(n), (x, *(extra(n, rng) if extra else ()))

  build.__doc__ = doc
  DATA_MOVEMENT_OPS[name] = op
  case(
    name,
    family="data movement",
    sizes=(256, 1024, 4096),
    quick=(256, 1024),
    flops=lambda n: 0,
    bytes=lambda n: F32 * (reads + writes) * n * n,
    label=lambda n: f"{n}x{n}",
    tol=0,
    size_name="n",
  )(build)


_square_case(
  "broadcast_rows",
  "broadcast_in_dim",
  "f32[n] repeated as the n rows of f32[n,n]: one memcpy per row.",
  lambda n: lambda x: jnp.broadcast_to(x, (n, n)),
  reads=0,
  vector=True,
)
_square_case(
  "broadcast_cols",
  "broadcast_in_dim",
  "f32[n] repeated as the n columns of f32[n,n]: one fill per row.",
  lambda n: lambda x: lax.broadcast_in_dim(x, (n, n), (0,)),
  reads=0,
  vector=True,
)
_square_case(
  "slice_strided",
  "slice",
  "x[:, ::2] of f32[n,n]: every other column.",
  lambda n: lambda x: x[:, ::2],
  writes=0.5,
)
_square_case(
  "reverse_rows",
  "reverse",
  "x[:, ::-1] of f32[n,n]: reversed along rows.",
  lambda n: lambda x: x[:, ::-1],
)
_square_case(
  "pad_edges",
  "pad",
  "jnp.pad(x, 1) of f32[n,n]: a border of zeros.",
  lambda n: lambda x: jnp.pad(x, 1),
)
_square_case(
  "pad_interior",
  "pad",
  "A zero between neighbours along the rows of f32[n,n] (lax.pad, interior 1: "
  "the dilation of a transposed convolution).",
  lambda n: lambda x: lax.pad(x, jnp.float32(0), [(0, 0, 0), (0, 0, 1)]),
  writes=2,
)
_square_case(
  "concatenate",
  "concatenate",
  "jnp.concatenate([x, y], axis=1) of two f32[n,n]: rows interleaved.",
  lambda n: lambda x, y: jnp.concatenate([x, y], axis=1),
  reads=2,
  writes=2,
  extra=lambda n, rng: (normal(rng, n, n),),
)
_square_case(
  "update_slice",
  "dynamic_update_slice",
  "lax.dynamic_update_slice(x, u, (i, 0)) of f32[n,n] and u = f32[n/4,n], i = n/2 "
  "an operand: a copy of x, then the window.",
  lambda n: lambda x, u, i: lax.dynamic_update_slice(x, u, (i, jnp.int32(0))),
  reads=1.25,
  writes=1.25,
  extra=lambda n, rng: (normal(rng, n // 4, n), np.int32(n // 2)),
)


VOCAB, EMBED = 8192, 128


@case(
  "gather",
  family="data movement",
  sizes=(1024, 8192, 65536),
  quick=(1024, 8192),
  flops=lambda k: 0,
  bytes=lambda k: F32 * (2 * k * EMBED + k),
  label=lambda k: f"{k} rows of {VOCAB}x{EMBED}",
  tol=0,
  size_name="indices",
)
def _gather(k, rng):
  """Embedding lookup: table[idx] with k int32 indices into f32[8192,128]."""
  idx = rng.integers(0, VOCAB, k, dtype=np.int32)
  return (lambda table, idx: table[idx]), (normal(rng, VOCAB, EMBED), idx)


@case(
  "scatter_add",
  family="data movement",
  sizes=(1024, 8192, 65536),
  quick=(1024, 8192),
  flops=lambda k: k * EMBED,
  bytes=lambda k: F32 * (VOCAB * EMBED + 3 * k * EMBED + k),
  label=lambda k: f"{k} rows into {VOCAB}x{EMBED}",
  tol=1e-5,
  size_name="indices",
)
def _scatter_add(k, rng):
  """Embedding gradient: zeros(8192,128).at[idx].add(updates), k rows, repeated indices."""
  idx = rng.integers(0, VOCAB, k, dtype=np.int32)

  def scatter(updates, idx):
    return jnp.zeros((VOCAB, EMBED), jnp.float32).at[idx].add(updates)

  return scatter, (normal(rng, k, EMBED), idx)


# ---------------------------------------------------------------------------------------
# Models


MLP_BATCH, CLASSES = 128, 10


def _mlp_widths(h):
  return [h, h, h, CLASSES]


def _mlp_params(h):
  w = _mlp_widths(h)
  return sum(m * n + n for m, n in zip(w, w[1:]))


def mlp_loss(params, x, y):
  for w, b in params[:-1]:
    x = jax.nn.relu(x @ w + b)
  w, b = params[-1]
  return -jnp.mean(jnp.sum(jax.nn.log_softmax(x @ w + b) * y, axis=-1))


def sgd_step(params, x, y, lr=0.01, loss_fn=mlp_loss):
  """One SGD step of `loss_fn(params, x, y)`: the new parameters and the loss."""
  loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
  return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


@case(
  "mlp_train_step",
  family="model",
  sizes=(128, 256, 512, 1024),
  quick=(128, 256),
  flops=lambda h: 6 * MLP_BATCH * (_mlp_params(h)),
  bytes=lambda h: F32 * (2 * _mlp_params(h) + MLP_BATCH * (h + CLASSES)),
  label=lambda h: f"b{MLP_BATCH} {h}-{h}-{h}-{CLASSES}",
  tol=1e-4,
  size_name="width",
)
def _mlp_train_step(h, rng):
  """One SGD step of a 3-layer ReLU MLP, softmax cross-entropy: forward, grad, update."""
  w = _mlp_widths(h)
  params = [(normal(rng, m, n, scale=m**-0.5), normal(rng, n, scale=0.1)) for m, n in zip(w, w[1:])]
  x = normal(rng, MLP_BATCH, h)
  y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, MLP_BATCH)]
  return sgd_step, (params, x, y)


def _place_data_parallel(args, devices):
  """Parameters replicated, the batch (x, y) split over the devices' "data" axis."""
  mesh = jax.sharding.Mesh(np.array(devices), ("data",))
  params, x, y = args
  batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  return (
    jax.device_put(params, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())),
    jax.device_put(x, batch),
    jax.device_put(y, batch),
  )


DP_DEVICES = 4


@case(
  "mlp_train_step_dp4",
  family="model",
  sizes=(128, 256, 512, 1024),
  quick=(128, 256),
  flops=lambda h: 6 * DP_DEVICES * MLP_BATCH * (_mlp_params(h)),
  bytes=lambda h: F32 * (2 * _mlp_params(h) + DP_DEVICES * MLP_BATCH * (h + CLASSES)),
  label=lambda h: f"b{DP_DEVICES}x{MLP_BATCH} {h}-{h}-{h}-{CLASSES}",
  tol=1e-4,
  size_name="width",
  place=_place_data_parallel,
  devices=DP_DEVICES,
)
def _mlp_train_step_dp4(h, rng):
  """mlp_train_step data-parallel over 4 devices: a batch of 4x128 sharded over "data",
  parameters replicated; jit partitions it (gradients all-reduced). flops are the whole
  step's, over all devices."""
  w = _mlp_widths(h)
  params = [(normal(rng, m, n, scale=m**-0.5), normal(rng, n, scale=0.1)) for m, n in zip(w, w[1:])]
  x = normal(rng, DP_DEVICES * MLP_BATCH, h)
  y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, DP_DEVICES * MLP_BATCH)]
  return sgd_step, (params, x, y)


CNN_HW, CNN_C1, CNN_C2 = 32, 16, 32


def _cnn_forward_flops() -> int:
  """Per image: the two 3x3 convolutions (3 -> C1 at HW^2, C1 -> C2 after a 2x2 pool) and
  the classifier."""
  return (
    2 * CNN_HW**2 * 3 * 9 * CNN_C1
    + 2 * (CNN_HW // 2) ** 2 * CNN_C1 * 9 * CNN_C2
    + 2 * CNN_C2 * CLASSES
  )


def cnn_loss(p, x, y):
  """Softmax cross-entropy of conv-ReLU, 2x2 max-pool, conv-ReLU, global mean, dense."""
  dn = ("NHWC", "HWIO", "NHWC")
  h = jax.nn.relu(lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
  h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
  h = jax.nn.relu(lax.conv_general_dilated(h, p["c2"], (1, 1), "SAME", dimension_numbers=dn))
  logits = h.mean((1, 2)) @ p["dense"]
  return -(jax.nn.log_softmax(logits) * y).sum(-1).mean()


@case(
  "cnn_train_step_dp4",
  family="model",
  sizes=(8, 16, 32),
  quick=(8,),
  flops=lambda b: 3 * DP_DEVICES * b * _cnn_forward_flops(),
  bytes=lambda b: F32 * DP_DEVICES * b * (CNN_HW**2 * (3 + 2 * CNN_C1) + CLASSES),
  label=lambda b: f"b{DP_DEVICES}x{b} {CNN_HW}x{CNN_HW}x3 conv{CNN_C1}-pool-conv{CNN_C2}",
  tol=1e-4,
  size_name="batch per device",
  place=_place_data_parallel,
  devices=DP_DEVICES,
)
def _cnn_train_step_dp4(b, rng):
  """One SGD step of a small CNN, data-parallel over 4 devices (a batch of 4 x b images
  sharded over "data", parameters replicated): the convolutions, the max-pool and their
  gradients run on each device's images, the weight gradients are all-reduced."""
  params = {
    "c1": normal(rng, 3, 3, 3, CNN_C1, scale=27**-0.5),
    "c2": normal(rng, 3, 3, CNN_C1, CNN_C2, scale=(9 * CNN_C1) ** -0.5),
    "dense": normal(rng, CNN_C2, CLASSES, scale=CNN_C2**-0.5),
  }
  x = normal(rng, DP_DEVICES * b, CNN_HW, CNN_HW, 3)
  y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, DP_DEVICES * b)]
  return functools.partial(sgd_step, loss_fn=cnn_loss), (params, x, y)


TF_BATCH, TF_DIM, TF_HEADS = 4, 256, 4


def transformer_block(p, x):
  """Pre-LN block: x + attn(LN(x)) with a causal mask, then + MLP(LN(x)) (4x, GELU)."""
  b, s, d = x.shape
  dh = d // TF_HEADS
  h = layer_norm(x, p["ln1_g"], p["ln1_b"])
  q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
  q, k, v = (t.reshape(b, s, TF_HEADS, dh).transpose(0, 2, 1, 3) for t in (q, k, v))
  scores = q @ k.swapaxes(-1, -2) * (1.0 / math.sqrt(dh))
  causal = jnp.tril(jnp.ones((s, s), bool))
  scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
  attn = jax.nn.softmax(scores, axis=-1) @ v
  x = x + attn.transpose(0, 2, 1, 3).reshape(b, s, d) @ p["wo"]
  h = layer_norm(x, p["ln2_g"], p["ln2_b"])
  return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


@case(
  "transformer_block",
  family="model",
  sizes=(32, 64, 128, 256),
  quick=(32, 64),
  flops=lambda s: TF_BATCH * s * 24 * TF_DIM**2 + 4 * TF_BATCH * s * s * TF_DIM,
  bytes=lambda s: F32 * (12 * TF_DIM**2 + 2 * TF_BATCH * s * TF_DIM),
  label=lambda s: f"{TF_BATCH}x{s}x{TF_DIM} h{TF_HEADS}",
  tol=1e-4,
  size_name="sequence length",
)
def _transformer_block(s, rng):
  """Forward pass of one pre-LN transformer block: LN, masked attention, LN, GELU MLP."""
  return transformer_block, (transformer_params(rng), normal(rng, TF_BATCH, s, TF_DIM))


def transformer_params(rng):
  """The parameters of transformer_block at width TF_DIM (f32 numpy arrays)."""
  d = TF_DIM
  return {
    "ln1_g": 1 + normal(rng, d, scale=0.1),
    "ln1_b": normal(rng, d, scale=0.1),
    "ln2_g": 1 + normal(rng, d, scale=0.1),
    "ln2_b": normal(rng, d, scale=0.1),
    "wqkv": normal(rng, d, 3 * d, scale=d**-0.5),
    "wo": normal(rng, d, d, scale=d**-0.5),
    "w1": normal(rng, d, 4 * d, scale=d**-0.5),
    "w2": normal(rng, 4 * d, d, scale=(4 * d) ** -0.5),
  }


# ---------------------------------------------------------------------------------------
# Loops with small bodies (the code-generation tier, compiler/codegen)


@case(
  "fori_scalar",
  family="loops",
  sizes=(10000,),
  quick=(1000,),
  flops=lambda n: 2 * n,
  bytes=lambda n: 2 * F32,
  label=lambda n: f"{n} steps",
  tol=1e-5,
  size_name="steps",
)
def _fori_scalar(n, rng):
  """lax.fori_loop(0, n, lambda i, c: c * 1.0001 + 1.0, x) on a scalar: two flops and a
  counter per step, so the time is the per-iteration cost of the loop machinery."""
  del rng
  return (lambda x: lax.fori_loop(0, n, lambda i, c: c * 1.0001 + 1.0, x)), (np.float32(1.0),)


@case(
  "newton_while",
  family="loops",
  sizes=(200,),
  quick=(200,),
  flops=lambda n: 3 * 64 * n,
  bytes=lambda n: 2 * F32 * 64,
  label=lambda n: f"f32[64], {n} steps",
  tol=1e-5,
  size_name="steps",
)
def _newton_while(n, rng):
  """Newton's square root, x <- (x + a / x) / 2, in lax.while_loop on f32[64] for n steps."""
  a = rng.uniform(1, 100, 64).astype(np.float32)

  def sqrt(a):
    def body(s):
      x, i = s
      return 0.5 * (x + a / x), i + 1

    return lax.while_loop(lambda s: s[1] < n, body, (a, 0))[0]

  return sqrt, (a,)


@case(
  "scan_rnn",
  family="loops",
  sizes=(2000,),
  quick=(500,),
  flops=lambda n: n * (2 * 16 * 16 + 16),
  bytes=lambda n: 2 * F32 * 16 * n,
  label=lambda n: f"16x16, {n} steps",
  tol=1e-4,
  size_name="steps",
)
def _scan_rnn(n, rng):
  """lax.scan of h <- tanh(W h + x) over n rows of f32[n, 16], stacking every h."""

  def rnn(w, h0, xs):
    def step(h, x):
      h = jnp.tanh(w @ h + x)
      return h, h

    return lax.scan(step, h0, xs)

  return rnn, (normal(rng, 16, 16, scale=0.3), normal(rng, 16), normal(rng, n, 16))


# ---------------------------------------------------------------------------------------
# Library ops: FFTs (kernels/fft.cc runs MKL's DFTI, XLA:CPU runs ducc0). The results are
# complex, which the runner's max_rel_err compares on their real and imaginary parts
# (tests/ops/test_fft.py checks both against numpy and XLA:CPU).


def complex_normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
  """complex64 samples, real and imaginary parts N(0, 1)."""
  return (normal(rng, *shape) + 1j * normal(rng, *shape)).astype(np.complex64)


def fft_flops(elements: int) -> float:
  """The usual count for a complex FFT of `elements` points: 5 n log2 n."""
  return 5 * elements * math.log2(max(elements, 2))


@case(
  "fft",
  family="library ops",
  sizes=(2**16, 2**20),
  quick=(2**20,),
  flops=fft_flops,
  bytes=lambda n: 2 * 2 * F32 * n,
  label=pow2,
  tol=1e-5,
  size_name="points",
)
def _fft(n, rng):
  """jnp.fft.fft of c64[n]: one large 1-D transform."""
  return jnp.fft.fft, (complex_normal(rng, n),)


@case(
  "rfft",
  family="library ops",
  sizes=(2**16, 2**20),
  quick=(2**20,),
  flops=lambda n: fft_flops(n) / 2,
  bytes=lambda n: F32 * n + 2 * F32 * (n // 2 + 1),
  label=pow2,
  tol=1e-5,
  size_name="points",
)
def _rfft(n, rng):
  """jnp.fft.rfft of f32[n] into c64[n/2+1]."""
  return jnp.fft.rfft, (normal(rng, n),)


@case(
  "fft2",
  family="library ops",
  sizes=(128, 512, 1024),
  quick=(512,),
  flops=lambda n: fft_flops(n * n),
  bytes=lambda n: 2 * 2 * F32 * n * n,
  label=lambda n: f"{n}x{n}",
  tol=1e-5,
  size_name="side",
)
def _fft2(n, rng):
  """jnp.fft.fft2 of c64[n, n]: a single 2-D transform (no batch to split)."""
  return jnp.fft.fft2, (complex_normal(rng, n, n),)


@case(
  "fft_prime",
  family="library ops",
  sizes=(17, 10007, 1000003),
  quick=(10007,),
  flops=fft_flops,
  bytes=lambda n: 2 * 2 * F32 * n,
  tol=1e-5,
  size_name="points",
)
def _fft_prime(n, rng):
  """jnp.fft.fft of c64[n] for a prime n (17, 10007, 1000003): no radix applies."""
  return jnp.fft.fft, (complex_normal(rng, n),)


@case(
  "fftn_3d",
  family="library ops",
  sizes=(32, 64, 128),
  quick=(64,),
  flops=lambda n: fft_flops(n**3),
  bytes=lambda n: 2 * 2 * F32 * n**3,
  label=lambda n: f"{n}^3",
  tol=1e-5,
  size_name="side",
)
def _fftn_3d(n, rng):
  """jnp.fft.fftn of c64[n, n, n]: a 3-D transform."""
  return jnp.fft.fftn, (complex_normal(rng, n, n, n),)


@case(
  "fft_batched",
  family="library ops",
  sizes=(64, 256, 1024),
  quick=(256,),
  flops=lambda n: 4096 * fft_flops(n),
  bytes=lambda n: 2 * 2 * F32 * 4096 * n,
  label=lambda n: f"4096x{n}",
  tol=1e-5,
  size_name="points",
)
def _fft_batched(n, rng):
  """jnp.fft.fft over the last axis of c64[4096, n]: many small transforms."""
  return jnp.fft.fft, (complex_normal(rng, 4096, n),)


# ---------------------------------------------------------------------------------------
# Library ops beside the FFTs: matrix products in other dtypes, LAPACK-style factorizations,
# random numbers, segment sums, scans, sorts and top-k. Each is one size (the quick sweep
# of the family runs in about a minute).


def _dot_case(
  name,
  dtype,
  doc,
  *,
  tol,
  itemsize,
  out_itemsize=None,
  x64=False,
  make=None,
  preferred=None,
  sizes=(256, 512),
):
  def build(n, rng):
    if make is not None:
      a, b = make(rng, n), make(rng, n)
    else:
      a = normal(rng, n, n).astype(dtype)
      b = normal(rng, n, n).astype(dtype)
    if preferred is None:
      return (lambda a, b: a @ b), (a, b)
    return (
      lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=preferred)
    ), (a, b)

  build.__doc__ = doc
  case(
    name,
    family="library ops",
    sizes=sizes,
    quick=sizes,
    flops=lambda n: 2 * n**3 * (4 if np.dtype(dtype).kind == "c" else 1),
    bytes=lambda n: (2 * itemsize + (out_itemsize or itemsize)) * n * n,
    label=lambda n: f"{n}x{n}x{n}",
    tol=tol,
    size_name="n",
    x64=x64,
  )(build)


_dot_case(
  "dot_int8",
  np.int8,
  "lax.dot_general of s8[n,n] x s8[n,n] -> s32 (preferred_element_type=int32): exact integer sums.",
  tol=0,
  itemsize=1,
  out_itemsize=4,
  make=lambda rng, n: rng.integers(-128, 128, (n, n), dtype=np.int8),
  preferred=jnp.int32,
  sizes=(512, 1024),
)
# bf16 / f16 results are rounded to 8 / 11 bits after an f32 accumulation on both backends;
# a sum landing near a rounding boundary rounds either way: one ulp of the result.
_dot_case("dot_bf16", jnp.bfloat16, "bf16[n,n] @ bf16[n,n] -> bf16.", tol=1e-2, itemsize=2)
_dot_case("dot_f16", np.float16, "f16[n,n] @ f16[n,n] -> f16.", tol=2e-3, itemsize=2)
_dot_case("dot_f64", np.float64, "f64[n,n] @ f64[n,n] (x64 on).", tol=1e-12, itemsize=8, x64=True)
_dot_case(
  "dot_c64",
  np.complex64,
  "c64[n,n] @ c64[n,n]: complex GEMM.",
  tol=1e-5,
  itemsize=8,
  make=lambda rng, n: complex_normal(rng, n, n),
)


def _well_conditioned(rng, n):
  """n x n with N(0, 1/n) entries plus the identity: condition number ~ 10."""
  return np.eye(n, dtype=np.float32) + normal(rng, n, n, scale=n**-0.5 / 2)


def _spd(rng, n):
  a = normal(rng, n, n, scale=n**-0.5)
  return (a @ a.T + np.eye(n, dtype=np.float32)).astype(np.float32)


@case(
  "linalg_solve",
  family="library ops",
  sizes=(512,),
  quick=(512,),
  flops=lambda n: 2 / 3 * n**3 + 2 * n * n * n,
  bytes=lambda n: 3 * F32 * n * n,
  label=lambda n: f"{n}x{n}, {n} rhs",
  tol=1e-4,
  size_name="n",
)
def _linalg_solve(n, rng):
  """jnp.linalg.solve(a, b) of f32[n,n] with n right-hand sides: LU (getrf), then two
  triangular solves."""
  return jnp.linalg.solve, (_well_conditioned(rng, n), normal(rng, n, n))


@case(
  "linalg_lu",
  family="library ops",
  sizes=(512,),
  quick=(512,),
  flops=lambda n: 2 / 3 * n**3,
  bytes=lambda n: 2 * F32 * n * n,
  label=lambda n: f"{n}x{n}",
  tol=1e-4,
  size_name="n",
)
def _linalg_lu(n, rng):
  """jax.lax.linalg.lu of f32[n,n]: the packed factors, pivots and permutation (the same
  pivots on both; the factors of a random matrix differ by 2e-5 of their largest entry)."""
  return lax.linalg.lu, (normal(rng, n, n),)


@case(
  "linalg_eigh",
  family="library ops",
  sizes=(256,),
  quick=(256,),
  flops=lambda n: 9 * n**3,
  bytes=lambda n: 2 * F32 * n * n,
  label=lambda n: f"{n}x{n}",
  tol=1e-4,
  size_name="n",
)
def _linalg_eigh(n, rng):
  """jnp.linalg.eigh of a symmetric f32[n,n]: eigenvalues and eigenvectors, each vector's
  sign fixed (largest-magnitude entry positive) so that the two backends compare."""

  def eigh(a):
    w, v = jnp.linalg.eigh(a)
    pivot = jnp.take_along_axis(v, jnp.argmax(jnp.abs(v), axis=0)[None], axis=0)
    return w, v * jnp.sign(pivot)

  a = normal(rng, n, n)
  return eigh, ((a + a.T) / 2,)


@case(
  "linalg_cholesky",
  family="library ops",
  sizes=(512,),
  quick=(512,),
  flops=lambda n: n**3 / 3,
  bytes=lambda n: 2 * F32 * n * n,
  label=lambda n: f"{n}x{n}",
  tol=1e-5,
  size_name="n",
)
def _linalg_cholesky(n, rng):
  """jnp.linalg.cholesky of a symmetric positive definite f32[n,n] (A A^T / n + I)."""
  return jnp.linalg.cholesky, (_spd(rng, n),)


@case(
  "linalg_qr",
  family="library ops",
  sizes=(256,),
  quick=(256,),
  flops=lambda n: 4 / 3 * n**3 * 2,
  bytes=lambda n: 3 * F32 * n * n,
  label=lambda n: f"{n}x{n}",
  tol=1e-4,
  size_name="n",
)
def _linalg_qr(n, rng):
  """jnp.linalg.qr of f32[n,n] (Q and R), signs fixed so that R's diagonal is positive."""

  def qr(a):
    q, r = jnp.linalg.qr(a)
    s = jnp.sign(jnp.diagonal(r))
    return q * s, r * s[:, None]

  return qr, (normal(rng, n, n),)


def _key_data(rng):
  return rng.integers(0, 2**32, 2, dtype=np.uint32)


@case(
  "random_normal",
  family="library ops",
  sizes=(2**22,),
  quick=(2**22,),
  flops=lambda n: 30 * n,
  bytes=lambda n: F32 * n,
  label=pow2,
  tol=1e-5,
  size_name="samples",
)
def _random_normal(n, rng):
  """jax.random.normal(key, (n,)) of f32 from a threefry key passed as raw data
  (jax.random.wrap_key_data): counter-mode bits, then an erfinv transform."""
  return (lambda k: jax.random.normal(jax.random.wrap_key_data(k), (n,))), (_key_data(rng),)


@case(
  "random_uniform",
  family="library ops",
  sizes=(2**22,),
  quick=(2**22,),
  flops=lambda n: 20 * n,
  bytes=lambda n: F32 * n,
  label=pow2,
  tol=0,
  size_name="samples",
)
def _random_uniform(n, rng):
  """jax.random.uniform(key, (n,)) of f32 from a key passed as raw data: threefry bits
  turned into floats (exact)."""
  return (lambda k: jax.random.uniform(jax.random.wrap_key_data(k), (n,))), (_key_data(rng),)


SEGMENTS = 1000


@case(
  "segment_sum",
  family="library ops",
  sizes=(2**20,),
  quick=(2**20,),
  flops=lambda n: n,
  bytes=lambda n: 2 * F32 * n + F32 * SEGMENTS,
  label=pow2,
  tol=1e-4,
  size_name="elements",
)
def _segment_sum(n, rng):
  """jax.ops.segment_sum of f32[n] into 1000 segments by random (unsorted) int32 ids."""
  ids = rng.integers(0, SEGMENTS, n, dtype=np.int32)
  return (lambda x, ids: jax.ops.segment_sum(x, ids, num_segments=SEGMENTS)), (normal(rng, n), ids)


@case(
  "cumsum",
  family="library ops",
  sizes=(2**20,),
  quick=(2**20,),
  flops=lambda n: n,
  bytes=lambda n: 2 * F32 * n,
  label=pow2,
  tol=1e-4,
  size_name="elements",
)
def _cumsum(n, rng):
  """jnp.cumsum of f32[n] (JAX lowers it to a reduce_window or an associative scan);
  the running sum reaches ~sqrt(n), rounding grows with the terms."""
  return jnp.cumsum, (normal(rng, n),)


@case(
  "argsort",
  family="library ops",
  sizes=(2**20,),
  quick=(2**20,),
  flops=lambda n: n * math.log2(n),
  bytes=lambda n: 2 * F32 * n,
  label=pow2,
  tol=0,
  size_name="elements",
)
def _argsort(n, rng):
  """jnp.argsort of f32[n] (stable: ties keep their order, so the indices are unique)."""
  return jnp.argsort, (normal(rng, n),)


@case(
  "top_k",
  family="library ops",
  sizes=(2**20,),
  quick=(2**20,),
  flops=lambda n: n,
  bytes=lambda n: F32 * n,
  label=lambda n: f"10 of {pow2(n)}",
  tol=0,
  size_name="elements",
)
def _top_k(n, rng):
  """lax.top_k(x, 10) of f32[n]: the 10 largest values and their indices."""
  return (lambda x: lax.top_k(x, 10)), (normal(rng, n),)
