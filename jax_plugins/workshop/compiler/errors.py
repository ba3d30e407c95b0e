"""Exceptions raised while compiling, with self-contained messages.

The C++ caller maps ValueError -> INVALID_ARGUMENT, NotImplementedError -> UNIMPLEMENTED and
anything else -> INTERNAL, using str(exception) as the status message. So every message
names what failed without needing the Python traceback: for op errors, the op name, the
element types it sees and its location.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from . import dtypes, locations


def describe_op(op: ir.Operation) -> str:
  """E.g. "'stablehlo.cosine' (f32) at /tmp/f.py:3:11 (jit(f)/cos)".

  A function is described by its signature: "'func.func @main' (f32, s32) at ...".
  """
  name = op.name
  types = [v.type for v in (*op.operands, *op.results)]
  if name == "func.func":
    name += f" @{op.attributes['sym_name'].value}"
    ftype = ir.FunctionType(op.attributes["function_type"].value)
    types = [*ftype.inputs, *ftype.results]
  names = list(dict.fromkeys(dtypes.type_name(t) for t in types))  # unique, in order
  return f"'{name}' ({', '.join(names) or 'no operands'}) at {locations.describe(op.location)}"


def unsupported(op: ir.Operation, what: str = "unsupported op") -> NotImplementedError:
  """Something valid StableHLO that the plugin does not implement."""
  return NotImplementedError(f"workshop: {what}: {describe_op(op)}")


def malformed(op: ir.Operation, what: str) -> ValueError:
  """Input that violates an invariant of the op or of the program."""
  return ValueError(f"workshop: {what}: {describe_op(op)}")


class NeedsPartitioning(NotImplementedError):
  """A program the per-device lowering cannot run as written: a value sharded across
  devices meets an op outside a manual computation. compile_program then partitions the
  program (partition.py) and lowers it again."""


def needs_partitioning(op: ir.Operation, what: str) -> NeedsPartitioning:
  return NeedsPartitioning(f"workshop: {what}: {describe_op(op)}")


class InternalLoweringError(RuntimeError):
  """A bug in a lowering rule (or a binding surprise), tagged with the op it hit."""
