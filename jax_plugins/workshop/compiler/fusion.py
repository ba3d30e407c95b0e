"""Elementwise fusion: runs of elementwise kernels become one `fusion` kernel.

Unfused, `x * 2 + 1` on N elements is four kernels (two scalar broadcasts, multiply, add),
each streaming N elements through memory. Fused, the C++ `fusion` kernel walks the N
elements in cache-sized blocks and runs the same kernels on each block, so intermediates
stay in L1 and memory sees one read of x and one write of the result; blocks are spread over
the thread pool (plugin_src/kernels/fusion.cc).

A group is a maximal run of consecutive instructions that are elementwise (rules/
elementwise.py's ELEMENTWISE) or broadcast a one-element operand, all producing N elements.
Its operands are the slots it reads but does not define; its results are the slots it
defines that anything after it (or the plan's results) still reads. The group's
instructions become the `body` sub-plan of the fusion instruction, unchanged, so every
kernel a fusion runs is an ordinary kernel with its ordinary error messages.
"""

from __future__ import annotations

import math

from .lowering import free_lists
from .plan import Instr, Plan
from .rules.elementwise import ELEMENTWISE


def fuse_plan(plan: Plan) -> Plan:
  """`plan` with its elementwise runs fused (sub-plans of while/case are left as they are)."""
  instrs = fuse(plan.slots, plan.instrs, plan.results)
  return Plan(plan.slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


def fuse(slots: list[tuple[int, tuple[int, ...]]], instrs: list[Instr],
         results: list[int]) -> list[Instr]:
  """Returns `instrs` with each fusible run of two or more instructions replaced.

  An instruction that interrupts a run without reading anything the run defines (the
  per-row statistics of a layer norm, computed between two of its full-size ops) moves
  before the run, so the run goes on; the moved instructions are fused among themselves.
  """
  out: list[Instr] = []
  group: list[Instr] = []
  moved: list[Instr] = []  # Met during the group, independent of it: run before it.
  defined: set[int] = set()
  elements = -1

  def flush(next_index: int) -> None:
    rest = instrs[next_index:]
    if moved:  # What the group and everything after it read is still needed after them.
      later = results + [s for i in group + rest for s in i.ins]
      moved[:] = fuse(slots, moved, later)
    if len(group) >= 2:
      out.extend(moved)
      out.append(_fusion(slots, group, rest, results))
    else:  # Nothing moved past a single instruction: keep the original order.
      out.extend(group + moved)
    group.clear()
    moved.clear()
    defined.clear()

  for i, instr in enumerate(instrs):
    n = _fusible_elements(slots, instr)
    if group and n == elements:
      group.append(instr)
      defined.update(instr.outs)
      continue
    # A bigger fusible instruction ends a group rather than moving: big runs matter more.
    if group and not defined.intersection(instr.ins) and (n is None or n < elements):
      moved.append(instr)
      continue
    flush(i)
    if n is None:
      out.append(instr)
    else:
      group.append(instr)
      defined.update(instr.outs)
      elements = n
  flush(len(instrs))
  return out


def _elements(slots, slot: int) -> int:
  return math.prod(slots[slot][1])


def _fusible_elements(slots, instr: Instr) -> int | None:
  """The element count a fusible instruction produces; None if it cannot be fused."""
  if len(instr.outs) != 1:
    return None
  n = _elements(slots, instr.outs[0])
  if instr.op == "broadcast_in_dim":
    # Of a smaller operand (a scalar, a row, a column...): fusion.cc writes each block's
    # slice. Same-size broadcasts are reshapes or transposes, which do not tile.
    return n if _elements(slots, instr.ins[0]) < n or n == 1 else None
  if instr.op not in ELEMENTWISE or n <= 1:
    return None
  # select's predicate and clamp's bounds may be scalars; everything else is full size.
  if any(_elements(slots, s) not in (1, n) for s in instr.ins):
    return None
  return n


def _fusion(slots, group: list[Instr], rest: list[Instr], results: list[int]) -> Instr:
  defined = [s for instr in group for s in instr.outs]
  read_later = {s for instr in rest for s in instr.ins} | set(results)
  operands: list[int] = []
  for instr in group:
    for s in instr.ins:
      if s not in defined and s not in operands:
        operands.append(s)
  outputs = [s for s in defined if s in read_later]
  # The body numbers its slots 0.. in order of first appearance.
  local: dict[int, int] = {}
  for s in operands + defined:
    local.setdefault(s, len(local))
  body = Plan(
      slots=[slots[s] for s in local],
      params=[local[s] for s in operands],
      results=[local[s] for s in outputs],
      instrs=[Instr(i.op, [local[s] for s in i.ins], [local[s] for s in i.outs], i.attrs,
                    i.loc) for i in group],
      frees=[[] for _ in group])  # Block-local temporaries need no frees.
  names = ", ".join(i.op for i in group)
  return Instr("fusion", operands, outputs, {"body": body},
               f"fusion of [{names}] ending at {group[-1].loc}")
