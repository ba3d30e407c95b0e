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

A reduction body named in `attrs["body"]` ("add", "maximum", ...) is checked against the
body op's own spec, so "reduce_window of c64 with body maximum" fails here too.
"""

from __future__ import annotations

from . import dtypes
from .lowering import free_lists
from .optable import SPECS
from .plan import Instr, Plan


def legalize(plan: Plan, errors: list[str]) -> Plan:
  """`plan` with upcasts inserted; appends a message to `errors` per unsupported instr."""
  slots = list(plan.slots)
  instrs: list[Instr] = []
  for instr in plan.instrs:
    attrs = {k: legalize(v, errors) if isinstance(v, Plan) else v
             for k, v in instr.attrs.items()}
    instr = Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)
    spec = SPECS.get(instr.op)
    if spec is None:
      errors.append(f"op '{instr.op}' has no kernel at {instr.loc}")
      continue
    if spec.typed is None:
      instrs.append(instr)
      continue
    side = instr.ins if spec.typed.startswith("in") else instr.outs
    dtype = dtypes.by_code(slots[side[int(spec.typed[-1])]][0])
    compute = dtype.name if dtype.name in spec.kernel else spec.upcast.get(dtype.name)
    body = attrs.get("body")
    body_spec = SPECS.get(body) if isinstance(body, str) and body != "set" else None
    if compute is None or (body_spec is not None and compute not in body_spec.kernel):
      what = f" with body '{body}'" if body_spec is not None and compute is not None else ""
      dialect = "chlo" if spec.family == "chlo" else "stablehlo"
      errors.append(f"op '{dialect}.{instr.op}'{what} has no kernel for dtype {dtype.name} "
                    f"at {instr.loc}")
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
        instrs.append(Instr("convert", [s], [ins[-1]], {}, instr.loc))
      else:
        ins.append(s)
    outs = [temp(s) if slots[s][0] == dtype.code else s for s in instr.outs]
    instrs.append(Instr(instr.op, ins, outs, attrs, instr.loc))
    instrs.extend(Instr("convert", [computed], [declared], {}, instr.loc)
                  for computed, declared in zip(outs, instr.outs) if computed != declared)
  return Plan(slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


def raise_errors(errors: list[str]) -> None:
  """One NotImplementedError listing every unsupported op of the program, if any."""
  errors = list(dict.fromkeys(errors))  # An inlined function repeats its ops' errors.
  if len(errors) == 1:
    raise NotImplementedError(f"workshop: {errors[0]}")
  if errors:
    raise NotImplementedError(
        f"workshop: {len(errors)} unsupported ops:\n" + "\n".join(f"  {e}" for e in errors))
