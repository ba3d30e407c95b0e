"""The `models` family: one jitted training step (forward, gradient, optax update) of models
written with the usual libraries: a flax NNX CNN with BatchNorm and dropout (the shape of
flax's MNIST tutorial), a flax linen MLP, an equinox MLP, a transformer block (plain JAX,
cases.transformer_block), an LSTM through lax.scan, a ResNet basic block (flax linen,
BatchNorm) and a 2-layer Flax GPT-2 from transformers (random init, nothing downloaded).

Every case is a pure function `step(state, *batch) -> (loss, new_state)` with
`state = (params, aux, opt_state)` (`aux`: BatchNorm statistics, or ()), built on the CPU
backend and handed to the runner as numpy pytrees, so both backends start from the same
state; dropout draws from a key passed as an argument (raw key data, uint32[2]), so both
draw the same mask. The time is that of the step called repeatedly after warm-up.

Agreement (registry's `tol`, max |workshop - cpu| / max |cpu| per leaf): with SGD
(momentum 0.9) the new parameters are linear in the gradients and everything the step
returns is compared, tol 1e-4 (f32 gradients through BatchNorm, convolutions and scans
reassociated differently by the two backends: measured 4e-7 to 3e-6), except the NNX CNN
at batch 32-64, 1e-2 (CNN_TOL: a ReLU input within rounding of zero). Adam's first step
is lr * g / (|g| + eps), about lr * sign(g), so a gradient that is zero up to rounding
(GPT-2's attention key bias: softmax ignores it) moves its parameter by +-lr on either
backend independently; the Adam cases (transformer block, GPT-2) compare the loss and
Adam's moments (mu = 0.1 g, nu = 0.001 g^2 at the first step, i.e. the gradients) instead
of the new parameters. Convolutions followed by BatchNorm have no bias, as in ResNets: the
bias's gradient is zero up to rounding there, which no relative check can compare.

The libraries come from the `models` extra (pip install -e ".[models]"); a case whose
library is missing is listed as "(needs flax)" and reported as `skipped`.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .cases import F32, TF_BATCH, TF_DIM, transformer_block, transformer_params
from .registry import Skip, case, normal

FAMILY = "models"
SGD_TOL = 1e-4
ADAM_TOL = 1e-4
# The CNN at batch 32-64: a ReLU input within rounding of zero lets its gradient through on
# one backend only (measured: XLA:CPU against itself with the images scaled by 1 + 2^-23
# differs from itself by as much as from the workshop, 1.4e-3 in conv1's kernel gradient,
# 6e-3 in conv2's); at batch 8 the two backends agree to 2e-6 (tests/models/test_models.py).
CNN_TOL = 1e-2


def _cpu():
  """Initialize on the CPU backend (the process's default device is the workshop)."""
  return jax.default_device(jax.devices("cpu")[0])


def _numpy(tree):
  return jax.tree.map(np.asarray, tree)


def _key(rng: np.random.Generator) -> np.ndarray:
  """Raw threefry key data (uint32[2]); the step wraps it with jax.random.wrap_key_data."""
  return rng.integers(0, 2**32, 2, dtype=np.uint32)


def _labels(rng, b, classes=10):
  return rng.integers(0, classes, b, dtype=np.int32)


def train_step(loss_fn, tx):
  """step(state, *batch) -> (loss, new_state) and grads(state, *batch) -> (loss, grads)
  for `loss_fn(params, aux, *batch) -> (loss, new_aux)` and an optax transformation."""
  import optax

  def step(state, *batch):
    params, aux, opt_state = state
    (loss, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(params, aux, *batch)
    updates, opt_state = tx.update(g, opt_state, params)
    return loss, (optax.apply_updates(params, updates), aux, opt_state)

  def grads(state, *batch):
    params, aux, _ = state
    (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(params, aux, *batch)
    return loss, g

  return step, grads


def _sgd():
  import optax

  return optax.sgd(0.01, momentum=0.9)


def adam_moments(out):
  """(loss, Adam's mu and nu) of a step's outputs: what the Adam cases compare."""
  import optax

  _, (_, _, opt_state) = out
  [adam] = [
    s
    for s in jax.tree.leaves(opt_state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState))
    if isinstance(s, optax.ScaleByAdamState)
  ]
  return out[0], adam.mu, adam.nu


class Model:
  """What a builder makes: the step, its arguments, and the loss-and-gradient function
  of the same model (tests/models/test_models.py compares gradients)."""

  def __init__(self, step, grads, args):
    self.step, self.grads, self.args = step, grads, args


# ---------------------------------------------------------------------------------------
# flax NNX CNN (flax's MNIST tutorial: conv-bn-relu-pool x2, dense-dropout-dense)

CNN_FWD = 2 * (28 * 28 * 9 * 32 + 14 * 14 * 9 * 32 * 64 + 3136 * 256 + 256 * 10)
CNN_PARAMS = 9 * 32 + 9 * 32 * 64 + 3136 * 256 + 256 + 2570 + 4 * (32 + 64)


def nnx_cnn(b: int, rng: np.random.Generator) -> Model:
  from flax import nnx

  class CNN(nnx.Module):
    def __init__(self, rngs):
      self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), use_bias=False, rngs=rngs)
      self.bn1 = nnx.BatchNorm(32, rngs=rngs)
      self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), use_bias=False, rngs=rngs)
      self.bn2 = nnx.BatchNorm(64, rngs=rngs)
      self.linear1 = nnx.Linear(7 * 7 * 64, 256, rngs=rngs)
      self.dropout = nnx.Dropout(0.5)
      self.linear2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x, key):
      pool = lambda x: nnx.avg_pool(x, window_shape=(2, 2), strides=(2, 2))  # noqa: E731
      x = pool(nnx.relu(self.bn1(self.conv1(x))))
      x = pool(nnx.relu(self.bn2(self.conv2(x))))
      x = x.reshape(x.shape[0], -1)
      x = self.dropout(nnx.relu(self.linear1(x)), rngs=key)
      return self.linear2(x)

  import optax

  tx = _sgd()
  with _cpu():
    graphdef, params, stats = nnx.split(
      CNN(nnx.Rngs(int(rng.integers(1 << 30)))), nnx.Param, nnx.BatchStat
    )
    state = _numpy((params, stats, tx.init(params)))

  def loss_fn(params, stats, x, y, key):
    model = nnx.merge(graphdef, params, stats, copy=True)
    logits = model(x, jax.random.wrap_key_data(key))
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss, nnx.state(model, nnx.BatchStat)

  step, grads = train_step(loss_fn, tx)
  x = normal(rng, b, 28, 28, 1)
  return Model(step, grads, (state, x, _labels(rng, b), _key(rng)))


@case(
  "nnx_cnn_step",
  family=FAMILY,
  sizes=(32, 64),
  quick=(32,),
  flops=lambda b: 3 * b * CNN_FWD,
  bytes=lambda b: F32 * (6 * CNN_PARAMS + b * 28 * 28),
  label=lambda b: f"b{b} 28x28x1",
  tol=CNN_TOL,
  size_name="batch",
  requires=("flax", "optax"),
)
def _nnx_cnn_case(b, rng):
  """flax NNX CNN (MNIST tutorial shape: conv-bn-relu-pool x2, dense 256-dropout-dense 10)
  on 28x28x1, one SGD-momentum step with BatchNorm statistics and a dropout key."""
  m = nnx_cnn(b, rng)
  return m.step, m.args


# ---------------------------------------------------------------------------------------
# flax linen MLP 784-512-512-10, equinox MLP of the same shape

MLP_PARAMS = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10


def linen_mlp(b: int, rng: np.random.Generator) -> Model:
  import flax.linen as nn
  import optax

  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      x = nn.relu(nn.Dense(512)(x))
      x = nn.relu(nn.Dense(512)(x))
      return nn.Dense(10)(x)

  model, tx = MLP(), _sgd()
  x = normal(rng, b, 784)
  with _cpu():
    params = model.init(jax.random.key(int(rng.integers(1 << 30))), x)["params"]
    state = _numpy((params, (), tx.init(params)))

  def loss_fn(params, aux, x, y):
    logits = model.apply({"params": params}, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), aux

  step, grads = train_step(loss_fn, tx)
  return Model(step, grads, (state, x, _labels(rng, b)))


def equinox_mlp(b: int, rng: np.random.Generator) -> Model:
  import equinox as eqx
  import optax

  tx = _sgd()
  with _cpu():
    model = eqx.nn.MLP(
      784,
      10,
      width_size=512,
      depth=2,
      activation=jax.nn.relu,
      key=jax.random.key(int(rng.integers(1 << 30))),
    )
    params, static = eqx.partition(model, eqx.is_array)
    state = _numpy((params, (), tx.init(params)))

  def loss_fn(params, aux, x, y):
    logits = jax.vmap(eqx.combine(params, static))(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), aux

  step, grads = train_step(loss_fn, tx)
  return Model(step, grads, (state, normal(rng, b, 784), _labels(rng, b)))


@case(
  "linen_mlp_step",
  family=FAMILY,
  sizes=(64, 256),
  quick=(64,),
  flops=lambda b: 6 * b * MLP_PARAMS,
  bytes=lambda b: F32 * (6 * MLP_PARAMS + b * 784),
  label=lambda b: f"b{b} 784-512-512-10",
  tol=SGD_TOL,
  size_name="batch",
  requires=("flax", "optax"),
)
def _linen_mlp_case(b, rng):
  """flax linen MLP 784-512-512-10 (ReLU), softmax cross-entropy, one SGD-momentum step."""
  m = linen_mlp(b, rng)
  return m.step, m.args


@case(
  "equinox_mlp_step",
  family=FAMILY,
  sizes=(64, 256),
  quick=(64,),
  flops=lambda b: 6 * b * MLP_PARAMS,
  bytes=lambda b: F32 * (6 * MLP_PARAMS + b * 784),
  label=lambda b: f"b{b} 784-512-512-10",
  tol=SGD_TOL,
  size_name="batch",
  requires=("equinox", "optax"),
)
def _equinox_mlp_case(b, rng):
  """equinox eqx.nn.MLP 784-512-512-10 (ReLU, vmapped over the batch), one SGD-momentum
  step: the linen MLP's program written with another library."""
  m = equinox_mlp(b, rng)
  return m.step, m.args


# ---------------------------------------------------------------------------------------
# Transformer block (plain JAX: cases.transformer_block), Adam


def _tf_fwd(s):
  return TF_BATCH * s * 24 * TF_DIM**2 + 4 * TF_BATCH * s * s * TF_DIM


def transformer(s: int, rng: np.random.Generator) -> Model:
  import optax

  d = TF_DIM
  p = transformer_params(rng)
  tx = optax.adam(1e-3)
  with _cpu():
    state = _numpy((p, (), tx.init(p)))

  def loss_fn(p, aux, x, y):
    return jnp.mean(jnp.square(transformer_block(p, x) - y)), aux

  step, grads = train_step(loss_fn, tx)
  return Model(step, grads, (state, normal(rng, TF_BATCH, s, d), normal(rng, TF_BATCH, s, d)))


@case(
  "transformer_step",
  family=FAMILY,
  sizes=(32, 64),
  quick=(32,),
  flops=lambda s: 3 * _tf_fwd(s),
  bytes=lambda s: F32 * (12 * TF_DIM**2 * 8),
  label=lambda s: f"{TF_BATCH}x{s}x{TF_DIM} h4",
  tol=ADAM_TOL,
  size_name="sequence length",
  compare=adam_moments,
  requires=("optax",),
)
def _transformer_case(s, rng):
  """One Adam step of cases.transformer_block (pre-LN, causal attention, GELU MLP; plain
  JAX) on a mean-squared error; compares the loss and Adam's moments."""
  m = transformer(s, rng)
  return m.step, m.args


# ---------------------------------------------------------------------------------------
# LSTM through lax.scan

LSTM_B, LSTM_IN, LSTM_H = 32, 32, 128


def lstm(t: int, rng: np.random.Generator) -> Model:
  tx = _sgd()
  i, h = LSTM_IN, LSTM_H
  p = {
    "wx": normal(rng, i, 4 * h, scale=i**-0.5),
    "wh": normal(rng, h, 4 * h, scale=h**-0.5),
    "b": normal(rng, 4 * h, scale=0.1),
    "wo": normal(rng, h, 10, scale=h**-0.5),
    "bo": np.zeros(10, np.float32),
  }
  with _cpu():
    state = _numpy((p, (), tx.init(p)))

  def loss_fn(p, aux, xs, y):
    import optax

    def cell(carry, x):
      hid, c = carry
      gates = x @ p["wx"] + hid @ p["wh"] + p["b"]
      ig, fg, gg, og = jnp.split(gates, 4, axis=-1)
      c = jax.nn.sigmoid(fg) * c + jax.nn.sigmoid(ig) * jnp.tanh(gg)
      hid = jax.nn.sigmoid(og) * jnp.tanh(c)
      return (hid, c), None

    zeros = jnp.zeros((xs.shape[1], h), xs.dtype)
    (hid, _), _ = lax.scan(cell, (zeros, zeros), xs)
    logits = hid @ p["wo"] + p["bo"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), aux

  step, grads = train_step(loss_fn, tx)
  return Model(step, grads, (state, normal(rng, t, LSTM_B, i), _labels(rng, LSTM_B)))


@case(
  "lstm_step",
  family=FAMILY,
  sizes=(32, 128),
  quick=(32,),
  flops=lambda t: 3 * t * 2 * LSTM_B * (LSTM_IN + LSTM_H) * 4 * LSTM_H,
  bytes=lambda t: F32 * (6 * (LSTM_IN + LSTM_H + 1) * 4 * LSTM_H + t * LSTM_B * LSTM_IN),
  label=lambda t: f"b{LSTM_B} {t} steps h{LSTM_H}",
  tol=SGD_TOL,
  size_name="steps",
  requires=("optax",),
)
def _lstm_case(t, rng):
  """LSTM (32 inputs, 128 hidden) over t steps in lax.scan, a classifier on the last
  hidden state, one SGD-momentum step: the gradient is the reverse scan."""
  m = lstm(t, rng)
  return m.step, m.args


# ---------------------------------------------------------------------------------------
# ResNet basic block (flax linen, BatchNorm)

RES_HW, RES_C = 32, 64
RES_FWD = 2 * 2 * RES_HW * RES_HW * 9 * RES_C * RES_C


def resnet_block(b: int, rng: np.random.Generator) -> Model:
  import flax.linen as nn
  import optax

  class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
      conv = lambda: nn.Conv(RES_C, (3, 3), use_bias=False)  # noqa: E731
      bn = lambda: nn.BatchNorm(use_running_average=False, momentum=0.9)  # noqa: E731
      y = nn.relu(bn()(conv()(x)))
      y = bn()(conv()(y))
      y = nn.relu(x + y)
      return nn.Dense(10)(jnp.mean(y, axis=(1, 2)))

  model, tx = Block(), _sgd()
  x = normal(rng, b, RES_HW, RES_HW, RES_C)
  with _cpu():
    v = model.init(jax.random.key(int(rng.integers(1 << 30))), x)
    state = _numpy((v["params"], v["batch_stats"], tx.init(v["params"])))

  def loss_fn(params, stats, x, y):
    logits, new = model.apply({"params": params, "batch_stats": stats}, x, mutable=["batch_stats"])
    return (optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), new["batch_stats"])

  step, grads = train_step(loss_fn, tx)
  return Model(step, grads, (state, x, _labels(rng, b)))


@case(
  "resnet_block_step",
  family=FAMILY,
  sizes=(4, 16),
  quick=(4,),
  flops=lambda b: 3 * b * RES_FWD,
  bytes=lambda b: F32 * (6 * 2 * 9 * RES_C * RES_C + b * RES_HW * RES_HW * RES_C),
  label=lambda b: f"b{b} {RES_HW}x{RES_HW}x{RES_C}",
  tol=SGD_TOL,
  size_name="batch",
  requires=("flax", "optax"),
)
def _resnet_case(b, rng):
  """ResNet basic block (flax linen: conv3x3-BN-ReLU-conv3x3-BN, identity shortcut, ReLU)
  on 32x32x64, global average pool and a dense head, one SGD-momentum step with the
  BatchNorm statistics updated."""
  m = resnet_block(b, rng)
  return m.step, m.args


# ---------------------------------------------------------------------------------------
# Flax GPT-2 (transformers 4.x), random init, Adam

GPT_LAYERS, GPT_EMBD, GPT_HEADS, GPT_VOCAB, GPT_POS, GPT_BATCH = 2, 128, 4, 2048, 128, 4
GPT_PARAMS = 12 * GPT_LAYERS * GPT_EMBD**2 + (GPT_VOCAB + GPT_POS) * GPT_EMBD


def _gpt2_fwd(s):
  tokens = GPT_BATCH * s
  return (
    tokens * (2 * 12 * GPT_LAYERS * GPT_EMBD**2 + 2 * GPT_EMBD * GPT_VOCAB)
    + GPT_LAYERS * 4 * GPT_BATCH * s * s * GPT_EMBD
  )


def gpt2(s: int, rng: np.random.Generator) -> Model:
  os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a config only: nothing to download
  os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
  try:
    import transformers
    from transformers import FlaxGPT2LMHeadModel, GPT2Config
  except Exception as e:  # noqa: BLE001  (any failure of the Flax models to import)
    raise Skip(f"transformers' Flax GPT-2 does not import here: {type(e).__name__}: {e}")
  import optax

  transformers.logging.set_verbosity_error()
  config = GPT2Config(
    n_layer=GPT_LAYERS, n_embd=GPT_EMBD, n_head=GPT_HEADS, vocab_size=GPT_VOCAB, n_positions=GPT_POS
  )
  tx = optax.adam(1e-3)
  with _cpu():
    model = FlaxGPT2LMHeadModel(config, input_shape=(1, s), seed=int(rng.integers(1 << 30)))
    state = _numpy((model.params, (), tx.init(model.params)))

  def loss_fn(params, aux, ids, key):
    logits = model(ids, params=params, dropout_rng=jax.random.wrap_key_data(key), train=True).logits
    loss = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:])
    return loss.mean(), aux

  step, grads = train_step(loss_fn, tx)
  ids = rng.integers(0, GPT_VOCAB, (GPT_BATCH, s), dtype=np.int32)
  return Model(step, grads, (state, ids, _key(rng)))


@case(
  "gpt2_step",
  family=FAMILY,
  sizes=(64, 128),
  quick=(64,),
  flops=lambda s: 3 * _gpt2_fwd(s),
  bytes=lambda s: F32 * 8 * GPT_PARAMS,
  label=lambda s: f"b{GPT_BATCH}x{s} L{GPT_LAYERS} d{GPT_EMBD} V{GPT_VOCAB}",
  tol=ADAM_TOL,
  size_name="sequence length",
  compare=adam_moments,
  requires=("transformers", "flax", "optax"),
)
def _gpt2_case(s, rng):
  """transformers' FlaxGPT2LMHeadModel, 2 layers, n_embd 128, 4 heads, vocabulary 2048,
  random init from a GPT2Config (no weights downloaded), dropout on (a key argument),
  next-token cross-entropy, one optax Adam step; compares the loss and Adam's moments."""
  m = gpt2(s, rng)
  return m.step, m.args
