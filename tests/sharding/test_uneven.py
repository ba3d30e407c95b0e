"""Shardings that do not divide a value, on 4 devices, against JAX's CPU backend.

Public reports jax#24576 (concatenate of slices), #15773 (roll), #31798 (gradient of pad +
VALID conv with the sequence axis sharded): insert-explicit-reshards reshards a 3-element
slice of an 8-element x sharded 4 ways to the concatenate's sharding, which
convert-global-to-local cannot localize. The op that needs such a value runs whole
(compiler/spmd/fallback.py `_is_local`) and the uneven reshard is bypassed
(`drop_uneven_reshards`). Values and output shardings must be the CPU backend's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def _pad_conv_grad(x, w):
  def loss(x, w):
    xp = jnp.pad(x, ((0, 0), (2, 0), (0, 0)))
    y = jax.lax.conv_general_dilated(xp, w, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"))
    return (y**2).sum()

  return jax.grad(loss, argnums=(0, 1))(x, w)


_RNG = np.random.default_rng(0)
X8 = np.arange(8, dtype=np.float32)
X16 = np.arange(16, dtype=np.float32) * 0.5 - 3
CASES = {
  # name: (f, args, partition specs of the args)
  "concatenate_of_slices": (lambda x: jnp.concatenate([x[5:], x[:5]]), (X8,), (P("x"),)),
  "roll": (lambda v: jnp.roll(v, 1), (X16,), (P("x"),)),
  "pad_conv_gradient": (
    _pad_conv_grad,
    (
      _RNG.standard_normal((2, 16, 3)).astype(np.float32),
      _RNG.standard_normal((3, 3, 4)).astype(np.float32),
    ),
    (P(None, "x"), P()),
  ),
  "slice_then_scale": (lambda x: x[1:] * 2, (X16,), (P("x"),)),
  "pad_to_19": (lambda x: jnp.pad(x, (1, 2)), (X16,), (P("x"),)),
  "diff": (jnp.diff, (X16,), (P("x"),)),
  "roll_rows": (lambda x: jnp.roll(x, 3, axis=0), (X16.reshape(8, 2),), (P("x"),)),
  "concatenate_to_19": (lambda x: jnp.concatenate([x, x[:3]]), (X16,), (P("x"),)),
  "valid_convolve": (
    lambda x: jnp.convolve(x, jnp.array([1.0, 2.0, 3.0]), mode="valid"),
    (X16,),
    (P("x"),),
  ),
  "sum_of_slice": (lambda x: x[3:].sum(), (X16,), (P("x"),)),
  "column_slice": (lambda x: x[:, 1:] + 1, (X16.reshape(2, 8),), (P(None, "x"),)),
}


A = _RNG.standard_normal((8, 12)).astype(np.float32)
# On a 2 x 2 mesh ("x", "y").
CASES_2D = {
  "concatenate_of_column_slices": (
    lambda a: jnp.concatenate([a[:, 5:], a[:, :5]], axis=1),
    (A,),
    (P("x", "y"),),
  ),
  "roll_both_dims": (lambda a: jnp.roll(a, (1, 2), axis=(0, 1)), (A,), (P("x", "y"),)),
  "cumsum_of_slice": (lambda a: jnp.cumsum(a[1:], axis=0), (A,), (P("x", "y"),)),
  "gradient_of_slice": (jax.grad(lambda a: (a[1:, 2:] ** 2).sum()), (A,), (P("x", "y"),)),
  "roll_over_both_axes": (lambda v: jnp.roll(v, 3), (A.reshape(96),), (P(("x", "y")),)),
}


def _run(platform, f, args, specs, shape=(4,), names=("x",)):
  mesh = Mesh(np.array(jax.devices(platform)[:4]).reshape(shape), names)
  placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
  return jax.jit(f)(*placed)


@pytest.mark.parametrize("name", [*sorted(CASES), *sorted(CASES_2D)])
def test_uneven_sharding_matches_cpu(name):
  if name in CASES:
    f, args, specs = CASES[name]
    mesh = {}
  else:
    f, args, specs = CASES_2D[name]
    mesh = {"shape": (2, 2), "names": ("x", "y")}
  ours = _run("workshop", f, args, specs, **mesh)
  ref = _run("cpu", f, args, specs, **mesh)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    assert a.sharding.spec == b.sharding.spec, (a.sharding, b.sharding)
