"""Independent small generated fusions run as one kernel (compiler/horizontal.py,
`horizontal_fusion` in kernels/fusion.cc).

An optimizer update over a pytree is the case the mechanism is for: per-leaf elementwise
chains of different sizes, each too small for the thread pool alone. Each case checks the
plan (the members are grouped, no member reads another's value), that the results are the
bits of the same fusions run one by one (the pass turned off) and of the interpreter, and
compares with JAX's CPU backend and float64 numpy.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codegen_helpers import plan_of, run_with, serialized_round_trip
from codegen_helpers import private_cache  # noqa: F401  (an autouse fixture: importing it applies it)
from jax_plugins.workshop.compiler import codegen, horizontal
from jax_plugins.workshop.compiler.codegen import fusions
from reference import cpu_device, default_tol, run_on

rng = np.random.default_rng(36)
# Leaves of 1K-60K floats, geometrically spaced (as a model's parameter arrays), whose
# update has enough work in total for every thread but not per leaf.
SIZES = [int(s) for s in np.geomspace(1000, 60_000, 12)]


@pytest.fixture(autouse=True)
def every_shared_region(monkeypatch):
  """Repeated flat fusions are compiled whatever their total work (MIN_WORK is a compile
  time trade-off, tests/ops/test_codegen_fusion.py), so the cases stay small."""
  monkeypatch.setattr(fusions, "MIN_WORK", 0)
  codegen._emitted.clear()  # pylint: disable=protected-access
  yield
  codegen._emitted.clear()  # pylint: disable=protected-access


def leaves(sizes=SIZES, scale=1.0):
  return [(rng.standard_normal(n) * scale).astype(np.float32) for n in sizes]


def adam(p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
  m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
  v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
  p = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + eps), p, m, v)
  return p, m, v


def adam64(ps, gs, ms, vs, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
  """Adam's update of each leaf in float64."""
  out = [[], [], []]
  for leaf in zip(ps, gs, ms, vs):
    p, g, m, v = (np.asarray(a, np.float64) for a in leaf)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    for o, x in zip(out, (p - lr * m / (np.sqrt(v) + eps), m, v)):
      o.append(x)
  return out


def horizontal_instrs(f, *args):
  return [i for i in plan_of(f, *args).instrs if i.op == "horizontal_fusion"]


def test_adam_over_leaves_is_two_kernels(monkeypatch):
  args = (leaves(), leaves(), leaves(scale=0.1), [np.abs(x) for x in leaves(scale=0.01)])
  plan = plan_of(adam, *args)
  groups = [i for i in plan.instrs if i.op == "horizontal_fusion"]
  # Each leaf's m, v and parameter steps are one fusion with three results (the fusion
  # pass sees each leaf's chain together, fusion._chains_together), and the leaves'
  # fusions are one horizontal fusion.
  assert len(groups) == 1
  assert len([i for i in plan.instrs if i.op != "constant"]) == 1
  members = groups[0].attrs["body"].instrs
  assert len(members) == len(SIZES) and all(len(i.outs) == 3 for i in members)
  for g in groups:
    body = g.attrs["body"]
    made = {s for i in body.instrs for s in i.outs}
    assert all(i.op in ("fusion", "jit_fusion") and not made & set(i.ins) for i in body.instrs)
    assert {s for i in body.instrs for s in i.ins} <= set(body.params)
  got = run_with(monkeypatch, "1", adam, *args)
  want64 = adam64(*args)
  cpu = run_on(cpu_device(), adam, *args)
  for got_leaves, cpu_leaves, want_leaves in zip(got, cpu, want64):
    for a, c, w in zip(got_leaves, cpu_leaves, want_leaves):
      np.testing.assert_allclose(a, c, rtol=default_tol(np.float32), atol=1e-7)
      np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-7)


def test_same_bits_as_one_by_one_and_interpreted(monkeypatch):
  # Lion's update: sign() and a decay; results must not depend on how the tasks were
  # shared out, nor on the grouping.
  p, g, m = leaves(), leaves(), leaves(scale=0.1)

  def lion(p, g, m, lr=1e-4, b1=0.9, b2=0.99, wd=0.01):
    def upd(p, g, m):
      u = jnp.sign(b1 * m + (1 - b1) * g)
      return p - lr * (u + wd * p), b2 * m + (1 - b2) * g

    return jax.tree.map(upd, p, g, m)

  assert len(horizontal_instrs(lion, p, g, m)) == 1
  grouped = run_with(monkeypatch, "1", lion, p, g, m)
  monkeypatch.setattr(horizontal, "fuse_horizontally", lambda plan: plan)
  one_by_one = run_with(monkeypatch, "1", lion, p, g, m)
  interpreted = run_with(monkeypatch, "0", lion, p, g, m)
  for a, b, c in zip(
    jax.tree.leaves(grouped), jax.tree.leaves(one_by_one), jax.tree.leaves(interpreted)
  ):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
  for a, w in zip(jax.tree.leaves(grouped), jax.tree.leaves(run_on(cpu_device(), lion, p, g, m))):
    np.testing.assert_allclose(a, w, rtol=default_tol(np.float32), atol=1e-7)


@pytest.mark.parametrize("setting", ["0", "1"])
def test_interpreted_fusions_of_distinct_shapes_are_one_kernel(monkeypatch, setting):
  # An SGD step with momentum on a small MLP's parameters (weights, biases, a layer norm's
  # scale): distinct shapes, each fusion interpreted (too small to compile); each member
  # runs whole as one task of the kernel.
  shapes = [(64, 32), (32,), (32, 16), (16,), (16,), (16, 10), (10,)]
  p = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  g = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  mom = [rng.standard_normal(s).astype(np.float32) for s in shapes]

  def sgd(p, g, mom):
    mom = jax.tree.map(lambda m, g: 0.9 * m + g, mom, g)
    return jax.tree.map(lambda p, m: p - 0.01 * m, p, mom), mom

  groups = [i for i in plan_of(sgd, p, g, mom, env=setting).instrs if i.op == "horizontal_fusion"]
  # One fusion per leaf (its momentum and parameter; the two (16,) leaves' chains, one
  # after the other and of one size, in one), the leaves' fusions one kernel.
  assert len(groups) == 1
  members = groups[0].attrs["body"].instrs
  assert {m.op for m in members} == {"fusion"} and len(members) == len(shapes) - 1
  assert sum(len(m.outs) for m in members) == 2 * len(shapes)
  got = run_with(monkeypatch, setting, sgd, p, g, mom)
  for a, c in zip(jax.tree.leaves(got), jax.tree.leaves(run_on(cpu_device(), sgd, p, g, mom))):
    np.testing.assert_allclose(a, c, rtol=default_tol(np.float32), atol=1e-6)
  m64 = [0.9 * m.astype(np.float64) + x for m, x in zip(mom, g)]
  for a, w in zip(got[0], [x - 0.01 * m for x, m in zip(p, m64)]):
    np.testing.assert_allclose(a, w, rtol=1e-6, atol=1e-6)


def test_a_leaf_with_work_of_its_own_stays_alone():
  # The large leaf has parts of its own on the pool (and delaying it to the group's end
  # would keep its operands alive longer): a jit_fusion beside the group.
  xs = leaves(SIZES + [1 << 20])
  f = lambda xs: [x * 2 + 1 for x in xs]  # noqa: E731
  plan = plan_of(f, xs)
  (group,) = [i for i in plan.instrs if i.op == "horizontal_fusion"]
  assert [i.attrs["items"] for i in group.attrs["body"].instrs] == SIZES
  assert any(i.op == "jit_fusion" and i.attrs["items"] == 1 << 20 for i in plan.instrs)
  for a, x in zip(run_on(jax.devices("workshop")[0], f, xs), xs):
    np.testing.assert_allclose(a, x.astype(np.float64) * 2 + 1, rtol=1e-7)


def test_donated_parameters_are_updated(monkeypatch):
  # The kernel never writes over operands; a donated parameter's result is copied in.
  p, g = leaves(), leaves()
  update = lambda p, g: jax.tree.map(lambda p, g: p - 0.1 * g * g, p, g)  # noqa: E731
  assert len(horizontal_instrs(update, p, g)) == 1
  step = jax.jit(update, donate_argnums=0)
  device = jax.devices("workshop")[0]
  want = [x - np.float32(0.1) * y * y for x, y in zip(p, g)]
  got = step(jax.device_put(p, device), jax.device_put(g, device))
  for a, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(a), w, rtol=1e-6)


def test_serialized_executable_runs_interpreted_without_generated_code(monkeypatch):
  x = rng.standard_normal(200_000).astype(np.float32)

  def f(v):  # Three independent chains on slices, then one array: one group.
    a, b, c = v[:50_000], v[50_000:120_000], v[120_000:]
    return jnp.concatenate([a * 2 + 1, b * 2 + 1, c * 2 + 1])

  assert len(horizontal_instrs(f, x)) == 1
  generated = run_with(monkeypatch, "1", f, x)
  loaded, without_jit = serialized_round_trip(monkeypatch, f, x, b"jit_fusion")
  np.testing.assert_array_equal(loaded, generated)
  np.testing.assert_array_equal(without_jit, generated)
  np.testing.assert_allclose(generated, x.astype(np.float64) * 2 + 1, rtol=1e-7)
