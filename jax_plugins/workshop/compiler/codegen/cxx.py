"""The same loops as C++ source, compiled by the system g++ into a cached shared library.

The alternative to llvm_ir.py that docs/codegen.md compares it with (WORKSHOP_CODEGEN=gcc):
one array per slot, one loop per op with the interpreter's own element expressions
(kernels/elementwise/element_ops.h, convert.cc), built with -O2 -ffp-contract=off (no FMA
contraction) for the host (-march=native). Same function ABI as llvm_ir.py.
"""

from __future__ import annotations

import numpy as np

from ..plan import Instr, Plan
from . import loops
from .loops import Unsupported, elements, kind

_CTYPE = {
  1: "bool",
  2: "int8_t",
  3: "int16_t",
  4: "int32_t",
  5: "int64_t",
  6: "uint8_t",
  7: "uint16_t",
  8: "uint32_t",
  9: "uint64_t",
  11: "float",
  12: "double",
}


def _literal(code: int, value) -> str:
  k = kind(code)
  if k == "f":
    return (
      f"std::bit_cast<{_CTYPE[code]}>({'UINT32_C' if code == 11 else 'UINT64_C'}("
      f"{int(np.array(value, loops.NUMPY[code]).view(np.uint32 if code == 11 else np.uint64))}))"
    )
  if k == "b":
    return "true" if value else "false"
  return f"{_CTYPE[code]}({int(value)}{'ULL' if k == 'u' else 'LL'})"


_BINARY = {
  "add": "static_cast<T>(x + y)",
  "subtract": "static_cast<T>(x - y)",
  "multiply": "static_cast<T>(x * y)",
  "maximum": "(x >= y || x != x) ? x : y",
  "minimum": "(x <= y || x != x) ? x : y",
  "and": "static_cast<T>(x & y)",
  "or": "static_cast<T>(x | y)",
  "xor": "static_cast<T>(x ^ y)",
}
_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}

_PRELUDE = r"""
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
template <typename T> static inline T Div(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y == 0) return static_cast<T>(-1);
    if constexpr (std::is_signed_v<T>) {
      if (x == std::numeric_limits<T>::min() && y == -1) return x;
    }
  }
  return static_cast<T>(x / y);
}
template <typename To, typename From> static inline To Conv(From x) {
  if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(x)) return 0;
    if (x <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (x >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}
template <typename T> static inline T Abs(T x) {
  if constexpr (std::is_floating_point_v<T>) return std::fabs(x);
  else if constexpr (std::is_signed_v<T>) return x < 0 ? static_cast<T>(-x) : x;
  else return x;
}
"""


def _region(lines: list[str], plan: Plan, names: dict[int, str], prefix: str) -> None:
  slots = plan.slots
  for instr in plan.instrs:
    out = instr.outs[0]
    code, dims = slots[out]
    n = elements(dims)
    name = f"{prefix}{out}"
    names[out] = name
    t = _CTYPE[code]
    ins = [names[s] for s in instr.ins]
    in_code = slots[instr.ins[0]][0] if instr.ins else code
    op = instr.op

    def idx(slot_index: int) -> str:
      return "[0]" if elements(slots[instr.ins[slot_index]][1]) == 1 and n > 1 else "[i]"

    if op == "constant":
      vals = loops.constant_values(plan, instr)
      lines.append(
        f"  static const {t} {name}[{n}] = {{{', '.join(_literal(code, v) for v in vals)}}};"
      )
      continue
    lines.append(f"  {t} {name}[{n}];")
    if op in ("copy", "reshape"):
      expr = f"{ins[0]}[i]"
    elif op in loops.MOVES:
      src = loops.source_indices(plan, instr)
      lines.append(f"  static const int {name}_idx[{n}] = {{{', '.join(map(str, src))}}};")
      expr = f"{ins[0]}[{name}_idx[i]]"
    elif op == "convert":
      expr = f"Conv<{t}, {_CTYPE[in_code]}>({ins[0]}[i])"
    elif op == "compare":
      expr = f"{ins[0]}[i] {_CMP[instr.attrs['direction']]} {ins[1]}[i]"
    elif op == "select":
      expr = f"{ins[0]}{idx(0)} ? {ins[1]}[i] : {ins[2]}[i]"
    elif op == "clamp":
      lo, hi = f"{ins[0]}{idx(0)}", f"{ins[2]}{idx(2)}"
      lines.append(
        f"  for (int i = 0; i < {n}; ++i) {{ {t} x = {lo}, y = {ins[1]}[i]; "
        f"{t} m = (x >= y || x != x) ? x : y; x = m; y = {hi}; "
        f"{name}[i] = (x <= y || x != x) ? x : y; }}"
      )
      continue
    elif op == "divide":
      expr = f"Div<{t}>({ins[0]}[i], {ins[1]}[i])"
    elif op == "negate":
      expr = f"static_cast<{t}>(-{ins[0]}[i])"
    elif op == "abs":
      expr = f"Abs<{t}>({ins[0]}[i])"
    elif op == "sqrt":
      expr = f"std::sqrt({ins[0]}[i])"
    elif op == "not":
      expr = f"!{ins[0]}[i]" if kind(code) == "b" else f"static_cast<{t}>(~{ins[0]}[i])"
    elif op in _BINARY:
      if kind(code) == "b" and op == "subtract":
        raise Unsupported("pred subtract")
      lines.append(
        f"  for (int i = 0; i < {n}; ++i) {{ {t} x = {ins[0]}[i], y = {ins[1]}[i]; "
        f"{name}[i] = {_BINARY[op].replace('<T>', f'<{t}>')}; }}"
      )
      continue
    else:
      raise Unsupported(op)
    lines.append(f"  for (int i = 0; i < {n}; ++i) {name}[i] = {expr};")


def emit_loop(plan: Plan, instr: Instr, symbol: str) -> str:
  cond, body = loops.check_loop(plan, instr)
  n, n_in = len(instr.outs), len(instr.ins)
  lines = [
    _PRELUDE.replace("template <typename T>", "template <typename T>"),
    f'extern "C" void {symbol}(void** args) {{',
  ]
  for i, slot in enumerate(instr.ins):
    code, dims = plan.slots[slot]
    m = elements(dims)
    lines.append(f"  {_CTYPE[code]} v{i}[{m}]; std::memcpy(v{i}, args[{i}], sizeof v{i});")
  cond_names = {cond.params[i]: f"v{i}" for i in range(n_in)}
  body_names = {body.params[i]: f"v{i}" for i in range(n_in)}
  lines.append("  for (;;) {")
  _region(lines, cond, cond_names, "c")
  lines.append(f"  if (!{cond_names[cond.results[0]]}[0]) break;")
  _region(lines, body, body_names, "b")
  # Results may read carried values: copy all out before writing any back.
  for i in range(n):
    code, dims = plan.slots[instr.outs[i]]
    lines.append(
      f"  {_CTYPE[code]} r{i}[{elements(dims)}]; "
      f"std::memcpy(r{i}, {body_names[body.results[i]]}, sizeof r{i});"
    )
  for i in range(n):
    lines.append(f"  std::memcpy(v{i}, r{i}, sizeof v{i});")
  lines.append("  }")
  for i in range(n):
    lines.append(f"  std::memcpy(args[{n_in + i}], v{i}, sizeof v{i});")
  lines.append("}")
  return "\n".join(lines) + "\n"
