"""Lane plans: a scalar region (reduce body, sort comparator) run on vectors of lanes.

The bodies of reduce and sort compute on rank-0 tensors, and the kernels would have to run
them once per element pair. Since every op in such a body is elementwise, the same plan
computes the body for n independent element pairs at once when each rank-0 value becomes
a vector of n lanes. `to_lanes` rewrites a scalar plan that way:

  * every rank-0 slot that varies per element becomes a rank-1 *lane* slot, dims (1,);
  * values that are the same for all lanes (constants, captured outer scalars) keep their
    rank-0 slot, *uniform*, and get one broadcast_in_dim into a lane slot.

The kernel picks the lane count at run time (the C++ `WithLanes` sets every rank-1 slot to
(n,)), so one plan serves every fold or merge step whatever its width.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from . import errors
from .plan import Instr, Plan, free_lists
from .optable import ELEMENTWISE


def to_lanes(op: ir.Operation, plan: Plan, num_uniform_params: int) -> Plan:
  """Rewrites scalar `plan` (a region of `op`) into a lane plan.

  Args:
    num_uniform_params: how many trailing parameters are uniform (captured values).

  Raises:
    NotImplementedError: the region uses an op that is not elementwise, or a value that is
      not a scalar, so it cannot run on lanes.
  """
  slots = list(plan.slots)
  num_lane_params = len(plan.params) - num_uniform_params
  uniform_params = plan.params[num_lane_params:]
  for s in plan.params:
    if slots[s][1] != ():
      raise errors.unsupported(op, f"region uses a non-scalar value of shape {slots[s][1]}")
  lane_of: dict[int, int] = {}  # uniform slot -> its broadcast lane slot

  def broadcast(uniform: int, loc: str) -> Instr:
    slots.append((slots[uniform][0], (1,)))
    lane_of[uniform] = len(slots) - 1
    return Instr("broadcast_in_dim", [uniform], [lane_of[uniform]], {"dims": []}, loc)

  loc = plan.instrs[0].loc if plan.instrs else ""
  instrs = [broadcast(s, loc) for s in uniform_params]
  for instr in plan.instrs:
    if instr.op == "constant":
      instrs.append(instr)
      instrs.append(broadcast(instr.outs[0], instr.loc))
      continue
    if instr.op not in ELEMENTWISE:
      raise errors.unsupported(
        op, f"region op '{instr.op}' is not elementwise; only elementwise regions are supported"
      )
    for s in instr.outs:
      if slots[s][1] != ():
        raise errors.unsupported(op, f"region op '{instr.op}' makes a non-scalar value")
    instrs.append(
      Instr(instr.op, [lane_of.get(s, s) for s in instr.ins], instr.outs, instr.attrs, instr.loc)
    )
  # Every slot that is neither uniform nor the source of a broadcast is a lane.
  for s, (dtype, _) in enumerate(plan.slots):
    if s not in lane_of:
      slots[s] = (dtype, (1,))
  results = [lane_of.get(s, s) for s in plan.results]
  params = plan.params[:num_lane_params] + uniform_params
  return Plan(slots, params, results, instrs, free_lists(instrs, results))
