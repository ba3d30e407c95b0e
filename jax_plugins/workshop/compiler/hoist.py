"""Loop-invariant code motion for the loops the interpreter runs.

An interpreted `while` runs every instruction of its cond and body on every iteration,
and each costs a kernel dispatch and an allocation (about 1 us on the 2-core test VM).
JAX's loops carry much that never changes: the constants of the bookkeeping (bounds,
zeros, the `1` of a counter), broadcasts and converts of them, and values computed from
captures only. Such an instruction is moved in front of the loop and its result passed in
as one more capture, as XLA's WhileLoopInvariantCodeMotion does: it then runs once.

What moves (`_movable`): a pure instruction (optable `pure`, no sub-plan) whose operands
are all loop-invariant (captures, carried values the body returns unchanged, which is how
JAX passes what a loop closes over, or results of instructions that move) and whose results
are small (`MAX_BYTES` in all: a broadcast or iota to a large shape stays in the loop
rather than keep a large value alive across it, as XLA leaves them) or no larger in
elements than an operand: an elementwise op or a fusion of them (fusion ran before this
pass), a convert of a captured matrix to f64, its column sums (`_not_inflating`). A moved
value that only other moved instructions read is not passed into the loop. Out of a `case`
branch only what depends on no operand moves (constants and what is made of them): the
rest would run whether or not the branch is taken. Regions are processed inside out, so
a constant of a conditional inside a loop body leaves the conditional, then the loop.

Generated loops (`jit_loop`) are left alone: their code holds constants as immediates and
indexes its kernel calls by instruction position.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .optable import ELEMENTWISE, PURE
from .plan import Instr, Plan, free_lists

# Largest total size in bytes of the results of one instruction moved out of a loop.
MAX_BYTES = 4096

_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 2, 8: 4, 9: 8, 10: 2, 11: 4, 12: 8, 13: 2}


def _bytes(slot) -> int:
  code, dims = slot
  return _BYTES.get(code, 16) * int(np.prod(dims, dtype=np.int64))


def hoist_loop_invariants(plan: Plan) -> Plan:
  """`plan` with the invariant instructions of every interpreted while (and constants of
  every case branch) moved in front of it, at any depth of sub-plans."""
  slots = list(plan.slots)
  instrs: list[Instr] = []
  changed = False
  for instr in plan.instrs:
    if instr.op not in ("while", "case"):
      instrs.append(instr)
      continue
    regions = _region_names(instr)
    if regions is None:
      instrs.append(instr)
      continue
    attrs = dict(instr.attrs)
    for name in regions:
      attrs[name] = hoist_loop_invariants(attrs[name])
    inner = Instr(instr.op, list(instr.ins), list(instr.outs), attrs, instr.loc)
    moved, inner = _hoist(slots, inner, regions)
    changed = changed or bool(moved) or any(attrs[n] is not instr.attrs[n] for n in regions)
    instrs.extend(moved)
    instrs.append(inner)
  if not changed:
    return plan
  return Plan(slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


def _region_names(instr: Instr) -> list[str] | None:
  if instr.op == "while":
    names = ["cond", "body"]
  else:
    count = instr.attrs.get("branches")
    if not isinstance(count, int) or count < 1:
      return None
    names = [f"branch_{b}" for b in range(count)]
  if not all(isinstance(instr.attrs.get(n), Plan) for n in names):
    return None
  return names


def _movable(region: Plan, instr: Instr, invariant: set[int]) -> bool:
  """Out of a branch, whose invariants are moved constants only, a large value cannot
  qualify: it would be a large constant or be made by an op that inflates (a broadcast, an
  iota), and neither moves."""
  if not instr.outs or not all(s in invariant for s in instr.ins):
    return False
  if instr.op in _FUSIONS:
    return _not_inflating(region, instr)
  return (
    instr.op in PURE
    and not any(isinstance(v, Plan) for v in instr.attrs.values())
    and (
      sum(_bytes(region.slots[s]) for s in instr.outs) <= MAX_BYTES or _not_inflating(region, instr)
    )
  )


# Fusion passes ran before this one: an elementwise chain in a loop body is one of these,
# its body of elementwise ops, broadcasts, slices, concatenates and reductions (pure).
_FUSIONS = ("fusion", "jit_fusion")


def _elements(slot) -> int:
  return int(np.prod(slot[1], dtype=np.int64))


def _not_inflating(region: Plan, instr: Instr) -> bool:
  """An elementwise op or a fusion of them making no more elements than its largest
  operand has. Computed once before the loop, it saves a pass per iteration (a Hamiltonian
  Monte Carlo sampler in x64 converted its closed-over f32 design matrix, 1000x20, to f64
  on every leapfrog step) and stays alive for the whole loop: one such value costs what
  the loop held during each iteration anyway, but several that the body made one after
  another, each freed before the next, are now alive together (8 invariant 1000x1000 f32
  fusions: peak 8 -> 36 MB). XLA's WhileLoopInvariantCodeMotion moves them without a cap
  too (known_gaps.md). Broadcasts and iotas of invariants, which make more elements than
  they read, stay in the loop (XLA leaves them too, as not worth hoisting on their own)."""
  if not (instr.op in ELEMENTWISE or instr.op in _FUSIONS) or not instr.ins:
    return False
  most = max(_elements(region.slots[s]) for s in instr.ins)
  return all(_elements(region.slots[s]) <= most for s in instr.outs)


def _hoist(slots: list, instr: Instr, regions: list[str]) -> tuple[list[Instr], Instr]:
  """(instructions to run before `instr` in the enclosing plan, whose slot list `slots`
  grows by their results; `instr` taking those results as new trailing operands)."""
  is_while = instr.op == "while"
  # Region parameter k is enclosing operand first + k: a while's regions take all of its
  # operands, a case's branches all but the index.
  first = 0 if is_while else 1
  carried = len(instr.outs) if is_while else len(instr.ins) - 1
  # A carried value the body returns as it got it never changes (JAX carries the values
  # a loop closes over this way, not as captures): invariant too.
  body = instr.attrs["body"] if is_while else None
  unchanged = set(_unchanged_carries(body, carried)) if is_while else set()
  moved: list[Instr] = []
  new_operands: list[int] = []
  new_params: dict[str, list[int]] = {name: [] for name in regions}
  plans: dict[str, Plan] = {}
  for name in regions:
    region: Plan = instr.attrs[name]
    # Invariant slots of the region -> the enclosing slot holding the same value.
    outer: dict[int, int] = {
      p: instr.ins[first + k] for k, p in enumerate(region.params) if k >= carried or k in unchanged
    }
    keep: list[Instr] = []
    region_slots = list(region.slots)
    for inner in region.instrs:
      if not _movable(region, inner, outer.keys()):
        keep.append(inner)
        continue
      outs = []
      for s in inner.outs:
        slots.append(region.slots[s])
        outs.append(len(slots) - 1)
        outer[s] = outs[-1]
      moved.append(Instr(inner.op, [outer[s] for s in inner.ins], outs, inner.attrs, inner.loc))
      # The region now receives each result as a parameter (its slot number is kept).
      for s, o in zip(inner.outs, outs):
        new_operands.append(o)
        new_params[name].append(s)
    plans[name] = (region, keep, region_slots)
  if not moved:
    return [], instr
  # A moved value only other moved instructions read (a converted matrix whose column sums
  # moved too) is not passed in: the loop would keep it alive for nothing.
  read = {
    name: {s for i in plans[name][1] for s in i.ins} | set(plans[name][0].results)
    for name in regions
  }
  for name in regions:
    for s in list(new_params[name]):
      if s not in read[name]:
        k = _index(new_params, regions, name, s)
        del new_operands[k]
        new_params[name].remove(s)
  attrs = dict(instr.attrs)
  for name in regions:
    region, keep, region_slots = plans[name]
    params = list(region.params)
    for other in regions:
      for s in new_params[other]:
        if other == name:
          params.append(s)
        else:  # a value another region uses: an unused parameter of this one
          region_slots.append(slots[new_operands[_index(new_params, regions, other, s)]])
          params.append(len(region_slots) - 1)
    attrs[name] = dataclasses.replace(
      region,
      slots=region_slots,
      params=params,
      instrs=keep,
      frees=free_lists(keep, region.results),
    )
  return moved, Instr(instr.op, list(instr.ins) + new_operands, list(instr.outs), attrs, instr.loc)


def _index(new_params: dict[str, list[int]], regions: list[str], name: str, slot: int) -> int:
  """Position among the new operands of `slot` moved out of region `name`."""
  offset = 0
  for other in regions:
    if other == name:
      return offset + new_params[other].index(slot)
    offset += len(new_params[other])
  raise AssertionError(name)


def forward_unchanged_carries(plan: Plan) -> Plan:
  """`plan` with every `while` result that its body returns as it got it (how JAX carries
  what a loop closes over: a solver's matrix, a decoder's weights) replaced by the loop's
  operand, at any depth of sub-plans, as XLA's WhileLoopSimplifier removes such tuple
  elements. The value becomes a capture of the loop (regions take it after the other
  captures), so no loop, interpreted or generated, writes it out again: a generated
  loop copied each carry to its result, 4 MiB per call for a conjugate-gradient solve of
  a closed-over 1024x1024 matrix. A loop all of whose carries are unchanged is left as it
  is (its condition reads only those; it runs zero times or forever)."""
  replace: dict[int, int] = {}
  instrs: list[Instr] = []
  for instr in plan.instrs:
    ins = [replace.get(s, s) for s in instr.ins]
    attrs = instr.attrs
    if instr.op in ("while", "case"):
      attrs = {
        k: forward_unchanged_carries(v) if isinstance(v, Plan) else v for k, v in attrs.items()
      }
    new = Instr(instr.op, ins, list(instr.outs), attrs, instr.loc)
    if instr.op == "while":
      new, forwarded = _capture_unchanged(new)
      replace.update(forwarded)
    instrs.append(new)
  results = [replace.get(s, s) for s in plan.results]
  return Plan(plan.slots, plan.params, results, instrs, free_lists(instrs, results))


def _capture_unchanged(instr: Instr) -> tuple[Instr, dict[int, int]]:
  """(`instr`, a while, with its unchanged carries moved to the end of its captures; its
  former result slot -> the operand slot now holding that value)."""
  body, cond = instr.attrs.get("body"), instr.attrs.get("cond")
  carried = len(instr.outs)
  if not isinstance(body, Plan) or not isinstance(cond, Plan):
    return instr, {}
  if len(body.params) != len(instr.ins) or len(cond.params) != len(instr.ins):
    return instr, {}
  if len(body.results) != carried:
    return instr, {}
  unchanged = _unchanged_carries(body, carried)
  if not unchanged or len(unchanged) == carried:
    return instr, {}
  keep = [k for k in range(carried) if k not in unchanged]
  order = keep + list(range(carried, len(instr.ins))) + unchanged

  def region(r: Plan, results: list[int]) -> Plan:
    return Plan(
      r.slots, [r.params[k] for k in order], results, r.instrs, free_lists(r.instrs, results)
    )

  attrs = dict(instr.attrs)
  attrs["body"] = region(body, [body.results[k] for k in keep])
  attrs["cond"] = region(cond, list(cond.results))
  new = Instr(
    instr.op, [instr.ins[k] for k in order], [instr.outs[k] for k in keep], attrs, instr.loc
  )
  return new, {instr.outs[k]: instr.ins[k] for k in unchanged}


def _unchanged_carries(body: Plan, carried: int) -> list[int]:
  """The carried positions a while body returns as it got them (k < `carried`)."""
  return [k for k in range(carried) if body.results[k] == body.params[k]]
