"""Horizontal fusion: independent small fusions become one `horizontal_fusion`.

An optimizer update written with `jax.tree.map` over 100 parameter arrays is hundreds of
small elementwise fusions of different shapes (Adam: the first moments, the second
moments, then the parameters, one fusion per leaf each). Each is a kernel call of its own,
with its own dispatch, output allocation and, having too little work for the thread pool,
one thread. XLA fuses such siblings horizontally (xla/service/gpu/transforms/
horizontal_loop_fusion.cc: independent loop fusions of different shapes in one kernel)
and XLA:CPU runs independent thunks concurrently (xla/backends/cpu/runtime/
thunk_executor.cc). Here they become one instruction whose body lists them; the kernel
(kernels/fusion.cc `horizontal_fusion`) cuts all their items into tasks and gives the pool
the lot in one hand-off, so the update runs on every core at one kernel's dispatch cost.

A group is built in plan order from fusions and jit_fusions (compiler/fusion.py,
compiler/codegen) whose work (element operations) is under _SMALL_WORK: a member must read
nothing an earlier member makes. The kernel cuts a flat jit_fusion's items into tasks and
runs every other member whole as one task. An instruction that reads nothing the group
makes stays where it is and the group goes on after it (the group runs at its last
member's place); one that reads a member's value ends the group before it. A group of one
stays as it was.
"""

from __future__ import annotations


from .fusion import fusion_elements
from .plan import Instr, Plan, free_lists, region

# Element operations (jit_fusion's items x work) from which a fusion has enough work for
# parts of its own (runtime/thread_pool.h kMinPartWork, 512K: two parts from 1M) and stays
# alone; delaying it to its group's end would also keep its operands alive longer.
_SMALL_WORK = 1 << 20
# Members of one group at most: its argument array and task list stay small, and a huge
# plan does not become one instruction whose operands all live until its last member.
_MAX_MEMBERS = 512


def _work(instr: Instr) -> int | None:
  """Element operations of a fusion or jit_fusion (its largest slot's elements times its
  non-broadcast steps for an interpreted one: an over-estimate, broadcasts of scalars
  are hoisted); None for other instructions."""
  if instr.op == "jit_fusion":
    return instr.attrs["items"] * instr.attrs["work"]  # work: per item (row or element)
  if instr.op != "fusion":
    return None
  body: Plan = instr.attrs["body"]
  n = fusion_elements(body)
  return n * max(1, sum(1 for i in body.instrs if i.op != "broadcast_in_dim"))


def _small(instr: Instr) -> bool:
  work = _work(instr)
  return work is not None and work < _SMALL_WORK


def fuse_horizontally(plan: Plan) -> Plan:
  """`plan` with each group of two or more independent small fusions replaced by
  one horizontal_fusion (top level only; sub-plans of while/case are left as they are)."""
  if sum(1 for i in plan.instrs if _small(i)) < 2:
    return plan
  out: list[Instr] = []
  group: list[Instr] = []
  made: set[int] = set()  # Slots the group's members write.

  def flush() -> None:
    if len(group) >= 2:
      out.append(_horizontal(plan, group))
    else:
      out.extend(group)
    group.clear()
    made.clear()

  for instr in plan.instrs:
    reads_group = not made.isdisjoint(instr.ins)
    if _small(instr) and not reads_group and len(group) < _MAX_MEMBERS:
      group.append(instr)
      made.update(instr.outs)
      continue
    if reads_group:
      flush()
      if _small(instr):
        group.append(instr)
        made.update(instr.outs)
        continue
    out.append(instr)
  flush()
  return Plan(plan.slots, plan.params, plan.results, out, free_lists(out, plan.results))


def _horizontal(plan: Plan, members: list[Instr]) -> Instr:
  """The horizontal_fusion of `members`: operands are what they read (each once), results
  what they write; the body numbers its slots 0.. in order of first appearance."""
  operands: list[int] = []
  for m in members:
    for s in m.ins:
      if s not in operands:
        operands.append(s)
  results = [s for m in members for s in m.outs]
  body = region(plan.slots, operands, results, members)
  return Instr(
    "horizontal_fusion",
    operands,
    results,
    {"body": body},
    f"horizontal fusion of {len(members)} fusions from {members[0].loc} to {members[-1].loc}",
  )
