"""Training steps of library-built models (jax_plugins/workshop/bench/model_cases.py, the
benchmark's `models` family) against JAX's CPU backend.

Each builder makes a pure step from numpy pytrees built on the CPU backend, so both
backends start from the same parameters, batch and dropout key. The criterion is the
benchmark's: per output leaf, max |workshop - cpu| <= tol * max |cpu| (relative to each
leaf's largest magnitude, not elementwise: a gradient entry that is zero up to rounding has
no meaningful relative error). Needs the `models` extra (pip install -e ".[models]");
skipped without it.
"""

import jax
import numpy as np
import pytest

from jax_plugins.workshop.bench import model_cases
from jax_plugins.workshop.bench.runner import max_rel_err

pytest.importorskip("optax", reason="needs optax (pip install -e '.[models]')")


def _on(backend, fn, args):
  out = jax.jit(fn)(*jax.device_put(args, jax.devices(backend)[0]))
  return jax.tree.map(np.asarray, out)


def _per_leaf_errors(ours, ref):
  paths, _ = jax.tree.flatten_with_path(ref)
  return {
    jax.tree_util.keystr(p): max_rel_err(a, b) for (p, b), a in zip(paths, jax.tree.leaves(ours))
  }


def test_nnx_cnn_first_step_gradients_match_cpu():
  pytest.importorskip("flax.nnx", reason="needs flax (pip install -e '.[models]')")
  # Batch 8: at 32-64 a ReLU input within rounding of zero can pass its gradient on one
  # backend only (model_cases.CNN_TOL says what was measured).
  m = model_cases.nnx_cnn(8, np.random.default_rng(0))
  ours, ref = _on("workshop", m.grads, m.args), _on("cpu", m.grads, m.args)
  errors = _per_leaf_errors(ours, ref)
  assert len(errors) == 11  # the loss and 10 parameter leaves (2 convs, 2 BNs, 2 denses)
  assert max(errors.values()) <= 1e-5, errors
  # The gradient is not trivially zero anywhere (no leaf compared at the noise level).
  assert all(np.abs(g).max() > 1e-6 for g in jax.tree.leaves(ref[1]))


@pytest.mark.parametrize(
  "builder,size,module",
  [
    ("linen_mlp", 16, "flax.linen"),
    ("equinox_mlp", 16, "equinox"),
  ],
)
def test_training_step_matches_cpu(builder, size, module):
  pytest.importorskip(module, reason=f"needs {module} (pip install -e '.[models]')")
  m = getattr(model_cases, builder)(size, np.random.default_rng(1))
  ours, ref = _on("workshop", m.step, m.args), _on("cpu", m.step, m.args)
  assert max_rel_err(ours, ref) <= 1e-5, _per_leaf_errors(ours, ref)
  # The step moved the parameters.
  moved = max_rel_err(ref[1][0], jax.tree.map(np.asarray, m.args[0][0]))
  assert moved > 1e-4


def test_data_parallel_gpt2_gradients_match_cpu():
  """transformers' Flax GPT-2 (model_cases.gpt2, dropout on) with its batch of 4 sharded
  over 4 devices, parameters replicated: the partitioned gradients against the same
  program on the CPU backend's 4 devices. The step had the process abort in
  convert-global-to-local (the gradient of logits[:, :-1]: a pad whose zero Shardy keeps
  as sdy.constant), and ran its embedding, cross-entropy and dropout ops whole."""
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[models]')")
  try:
    m = model_cases.gpt2(32, np.random.default_rng(2))
  except model_cases.Skip as e:
    pytest.skip(str(e))
  state, ids, key = m.args
  outs = {}
  for backend in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(backend)[:4]), ("b",))
    args = (
      jax.device_put(state, NamedSharding(mesh, P())),
      jax.device_put(ids, NamedSharding(mesh, P("b"))),
      jax.device_put(key, NamedSharding(mesh, P())),
    )
    outs[backend] = jax.tree.map(np.asarray, jax.jit(m.grads)(*args))
  errors = _per_leaf_errors(outs["workshop"], outs["cpu"])
  assert max(errors.values()) <= 1e-4, errors
