"""Library idioms run as composite kernels (compiler/idioms.py, kernels/elementwise/gelu.cc): which
programs match, that a match computes the op-by-op plan's bits, and JAX's CPU backend's
values, and that a malformed composite is an error, not a crash.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from reference import assert_matches_cpu, run_on
from compiler_helpers import compile_fn, ops


def gelu(x):
  return jax.nn.gelu(x, approximate=True)


def fused_ops(f, *args):
  """Top-level ops of the fused plan, with each fusion's body ops spelled out."""
  plan = compile_fn(f, *args, fuse=True).plan
  return [(i.op, ops(i.attrs["body"])) if i.op == "fusion" else i.op for i in plan.instrs]


def samples(n, dtype=np.float32):
  x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 4
  x[:4] = [0.0, -0.0, 12.0, -12.0][: min(n, 4)]
  return x.astype(dtype)


def test_jax_gelu_is_one_composite():
  plan = fused_ops(gelu, samples(4096))
  assert plan == ["constant"] * 4 + [("fusion", ["gelu_tanh"])]


def test_gelu_inside_a_longer_chain_joins_its_fusion():
  plan = fused_ops(lambda x, b: gelu(x + b) * 2, samples(4096), samples(4096))
  fusions = [body for op in plan if isinstance(op, tuple) for body in [op[1]]]
  assert len(fusions) == 1 and "gelu_tanh" in fusions[0] and "tanh" not in fusions[0]


@pytest.mark.parametrize(
  "name, f",
  [
    # x is itself a broadcast, read only by the idiom: it must stay.
    ("x broadcast", lambda v: gelu(jnp.broadcast_to(v, (64, 128)))),
    # x = broadcast(1.0), which CSE merges with the idiom's own `one`.
    ("x constant", lambda v: gelu(jnp.ones((64, 128), jnp.float32)) + v),
    # Two matches share the four scalar broadcasts (CSE): none is left dangling.
    ("two gelus", lambda v: (gelu(v), gelu(v * 2))),
    ("gelu of gelu", lambda v: gelu(gelu(v))),
  ],
  ids=lambda p: p if isinstance(p, str) else "",
)
def test_operands_the_idiom_shares_survive(name, f):
  v = samples(128)
  plan = compile_fn(f, v, fuse=True).plan
  bodies = [i.attrs["body"] for i in plan.instrs if i.op == "fusion"]
  assert any("gelu_tanh" in ops(b) for b in bodies), name
  # Every slot read is a parameter or written before (no producer was dropped).
  for p in [plan, *bodies]:
    defined = set(p.params)
    for instr in p.instrs:
      assert set(instr.ins) <= defined, (name, instr.op)
      defined |= set(instr.outs)
    # No broadcast is left that nothing reads.
    read = {s for instr in p.instrs for s in instr.ins} | set(p.results)
    assert all(set(i.outs) & read for i in p.instrs if i.op == "broadcast_in_dim"), name
  ours = run_on(jax.devices("workshop")[0], f, v)
  ref = run_on(jax.devices("cpu")[0], f, v)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
    assert np.max(np.abs(a - b)) <= 2e-6 * max(1.0, np.max(np.abs(b)))


def test_intermediate_read_elsewhere_is_not_matched():
  # The tanh term is also a result, so the op-by-op chain must stay.
  def f(x):
    inner = jnp.tanh(np.float32(0.7978846) * (x + np.float32(0.044715) * x**3))
    return x * (0.5 * (1.0 + inner)), inner

  plan = compile_fn(f, samples(64), fuse=True).plan
  assert "gelu_tanh" not in str(
    [i.op for i in plan.instrs]
    + [j.op for i in plan.instrs if i.op == "fusion" for j in i.attrs["body"].instrs]
  )
  assert_matches_cpu(f, samples(1000), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float64, ml_dtypes.bfloat16, np.float16])
def test_other_dtypes_run_op_by_op(dtype):
  with jax.enable_x64(True):
    plan = compile_fn(gelu, samples(64, dtype), fuse=True).plan
    bodies = [j.op for i in plan.instrs if i.op == "fusion" for j in i.attrs["body"].instrs]
    assert "gelu_tanh" not in bodies and "tanh" in bodies
    assert_matches_cpu(
      gelu,
      samples(1000, dtype),
      rtol=1e-12 if dtype == np.float64 else 2e-2,
      atol=1e-12 if dtype == np.float64 else 2e-2,
    )


# Sizes around the kernel's 1024-element chunk, fusion blocks and the pool's grain.
@pytest.mark.parametrize("n", [1, 7, 1024, 1025, 65536 * 3 + 5])
def test_composite_has_the_bits_of_the_op_by_op_plan(n, monkeypatch):
  from jax_plugins.workshop.compiler import compile as compile_module

  x = samples(n)
  x[-1] = np.nan
  device = jax.devices("workshop")[0]
  fused = run_on(device, lambda x: gelu(x), x)
  monkeypatch.setattr(compile_module.idioms, "replace_idioms", lambda plan: plan)
  op_by_op = run_on(device, lambda x: gelu(x), x)
  np.testing.assert_array_equal(fused.view(np.int32), op_by_op.view(np.int32))


@pytest.mark.parametrize("n", [7, 4097])
def test_composite_matches_cpu(n):
  # Both backends' tanh are a few ulp off; 1 + tanh cancels for x << 0, so compare to
  # the scale of the values rather than elementwise.
  x = samples(n)
  ours = run_on(jax.devices("workshop")[0], gelu, x)
  ref = run_on(jax.devices("cpu")[0], gelu, x)
  assert np.max(np.abs(ours - ref)) <= 2e-6 * np.max(np.abs(ref))


def test_malformed_composite_is_an_error(monkeypatch):
  from jax_plugins.workshop.compiler import compile as compile_module

  real = compile_module.idioms.replace_idioms

  def swapped(plan):  # x and the first scalar trade places: x is no longer one element.
    plan = real(plan)
    for instr in plan.instrs:
      if instr.op == "gelu_tanh":
        instr.ins[0], instr.ins[1] = instr.ins[1], instr.ins[0]
    return plan

  monkeypatch.setattr(compile_module.idioms, "replace_idioms", swapped)
  with pytest.raises(Exception, match="gelu_tanh at .* must be f32 with x.s 1 elements"):
    run_on(jax.devices("workshop")[0], lambda x: gelu(x), samples(8))
