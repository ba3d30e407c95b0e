"""Common subexpression elimination: an instruction that repeats an earlier one is dropped.

JAX emits the same computation more than once when the user's code spells it twice: a
layer norm computes `x - mean` for the variance and again for the result, each with its
own broadcast of `mean`. Every copy is one more pass over the data (one more step per
block inside a fusion), so an instruction with the same kernel, operands and attributes as
an earlier pure one is removed and its result slot replaced by the earlier result.

Only the kernels listed in _PURE are merged: their result depends on nothing but their
operands and attributes. Instructions with sub-plan attributes (while, case, general
reduce bodies) are never merged; the cond and body of a `while` and the branches of a
`case` get their own elimination, as XLA's CSE runs on every computation: a loop body that
spells a value twice would compute it twice on every iteration (an HMC leapfrog's
gradient, taken twice, converted its closed-over f32 design matrix to f64 four times).
"""

from __future__ import annotations

from .plan import Instr, Plan, free_lists
from .optable import PURE as _PURE


def eliminate_common_subexpressions(plan: Plan) -> Plan:
  """`plan` without repeated pure instructions, in its loops' and conditionals' regions
  too (at any depth)."""
  seen: dict[tuple, list[int]] = {}
  replace: dict[int, int] = {}
  instrs: list[Instr] = []
  for instr in plan.instrs:
    ins = [replace.get(s, s) for s in instr.ins]
    attrs = instr.attrs
    if instr.op in ("while", "case"):
      attrs = {
        k: eliminate_common_subexpressions(v) if isinstance(v, Plan) else v
        for k, v in attrs.items()
      }
    instr = Instr(instr.op, ins, instr.outs, attrs, instr.loc)
    key = _key(plan, instr)
    if key is not None and key in seen:
      replace.update(zip(instr.outs, seen[key]))
      continue
    if key is not None:
      seen[key] = instr.outs
    instrs.append(instr)
  results = [replace.get(s, s) for s in plan.results]
  return Plan(plan.slots, plan.params, results, instrs, free_lists(instrs, results))


def _key(plan: Plan, instr: Instr) -> tuple | None:
  """A hashable identity of what `instr` computes; None if it must not be merged.

  The result types are part of it: a convert's target dtype, a reshape's or broadcast's
  shape and a constant's dtype live only there.
  """
  if instr.op not in _PURE:
    return None
  attrs = []
  for name, value in sorted(instr.attrs.items()):
    if isinstance(value, list):
      value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
    elif isinstance(value, float):
      value = repr(value)  # -0.0 == 0.0, but they are different attributes.
    elif not isinstance(value, (int, str, bytes)):
      return None  # A sub-plan.
    attrs.append((name, value))
  return (instr.op, tuple(instr.ins), tuple(plan.slots[s] for s in instr.outs), tuple(attrs))
