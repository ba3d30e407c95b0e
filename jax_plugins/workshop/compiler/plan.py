"""The Plan: what the Python compiler hands to the C++ executor.

These dataclasses are the contract documented in docs/plan.md ("The plan"); the C++ side
converts them once into `runtime/plan.h` structs. Keep the two in sync.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Instr:
  """One kernel launch.

  Attributes:
    op: kernel name, the StableHLO op name without "stablehlo." (e.g. "add").
    ins: slots read, in operand order.
    outs: slots written, in result order.
    attrs: static kernel attributes, per the table in docs/plan.md.
    loc: readable source location, quoted by the executor in every error message.
  """

  op: str
  ins: list[int]
  outs: list[int]
  attrs: dict[str, int | float | str | bytes | list[int] | list[list[int]] | Plan]
  loc: str


@dataclasses.dataclass
class Plan:
  """A straight-line per-partition program over numbered buffer slots.

  Attributes:
    slots: per slot, (PJRT_Buffer_Type code, dims); dims are the local (shard) shape.
    params: slot of each parameter, in parameter order.
    results: slot of each result; may repeat and may name a parameter slot.
    instrs: kernels, in execution order.
    frees: frees[i] lists the slots whose last use is instrs[i] (never a result slot).
  """

  slots: list[tuple[int, tuple[int, ...]]]
  params: list[int]
  results: list[int]
  instrs: list[Instr]
  frees: list[list[int]]


@dataclasses.dataclass
class Executable:
  """A compiled program plus everything PJRT asks about it.

  Attributes:
    name: module name, e.g. "jit_f".
    plan: the per-partition program (SPMD: the same plan runs on every device).
    num_replicas, num_partitions: from the compile options.
    device_assignment: [replica][partition] -> device id.
    device_assignment_proto: the same, as a serialized xla.DeviceAssignmentProto.
    donations: (parameter index, result index) pairs from `tf.aliasing_output`.
    fingerprint: stable hex hash of program + options.
    text: the StableHLO module text, for debugging.
    parameter_memory_kinds, output_memory_kinds: "device" or "pinned_host" per parameter
      and result (`mhlo.memory_kind`); outputs are created in that memory.
    parameter_layouts, output_layouts: the device layout (minor_to_major) of each parameter
      and result (layouts.py); the executor transposes arguments and results that are not
      row-major on the way in and out.
    optimized_program: the per-device program as StableHLO text with its shardings
      (PJRT_Executable_OptimizedProgram, `compiled.as_text()`); "" if unavailable.
    cost_analysis: (property, value) pairs for PJRT_Executable_GetCostAnalysis.
  """

  name: str
  plan: Plan
  num_replicas: int
  num_partitions: int
  device_assignment: list[list[int]]
  device_assignment_proto: bytes
  donations: list[tuple[int, int]]
  fingerprint: str
  text: str
  parameter_memory_kinds: list[str] = dataclasses.field(default_factory=list)
  output_memory_kinds: list[str] = dataclasses.field(default_factory=list)
  parameter_layouts: list[list[int]] = dataclasses.field(default_factory=list)
  output_layouts: list[list[int]] = dataclasses.field(default_factory=list)
  optimized_program: str = ""
  cost_analysis: list[tuple[str, float]] = dataclasses.field(default_factory=list)


def region(slots: list, params: list[int], results: list[int], instrs: list[Instr]) -> Plan:
  """The sub-plan (a fusion's body) of `instrs`, taken from a plan whose slot types are
  `slots`: its own slots numbered 0.. in order of first appearance (`params`, then what
  `instrs` define), no frees (its values are block-local temporaries)."""
  local: dict[int, int] = {}
  for s in params + [s for i in instrs for s in i.outs]:
    local.setdefault(s, len(local))
  return Plan(
    slots=[slots[s] for s in local],
    params=[local[s] for s in params],
    results=[local[s] for s in results],
    instrs=[
      Instr(i.op, [local[s] for s in i.ins], [local[s] for s in i.outs], i.attrs, i.loc)
      for i in instrs
    ],
    frees=[[] for _ in instrs],
  )


def free_lists(instrs: list[Instr], results: list[int]) -> list[list[int]]:
  """frees[i]: the slots instrs[i] touches last, except results (the caller owns those).

  A slot defined but never read is freed right after the instruction defining it.
  Parameters are included: the executor then drops its reference, the caller's buffer
  lives on.
  """
  last: dict[int, int] = {}
  for i, instr in enumerate(instrs):
    for s in (*instr.ins, *instr.outs):
      last[s] = i
  frees: list[list[int]] = [[] for _ in instrs]
  keep = set(results)
  for s, i in sorted(last.items()):
    if s not in keep:
      frees[i].append(s)
  return frees
