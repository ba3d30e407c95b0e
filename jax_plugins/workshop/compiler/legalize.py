"""Compile decides: every instruction of a plan checked against the op table (optable.py).

Runs on the lowered plan, sub-plans included, before any plan optimization:

  * an instruction whose typed dtype (OpSpec.typed) is in its kernel's dtypes stays;
  * one whose dtype is in OpSpec.upcast is computed in the mapped dtype: every operand of
    that dtype is converted in, every result of that dtype is computed into a temporary and
    converted back. This is the one place f16/bf16 math becomes f32 math (XLA:CPU does the
    same, rounding once per op), for every op the table marks, so no kernel does 16-bit
    arithmetic:

        %r = stablehlo.asinh %x : tensor<4xbf16>
          =>  convert(x: bf16 -> f32), asinh(f32), convert(f32 -> bf16) -> r

  * anything else is an error; all of a program's errors are reported together.

8- and 4-bit floats (optable.MINIFLOATS) are computed in f32 the same way (IN_F32), and
moved as bytes by the kernels that list them (optable.STORED).
An op with OpSpec.round_trip has its results of those dtypes converted to a wider type and
back (sort: XLA:CPU sorts minifloats as f16, which rewrites NaN payloads).

Sub-byte integers (s4, u4, s2, u2) are computed the same way in their byte type, by every
kernel that has it; converts to and from them become byte-level steps (_convert).

A reduction body named in `attrs["body"]` ("add", "maximum", ...) is checked against the
body op's own spec, so "reduce_window of c64 with body maximum" fails here too.
"""

from __future__ import annotations

import numpy as np

from . import dtypes
from .optable import MINIFLOATS, SPECS, SUB_BYTE
from .plan import Instr, Plan, free_lists


def legalize(plan: Plan, errors: list[str]) -> Plan:
  """`plan` with upcasts inserted; appends a message to `errors` per unsupported instr."""
  slots = list(plan.slots)
  instrs: list[Instr] = []
  for instr in plan.instrs:
    attrs = {k: legalize(v, errors) if isinstance(v, Plan) else v for k, v in instr.attrs.items()}
    instr = Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)
    spec = SPECS.get(instr.op)
    if spec is None:
      errors.append(f"op '{instr.op}' has no kernel at {instr.loc}")
      continue
    # Minifloats (f8, f4) only where the table lists them (moved as bytes, or computed
    # in f32): a kernel that reads values of a type it doesn't list rejects them.
    stored_only = [
      dtypes.by_code(slots[s][0]).name
      for s in (*instr.ins, *instr.outs)
      if dtypes.by_code(slots[s][0]).name in MINIFLOATS - spec.dtypes
    ]
    if stored_only:
      dialect = "chlo" if spec.family == "chlo" else "stablehlo"
      errors.append(
        f"op '{dialect}.{instr.op}' has no kernel for dtype {stored_only[0]} at {instr.loc}"
      )
      continue
    if instr.op == "convert":
      _convert(instrs, slots, instr.ins[0], instr.outs[0], instr.loc)
      continue
    if any(dtypes.by_code(slots[s][0]).name in spec.round_trip for s in instr.outs):
      _round_trip(instrs, slots, instr, spec.round_trip)
      continue
    if spec.typed is None:
      instrs.append(instr)
      continue
    side = instr.ins if spec.typed.startswith("in") else instr.outs
    dtype = dtypes.by_code(slots[side[int(spec.typed[-1])]][0])
    compute = dtype.name if dtype.name in spec.kernel else spec.upcast.get(dtype.name)
    if dtype.name in SUB_BYTE and SUB_BYTE[dtype.name][0] in spec.kernel:
      compute = SUB_BYTE[dtype.name][0]
    body = attrs.get("body")
    body_spec = SPECS.get(body) if isinstance(body, str) and body != "set" else None
    # The body op must be defined on the computed dtype (the scatter kernel combines f16 in
    # f32 itself, so a body's upcast dtypes count).
    if compute is None or (body_spec is not None and compute not in body_spec.dtypes):
      what = f" with body '{body}'" if body_spec is not None and compute is not None else ""
      dialect = "chlo" if spec.family == "chlo" else "stablehlo"
      errors.append(
        f"op '{dialect}.{instr.op}'{what} has no kernel for dtype {dtype.name} at {instr.loc}"
      )
      continue
    if compute == dtype.name:
      instrs.append(instr)
      continue
    target = dtypes.by_name(compute)

    def temp(s: int) -> int:
      slots.append((target.code, slots[s][1]))
      return len(slots) - 1

    ins = []
    for s in instr.ins:
      if slots[s][0] == dtype.code:
        ins.append(temp(s))
        _convert(instrs, slots, s, ins[-1], instr.loc)
      else:
        ins.append(s)
    outs = [temp(s) if slots[s][0] == dtype.code else s for s in instr.outs]
    instrs.append(Instr(instr.op, ins, outs, attrs, instr.loc))
    for computed, declared in zip(outs, instr.outs):
      if computed != declared:
        _convert(instrs, slots, computed, declared, instr.loc)
  return Plan(slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


def _round_trip(instrs: list[Instr], slots: list, instr: Instr, through: dict) -> None:
  """Appends `instr` writing each result of a dtype in `through` to a temporary, converted to
  the mapped dtype and back into the result (OpSpec.round_trip: XLA:CPU computes the op in
  the wider type; only an elementwise round trip, so it may follow the op)."""
  outs, trips = [], []  # trips: (computed, wide, declared) slots
  for s in instr.outs:
    name = dtypes.by_code(slots[s][0]).name
    if name in through:
      slots.append(slots[s])
      slots.append((dtypes.by_name(through[name]).code, slots[s][1]))
      trips.append((len(slots) - 2, len(slots) - 1, s))
      outs.append(len(slots) - 2)
    else:
      outs.append(s)
  instrs.append(Instr(instr.op, instr.ins, outs, instr.attrs, instr.loc))
  for computed, wide, declared in trips:
    _convert(instrs, slots, computed, wide, instr.loc)
    _convert(instrs, slots, wide, declared, instr.loc)


def _convert(instrs: list[Instr], slots: list, src: int, dst: int, loc: str) -> None:
  """Appends convert(src) -> dst; sub-byte integers pass through their byte type.

  A sub-byte value is its low bits in a byte: widening sign-extends them (shift left,
  then arithmetic shift right), narrowing masks them; bitcast_convert moves between the
  sub-byte and the byte type, which have the same bytes.
  """
  dims = slots[dst][1]

  def new(name: str) -> int:
    slots.append((dtypes.by_name(name).code, dims))
    return len(slots) - 1

  def op(kernel: str, ins: list[int], out: int, attrs: dict | None = None) -> int:
    instrs.append(Instr(kernel, ins, [out], attrs or {}, loc))
    return out

  def splat(name: str, value: int) -> int:
    scalar = len(slots)
    slots.append((dtypes.by_name(name).code, ()))
    op("constant", [], scalar, {"data": np.array([value], dtypes.by_name(name).numpy).tobytes()})
    return op("broadcast_in_dim", [scalar], new(name), {"dims": []})

  source = dtypes.by_code(slots[src][0]).name
  dest = dtypes.by_code(slots[dst][0]).name
  if source in SUB_BYTE:
    wide, bits = SUB_BYTE[source]
    src = op("bitcast_convert", [src], new(wide))
    if wide == "s8":  # Sign-extend the low bits.
      shift = splat("s8", 8 - bits)
      src = op(
        "shift_right_arithmetic", [op("shift_left", [src, shift], new("s8")), shift], new("s8")
      )
    source = wide
  if dest not in SUB_BYTE:
    op("convert", [src], dst)
    return
  wide, bits = SUB_BYTE[dest]
  if source != wide:
    src = op("convert", [src], new(wide))
  masked = op("and", [src, splat(wide, (1 << bits) - 1)], new(wide))
  op("bitcast_convert", [masked], dst)


def raise_errors(errors: list[str]) -> None:
  """One NotImplementedError listing every unsupported op of the program, if any."""
  errors = list(dict.fromkeys(errors))  # An inlined function repeats its ops' errors.
  if len(errors) == 1:
    raise NotImplementedError(f"workshop: {errors[0]}")
  if errors:  # The first on the first line, where a one-line reader looks.
    raise NotImplementedError(f"workshop: {len(errors)} unsupported ops: " + "\n  ".join(errors))
