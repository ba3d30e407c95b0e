"""Loop-invariant code motion (compiler/hoist.py): what an interpreted loop computes on
every iteration from constants and captures alone is computed once, before it.

The loops run interpreted (WORKSHOP_CODEGEN=0, so the code-generation tier does not take
them); results are compared with JAX's CPU backend, and the plans are inspected for what
moved and what stayed.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from codegen_helpers import plan_of, run_with
from reference import cpu_device, run_on


def bookkeeping(x, table):
  """A while loop with constants (bounds, zeros, steps), values of captures only (the
  table's scaled copy), a conditional with constants in a branch, a large broadcast."""

  def body(c):
    i, acc, buf = c
    scaled = table * 2.0 + 1.0  # captures only: invariant
    step = lax.cond(i % 3 == 0, lambda: jnp.float32(0.5), lambda: acc[0] * 0.25)
    big = jnp.full(4096, 3.0, jnp.float32)  # 16 KiB: stays in the loop
    buf = buf.at[i].set(step + scaled[i % 8] + big[i])
    return i + 1, acc + scaled[:4] * step, buf

  return lax.while_loop(lambda c: c[0] < 37, body, (0, x, jnp.zeros(64, jnp.float32)))


def _regions(instr):
  return {k: v for k, v in instr.attrs.items() if hasattr(v, "instrs")}


def test_invariants_leave_the_loop_and_results_match_cpu(monkeypatch):
  x = np.linspace(-1, 1, 4, dtype=np.float32)
  table = np.arange(8, dtype=np.float32)
  plan = plan_of(bookkeeping, x, table, env="0")
  (loop,) = [i for i in plan.instrs if i.op == "while"]
  body = loop.attrs["body"]
  body_ops = [i.op for i in body.instrs]
  # The constants of the body and of its conditional's branches left the loop ...
  assert "constant" not in body_ops, body_ops
  (case,) = [i for i in body.instrs if i.op == "case"]
  for branch in _regions(case).values():
    assert "constant" not in [i.op for i in branch.instrs]
  # ... and so did the table's scaled copy (a multiply and an add of captures only), while
  # the 16 KiB broadcast stays, and the cond's loop bound left too.
  before = [i.op for i in plan.instrs[: plan.instrs.index(loop)]]
  assert before.count("multiply") >= 1 and before.count("add") >= 1, before
  assert any(
    i.op == "broadcast_in_dim" and body.slots[i.outs[0]][1] == (4096,) for i in body.instrs
  )
  assert [i.op for i in loop.attrs["cond"].instrs] == ["compare"]
  ours = run_with(monkeypatch, "0", bookkeeping, x, table)
  reference = run_on(cpu_device(), bookkeeping, x, table)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_nested_loops_and_zero_trip_loops(monkeypatch):
  """A constant of an inner loop leaves both loops; a loop that never runs its body still
  returns its initial values (the moved instructions run once, harmlessly)."""

  def f(x, n):
    def outer(i, c):
      return lax.fori_loop(0, i + 1, lambda j, d: d * 0.5 + jnp.float32(1.5), c)

    return lax.fori_loop(0, n, outer, x)

  x = np.float32(3)
  for n in (np.int32(5), np.int32(0)):
    plan = plan_of(f, x, n, env="0")
    (loop,) = [i for i in plan.instrs if i.op == "while"]
    (inner,) = [i for i in loop.attrs["body"].instrs if i.op == "while"]
    assert "constant" not in [i.op for i in inner.attrs["body"].instrs]
    ours = run_with(monkeypatch, "0", f, x, n)
    np.testing.assert_array_equal(ours, run_on(cpu_device(), f, x, n))


def test_large_invariant_elementwise_work_leaves_the_loop(monkeypatch):
  # A closed-over f32 matrix in an x64 loop, converted to f64 for its products (a fusion of
  # one convert: 100K elements) and, as sines, summed over its rows: all of it makes no
  # more elements than it reads, so it runs once before the loop whatever its size. The
  # sines are read only by their sum, which moves too: not a loop operand. The 64 KiB
  # broadcast of a constant stays (it makes more elements than it reads).
  design = np.random.default_rng(3).standard_normal((1000, 100)).astype(np.float32)

  def fit(w):
    def body(_, w):
      big = jnp.full((64, 128), 0.5)  # float64 under x64: 64 KiB
      drift = jnp.sum(jnp.sin(design.astype(jnp.float64)), 0) * 1e-9
      return w - 1e-4 * (design @ w - 1.0) @ design + drift + big[0, :100] * 1e-6

    return lax.fori_loop(0, 25, body, w)

  w0 = np.zeros(100)
  with jax.enable_x64(True):
    plan = plan_of(fit, w0, env="0")
    (loop,) = [i for i in plan.instrs if i.op == "while"]
    body = loop.attrs["body"]
    made = [(i.op, body.slots[o][1]) for i in body.instrs for o in i.outs]
    assert not [m for m in made if m[1] == (1000, 100)], made  # no per-iteration f64 copy
    assert ("broadcast_in_dim", (64, 128)) in made
    producer = {o: i for i in plan.instrs for o in i.outs}

    def computes_sines(i):
      inner = [j.op for p in _regions(i).values() for j in p.instrs]
      return i.op == "sine" or "sine" in inner

    sines = [s for s in loop.ins if s in producer and computes_sines(producer[s])]
    assert not sines  # read only by their sum, which moved too
    assert any(computes_sines(i) for i in plan.instrs[: plan.instrs.index(loop)])
    ours = run_with(monkeypatch, "0", fit, w0)
    reference = run_on(cpu_device(), fit, w0)
  np.testing.assert_allclose(ours, reference, rtol=1e-12)


def test_unchanged_carries_are_the_loops_operands(monkeypatch):
  """hoist.forward_unchanged_carries: a closed-over matrix (which JAX carries through the
  loop unchanged) is no result of the loop, interpreted (WORKSHOP_CODEGEN=0) or generated,
  in an inner loop too; a program that returns the carried value itself, and a loop whose
  trip count is zero, still match the CPU backend."""
  a = (np.random.default_rng(5).standard_normal((96, 96)) / 10).astype(np.float32)

  def f(x, n):
    def inner(j, v):
      return jnp.tanh(a @ v) + j

    def outer(i, c):
      v, m = c
      return lax.fori_loop(0, 3, inner, v), m  # m: carried, returned unchanged

    v, m = lax.fori_loop(0, n, outer, (x, a.T * 2))
    return v, m  # the unchanged carry is a result of the program

  x = np.linspace(-1, 1, 96, dtype=np.float32)
  for setting in ("0", "1"):
    for n in (np.int32(4), np.int32(0)):
      plan = plan_of(f, x, n, env=setting)
      loops = [i for i in plan.instrs if i.op in ("while", "jit_loop")]
      assert loops
      for loop in loops:  # no result of the 96x96 shape
        assert (96, 96) not in [plan.slots[s][1] for s in loop.outs], loop.op
        if loop.op == "while":
          for i in loop.attrs["body"].instrs:
            if i.op in ("while", "jit_loop"):
              body = loop.attrs["body"]
              assert (96, 96) not in [body.slots[s][1] for s in i.outs]
      ours = run_with(monkeypatch, setting, f, x, n)
      theirs = run_on(cpu_device(), f, x, n)
      for o, t in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(o, t, rtol=2e-6, atol=2e-6)
