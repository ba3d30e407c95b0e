"""Common subexpression elimination (compiler/cse.py): repeated pure instructions are
computed once, and nothing that only looks alike is merged."""

import jax.numpy as jnp
import numpy as np

from jax_plugins.workshop.compiler.cse import eliminate_common_subexpressions
from jax_plugins.workshop.compiler.plan import Instr, Plan
from reference import assert_matches_cpu
from compiler_helpers import compile_fn, ops


def optimized_ops(f, *args):
  """The ops the optimized plan runs, fusions (horizontal ones included) opened."""

  def opened(instrs):
    for i in instrs:
      if i.op == "horizontal_fusion":
        yield from opened(i.attrs["body"].instrs)
      elif i.op == "fusion":
        yield from ops(i.attrs["body"])
      else:
        yield i.op

  return list(opened(compile_fn(f, *args, fuse=True).plan.instrs))


def test_repeated_expression_is_computed_once():
  x = np.ones((8, 16), np.float32)

  def f(x):
    m = jnp.mean(x, -1, keepdims=True)
    return jnp.mean(jnp.square(x - m), -1) + jnp.sum(x - m, -1)

  assert ops(compile_fn(f, x).plan).count("subtract") == 2
  assert optimized_ops(f, x).count("subtract") == 1
  assert_matches_cpu(f, x)


def test_lookalikes_are_not_merged():
  # Same operand, no attributes, different result types: converts to f16 and to i32,
  # broadcasts to two shapes, and zero constants of two dtypes with the same bytes.
  x = np.arange(-6, 6, dtype=np.float32) / 4

  def f(x):
    a = x.astype(jnp.float16).astype(jnp.float32)
    b = x.astype(jnp.int32).astype(jnp.float32)
    c = jnp.broadcast_to(x, (2, 12)).sum() + jnp.broadcast_to(x, (3, 12)).sum()
    return a + b + c, jnp.zeros(3, jnp.int32) + jnp.int32(jnp.float32(0).view(jnp.int32))

  assert optimized_ops(f, x).count("convert") >= 4
  assert_matches_cpu(f, x)


def test_only_pure_instructions_merge_and_results_follow():
  f32 = (11, (4,))  # PJRT_Buffer_Type_F32
  u64 = (9, (2,))  # PJRT_Buffer_Type_U64
  instrs = [
    Instr("add", [0, 0], [1], {}, "a"),
    Instr("add", [0, 0], [2], {}, "b"),  # Same as a: merged, result 2 becomes 1.
    Instr("rng_bit_generator", [3], [4, 5], {"algorithm": 1}, "c"),
    Instr("rng_bit_generator", [3], [6, 7], {"algorithm": 1}, "d"),  # Impure: kept.
  ]
  slots = [f32, f32, f32, u64, u64, f32, u64, f32]
  plan = Plan(slots, [0, 3], [2, 5, 7], instrs, [[] for _ in instrs])
  out = eliminate_common_subexpressions(plan)
  assert [i.loc for i in out.instrs] == ["a", "c", "d"]
  assert out.results == [1, 5, 7]


def test_repeats_in_a_loop_body_and_a_branch_are_computed_once():
  # A gradient taken twice per step repeats its work inside the loop body; each copy would
  # run on every iteration.
  from jax import lax

  x = np.linspace(-1, 1, 64, dtype=np.float32)

  def f(x):
    def body(_, v):
      a = jnp.tanh(v * 3.0) + jnp.tanh(v * 3.0) * 0.5
      return lax.cond(a[0] > 0, lambda a: jnp.exp(a) + jnp.exp(a), lambda a: a, a)

    return lax.fori_loop(0, 5, body, x)

  plan = eliminate_common_subexpressions(compile_fn(f, x).plan)
  (loop,) = [i for i in plan.instrs if i.op == "while"]
  body = loop.attrs["body"]
  assert [i.op for i in body.instrs].count("tanh") == 1
  (case,) = [i for i in body.instrs if i.op == "case"]
  branches = [v for k, v in case.attrs.items() if k.startswith("branch_")]
  assert sorted([i.op for i in b.instrs].count("exponential") for b in branches) == [0, 1]
  assert_matches_cpu(f, x, rtol=1e-6)
