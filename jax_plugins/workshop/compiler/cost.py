"""Cost analysis: PJRT_Executable_GetCostAnalysis, i.e. `compiled.cost_analysis()`.

A simple, per-device model over the plan's kernels (the program one device runs), in the
spirit of XLA's HloCostAnalysis:

  * "flops" (per kernel, by its OpSpec.cost class in optable.py): arithmetic per output
    element: 1 for elementwise arithmetic and comparisons;
    2 * K per output element for dot_general (a multiply and an add per contracted element,
    K = product of the contracting dims) and for convolution (K = the kernel's elements
    per output feature: window times input features per group); one per input element
    for reductions and
    all-reduce; 0 for data movement (reshape, transpose, slice, broadcast, convert, ...).
  * "transcendentals": one per output element of exp, log, sin, tanh, sqrt, power, ...
    (counted here instead of in flops, as XLA does).
  * "bytes accessed": for every kernel, the bytes of its operands plus its results.
  * Sub-plans (while bodies, case branches) are counted once: trip counts are not known.

Everything is an estimate for comparing programs, not a prediction of run time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from . import dtypes
from .optable import SPECS
from .plan import Instr, Plan


def cost_analysis(plan: Plan) -> dict[str, float]:
  """{"flops", "transcendentals", "bytes accessed"} of running `plan` once."""
  flops = transcendentals = bytes_accessed = 0
  for instr, p in _instrs(plan):
    ins = [_elements(p, s) for s in instr.ins]
    outs = [_elements(p, s) for s in instr.outs]
    bytes_accessed += sum(_bytes(p, s) for s in (*instr.ins, *instr.outs))
    cost = SPECS[instr.op].cost  # legalize.py has rejected ops missing from the table
    if cost == "transcendental":
      transcendentals += sum(outs)
    elif cost == "dot":
      lhs_dims = p.slots[instr.ins[0]][1]
      k = math.prod(lhs_dims[d] for d in instr.attrs.get("lhs_contract", []))
      flops += 2 * k * sum(outs)
    elif cost == "conv":
      rhs_dims = p.slots[instr.ins[1]][1]
      out_features = rhs_dims[instr.attrs["rhs_layout"][0]]
      flops += 2 * (ins[1] // max(out_features, 1)) * sum(outs)
    elif cost == "reduction":
      flops += ins[0] if ins else 0
    elif cost == "elementwise":
      flops += sum(outs)
  return {
    "flops": float(flops),
    "transcendentals": float(transcendentals),
    "bytes accessed": float(bytes_accessed),
  }


def _instrs(plan: Plan) -> Iterator[tuple[Instr, Plan]]:
  """Every instruction with the plan it belongs to, sub-plans included (once each)."""
  for instr in plan.instrs:
    yield instr, plan
    for value in instr.attrs.values():
      if isinstance(value, Plan):
        yield from _instrs(value)


def _elements(plan: Plan, slot: int) -> int:
  return math.prod(plan.slots[slot][1])


def _bytes(plan: Plan, slot: int) -> int:
  code, dims = plan.slots[slot]
  dtype = dtypes.by_code(code)
  return math.prod(dims) * (dtype.numpy.itemsize if dtype else 0)
