"""What each backend actually runs for a program: the kernels behind a benchmark number.

    workshop_kernels(lambda x: x * 2 + 1, x)  # ['broadcast_in_dim', 'multiply', ...]
    workshop_steps(lambda x: x * 2 + 1, x)    # [..., 'fusion -> f32[1024]']
    xla_kernels(lambda x: x * 2 + 1, x)       # ['fusion:kLoop partitions=2']

workshop_kernels lists the instructions of the plugin's plan, one kernel call each, in
execution order. xla_kernels lists the top-level instructions of XLA:CPU's optimized HLO
(each one kernel or library call): fusions with their kind (kLoop: an LLVM-generated loop;
__ynn_fusion: a call into the YNNPACK library) and how many parts a loop is split into
for the intra-op thread pool.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import jax

# Instructions that do no work at run time (buffer plumbing).
_NO_WORK = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}


def workshop_kernels(f: Callable, *args) -> list[str]:
  """The op of every instruction in the workshop plan of jit(f)(*args)."""
  return [i.op for i in _workshop_plan(f, *args).instrs]


def workshop_steps(f: Callable, *args) -> list[str]:
  """Every instruction of the workshop plan of jit(f)(*args) as `op -> what it writes`
  (dtype[shape] of each result), a fusion with its row length: which values a program
  writes to memory, e.g. ['jit_fusion (rows of 1024) -> f32[1024]', 'reduce -> f32[]']."""
  from ..compiler import dtypes

  plan = _workshop_plan(f, *args)
  steps = []
  for instr in plan.instrs:
    row = instr.attrs.get("row", 1) if instr.op in ("fusion", "jit_fusion") else 1
    kind = f"{instr.op} (rows of {row})" if row > 1 else instr.op
    outs = ", ".join(
      f"{dtypes.by_code(code).name}[{','.join(map(str, dims))}]"
      for code, dims in (plan.slots[o] for o in instr.outs)
    )
    steps.append(f"{kind} -> {outs}")
  return steps


def _workshop_plan(f: Callable, *args):
  from jax._src.lib import _jax
  from jaxlib.mlir.dialects import stablehlo

  from ..compiler import compile_program

  # The artifact PJRT_Client_Compile receives: serializing also legalizes CHLO ops
  # (e.g. chlo.square) into StableHLO, which the text of `lower()` still contains.
  target = stablehlo.get_version_from_compatibility_requirement(
    stablehlo.StablehloCompatibilityRequirement.WEEK_4
  )
  artifact = _jax.mlir.serialize_portable_artifact(
    jax.jit(f).lower(*args).compiler_ir("stablehlo"), target, True
  )
  return compile_program(artifact, "mlir", b"", 1).plan


def xla_kernels(f: Callable, *args) -> list[str]:
  """The top-level instructions of XLA:CPU's optimized HLO of jit(f)(*args)."""
  cpu_args = jax.device_put(args, jax.devices("cpu")[0])
  hlo = jax.jit(f).lower(*cpu_args).compile().as_text()
  entry = hlo[hlo.index("\nENTRY") :].splitlines()[1:]
  kernels = []
  for line in entry:
    if line.startswith("}"):
      break
    m = re.match(r"\s*(?:ROOT )?%\S+ = \S+ ([\w-]+)\(", line)
    if not m or m.group(1) in _NO_WORK:
      continue
    name = m.group(1)
    kind = re.search(r'"kind":"(\w+)"', line) or re.search(r"kind=(\w+)", line)
    if name == "fusion" and kind:
      name += ":" + kind.group(1)
    parts = re.search(r'"outer_dimension_partitions":\["(\d+)"', line)
    if parts:
      name += f" partitions={parts.group(1)}"
    kernels.append(name)
  return kernels
