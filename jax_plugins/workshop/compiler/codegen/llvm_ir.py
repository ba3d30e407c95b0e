"""A while loop (loops.check_loop) as LLVM IR text, for llvmlite's JIT.

The function is `void @<symbol>(ptr %args)`: args[i] points at operand i of the loop (its
initial values, then its captures), args[len(ins) + j] at result j. Every value of the
cond and body lives in an SSA register: a scalar type for one element, `<n x T>` for n
(LLVM splits it into the host's vector registers). The loop is

    entry: load operands -> head: phi values, cond -> body -> head ... -> exit: store.

Exactness: only plain IEEE instructions without fast-math flags (no reassociation, no
FMA contraction: LLVM fuses a multiply and an add only under `contract`), the
interpreter's expressions for maximum/minimum/convert/divide, and the function attribute
`denormal-fp-math=preserve-sign` because the code runs with the workers' FTZ/DAZ mode
(runtime/float_mode.h), so LLVM does not fold what the hardware would flush.
"""

from __future__ import annotations

import struct

import numpy as np

from ..plan import Instr, Plan
from . import loops
from .loops import DTYPES, Unsupported, elements, kind


def scalar_type(code: int, in_register: bool = True) -> str:
  _, bits, k = loops.STORAGE[code]
  if k == "f":
    return "float" if bits == 32 else "double"
  if k == "b":
    return "i1" if in_register else "i8"
  return f"i{bits}"


def llvm_type(code: int, n: int, in_register: bool = True) -> str:
  t = scalar_type(code, in_register)
  return t if n == 1 else f"<{n} x {t}>"


def literal(code: int, value) -> str:
  k = kind(code)
  if k == "f":
    # LLVM spells float constants as the hex bits of the equal double.
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]
  if k == "b":
    return "true" if value else "false"
  return str(int(value))


def _constant(code: int, values: np.ndarray) -> str:
  t = scalar_type(code)
  if values.size == 1:
    return literal(code, values[0])
  return "<" + ", ".join(f"{t} {literal(code, v)}" for v in values) + ">"


class Emitter:
  def __init__(self) -> None:
    self.lines: list[str] = []
    self.counter = 0

  def tmp(self) -> str:
    self.counter += 1
    return f"%t{self.counter}"

  def emit(self, text: str) -> str:
    name = self.tmp()
    self.lines.append(f"  {name} = {text}")
    return name

  def icmp(self, cond: str, ty: str, a, b) -> str:
    return self.emit(f"icmp {cond} {ty} {a}, {b}")

  def select(self, pred_ty: str, pred: str, ty: str, a, b) -> str:
    """pred ? a : b, both of type `ty` (a vector pred picks lane by lane)."""
    return self.emit(f"select {pred_ty} {pred}, {ty} {a}, {ty} {b}")

  def splat(self, code: int, n: int, value: str) -> str:
    if n == 1:
      return value
    t = scalar_type(code)
    if not value.startswith(("%", "@")):
      # A literal (a constant operand, codegen._known_operands) splats to a constant
      # vector: built by a shuffle, the backend without an IR pipeline did not see it as a
      # constant, and a vector remainder by 11 was split into scalar multiplies.
      return "<" + ", ".join([f"{t} {value}"] * n) + ">"
    one = self.emit(f"insertelement <{n} x {t}> poison, {t} {value}, i32 0")
    return self.emit(
      f"shufflevector <{n} x {t}> {one}, <{n} x {t}> poison, <{n} x i32> zeroinitializer"
    )

  def gather(self, code: int, m: int, value: str, indices: np.ndarray) -> str:
    """Elements `indices` of a value of m elements (a shuffle; a splat; an extract)."""
    n = indices.size
    t = scalar_type(code)
    if m == 1:
      return self.splat(code, n, value)
    if n == 1:
      return self.emit(f"extractelement <{m} x {t}> {value}, i32 {int(indices[0])}")
    if n == m and np.array_equal(indices, np.arange(m)):
      return value
    mask = ", ".join(f"i32 {int(i)}" for i in indices)
    return self.emit(f"shufflevector <{m} x {t}> {value}, <{m} x {t}> poison, <{n} x i32> <{mask}>")

  def call_kernel(self, op: str, in_code: int, out_code: int, n: int, ins: list[str]) -> str:
    """The interpreter's kernel for `op` on n elements, through buffers on the stack.

    Every access to these buffers states the alignment they were allocated with (32): a
    load or store without one assumes the type's ABI alignment, 64 bytes for a <21 x
    float> on an AVX-512 host, and the stack is realigned only to what allocas ask for
    (an aligned zmm store to a 32-byte aligned slot crashed, depending on the caller's
    stack).
    """
    self.counter += 1
    k = self.counter
    in_t = llvm_type(in_code, n)
    mem_out = llvm_type(out_code, n, in_register=False)
    self.allocas.append(f"  %cargs{k} = alloca [{len(ins)} x ptr]")
    self.allocas.append(f"  %cout{k} = alloca {mem_out}, align 32")
    for j, value in enumerate(ins):
      self.allocas.append(f"  %cin{k}_{j} = alloca {in_t}, align 32")
      self.lines.append(f"  store {in_t} {value}, ptr %cin{k}_{j}, align 32")
      self.lines.append(f"  %cslot{k}_{j} = getelementptr ptr, ptr %cargs{k}, i64 {j}")
      self.lines.append(f"  store ptr %cin{k}_{j}, ptr %cslot{k}_{j}")
    self.globals.add(f"@workshop_kernel_{op} = external global i8")
    self.lines.append(
      f"  call i32 @WorkshopJitCall(ptr @workshop_kernel_{op}, i32 {in_code}, "
      f"i32 {out_code}, i32 {len(ins)}, ptr %cargs{k}, ptr %cout{k}, i64 {n})"
    )
    result = self.emit(f"load {mem_out}, ptr %cout{k}, align 32")
    if kind(out_code) == "b":
      result = self.icmp("ne", mem_out, result, "zeroinitializer")
    return result

  def run_kernel(
    self, plan: Plan, instr: Instr, values: dict[int, str], region: int, index: int
  ) -> None:
    """Calls `instr`'s kernel (call site len(self.calls), see jit_loop.cc CallSite); an
    interpreted case (loops.interpreted_case) the same way, through the interpreter."""
    site = len(self.calls)
    self.calls.append([region, index])
    self.counter += 1
    k = self.counter
    # Results that update a resident carried value: {result position: carried index}.
    in_place = {
      j: self.update_at[(index, slot)]
      for j, slot in enumerate(instr.outs)
      if region == 1 and (index, slot) in self.update_at
    }
    for name, slots in (("in", instr.ins), ("out", instr.outs)):
      self.allocas.append(f"  %r{name}{k} = alloca [{len(slots)} x ptr]")
      for j, slot in enumerate(slots):
        code, dims = plan.slots[slot]
        self.lines.append(f"  %r{name}p{k}_{j} = getelementptr ptr, ptr %r{name}{k}, i64 {j}")
        if name == "in" and values[slot] in self.pointers:  # a resident value: in place
          self.lines.append(f"  store ptr {values[slot]}, ptr %r{name}p{k}_{j}")
          continue
        if name == "out" and j in in_place:  # updates the resident value's buffer
          self.lines.append(f"  store ptr {self.carried_ptr[in_place[j]]}, ptr %r{name}p{k}_{j}")
          continue
        if name == "out" and (region, slot) in self.homes:  # a value in memory
          values[slot] = self.home(region, slot)
          self.pointers.add(values[slot])
          self.lines.append(f"  store ptr {values[slot]}, ptr %r{name}p{k}_{j}")
          continue
        mem = llvm_type(code, elements(dims), in_register=False)
        self.allocas.append(f"  %r{name}{k}_{j} = alloca {mem}, align 32")
        self.lines.append(f"  store ptr %r{name}{k}_{j}, ptr %r{name}p{k}_{j}")
        if name == "in":
          value = values[slot]
          if kind(code) == "b":
            value = self.emit(f"zext {llvm_type(code, elements(dims))} {value} to {mem}")
          self.lines.append(f"  store {mem} {value}, ptr %r{name}{k}_{j}, align 32")
    site_ptr = self.emit(f"getelementptr ptr, ptr %calls, i64 {site}")
    site_value = self.emit(f"load ptr, ptr {site_ptr}")
    status = self.emit(f"call i32 @WorkshopJitRun(ptr {site_value}, ptr %rin{k}, ptr %rout{k})")
    self.uses_run = True
    # A failed kernel leaves the loop at once (JitLoop reports the error, the results are
    # dropped): running on with what its result buffers held could loop for ever.
    failed = self.icmp("ne", "i32", status, "0")
    self.lines.append(f"  br i1 {failed}, label %exit, label %ran{k}")
    self.lines.append(f"ran{k}:")
    self.block = f"ran{k}"
    for j, slot in enumerate(instr.outs):
      if j in in_place:
        values[slot] = self.carried_ptr[in_place[j]]
        continue
      if (region, slot) in self.homes:
        continue
      code, dims = plan.slots[slot]
      mem = llvm_type(code, elements(dims), in_register=False)
      value = self.emit(f"load {mem}, ptr %rout{k}_{j}, align 32")
      if kind(code) == "b":
        value = self.icmp("ne", mem, value, "zeroinitializer")
      values[slot] = value

  def home(self, region: int, slot: int) -> str:
    """A pointer to the buffer loops.memory_plan placed `slot` of `region` in."""
    where, at = self.homes[(region, slot)]
    if where == "p":
      return self.carried_ptr.get(at, f"%a{at}")
    if where == "o":
      return f"%oth{at}"
    return self.emit(f"getelementptr i8, ptr %scratch, i64 {at}")

  def zero(self, code: int, n: int) -> str:
    return (
      "zeroinitializer"
      if n > 1
      else ("0.0" if kind(code) == "f" else ("false" if kind(code) == "b" else "0"))
    )

  def all_ones(self, code: int, n: int) -> str:
    one = "true" if kind(code) == "b" else "-1"
    return one if n == 1 else "<" + ", ".join([f"{scalar_type(code)} {one}"] * n) + ">"

  def const_splat(self, code: int, n: int, value) -> str:
    return _constant(code, np.full(n, value, dtype=loops.NUMPY[code]))


def _region(e: Emitter, plan: Plan, values: dict[int, str], region: int = 0) -> None:
  """Emits `plan`'s instructions; `values` maps slot -> SSA name (params pre-filled).
  `region`: 0 for cond, 1 for body (call sites name it)."""
  slots = plan.slots
  for index, instr in enumerate(plan.instrs):
    if (region, index) in e.runs:  # reads or writes a value in memory (loops.memory_plan)
      e.run_kernel(plan, instr, values, region, index)
      continue
    if instr.op in loops.ALIASES and values.get(instr.ins[0]) in e.pointers:
      values[instr.outs[0]] = values[instr.ins[0]]  # the same buffer
      continue
    if e.can_call and loops.native_dot(plan, instr):
      values[instr.outs[0]] = _dot(e, plan, instr, values)
      continue
    if e.can_call and loops.native_window(plan, instr):
      _window(e, plan, instr, values, region, index)
      continue
    if e.can_call and loops.native_scatter(plan, instr):
      _scatter(e, plan, instr, values, region, index)
      continue
    if e.can_call and loops.native_walk(plan, instr):
      _walk(e, plan, instr, values, region, index)
      continue
    if e.can_call and (
      loops.runs_kernel(instr) or (region in (0, 1) and loops.interpreted_case(plan, instr))
    ):
      e.run_kernel(plan, instr, values, region, index)
      continue
    if instr.op == "case":
      _case(e, plan, instr, values)
      continue
    if instr.op in ("while", "jit_loop"):
      _nested_loop(e, plan, instr, values)
      continue
    out = instr.outs[0]
    code, dims = slots[out]
    n = elements(dims)
    ins = [values[s] for s in instr.ins]
    in_code = slots[instr.ins[0]][0] if instr.ins else code
    op = instr.op
    if op == "constant":
      values[out] = _constant(code, loops.constant_values(plan, instr))
      continue
    if op in loops.CALLED:
      values[out] = e.call_kernel(op, in_code, code, n, ins)
      continue
    if op == "bitcast_convert":  # same element size (loops.check_memory_loop)
      values[out] = e.emit(f"bitcast {llvm_type(in_code, n)} {ins[0]} to {llvm_type(code, n)}")
      continue
    if op in loops.MOVES:
      values[out] = e.gather(
        code, elements(slots[instr.ins[0]][1]), ins[0], loops.source_indices(plan, instr)
      )
      continue
    if op == "clamp":  # bounds may be scalars: splat them to the operand's lanes first
      ins = [
        e.gather(code, elements(slots[s][1]), v, np.zeros(n, np.int64))
        if elements(slots[s][1]) != n
        else v
        for s, v in zip(instr.ins, ins)
      ]
    # A scalar pred picks whole operands (LLVM's select takes an i1 for vectors too).
    pred_lanes = elements(slots[instr.ins[0]][1]) if op == "select" else n
    values[out] = elementwise(e, op, instr.attrs, in_code, code, n, ins, pred_lanes)


def elementwise(
  e: Emitter,
  op: str,
  attrs: dict,
  in_code: int,
  code: int,
  n: int,
  ins: list[str],
  pred_lanes: int | None = None,
) -> str:
  """`op` (copy, reshape, convert, compare, select, clamp and the arithmetic of loops.OPS)
  on operands already at n lanes of `in_code` (the first operand's dtype; the result's is
  `code`), as the interpreter computes it; both tiers' emitters (this module's loops,
  fusions.py) use it. `pred_lanes`: a select's pred lanes (1: it picks whole operands).
  Raises Unsupported for pred subtract/divide."""
  k = kind(in_code)
  ty = llvm_type(code, n)
  if op in ("copy", "reshape"):
    return ins[0]
  if op == "convert":
    return convert_value(e, in_code, code, n, ins[0])
  if op == "compare":
    if attrs.get("compare_type") == "TOTALORDER" and k == "f":
      return _total_order_compare(e, attrs["direction"], in_code, n, ins[0], ins[1])
    return _compare(e, attrs["direction"], in_code, n, ins[0], ins[1])
  if op == "select":
    return e.select(llvm_type(1, pred_lanes or n), ins[0], ty, ins[1], ins[2])
  if op == "clamp":
    return min_max(e, "minimum", code, n, min_max(e, "maximum", code, n, ins[0], ins[1]), ins[2])
  if op in ("maximum", "minimum"):
    return min_max(e, op, code, n, ins[0], ins[1])
  if op == "divide" and k != "f":
    return _int_divide(e, code, n, ins[0], ins[1])
  if op == "remainder" and k in ("s", "u"):
    return _int_remainder(e, code, n, ins[0], ins[1])
  if op == "negate":
    return (
      e.emit(f"fneg {ty} {ins[0]}") if k == "f" else e.emit(f"sub {ty} {e.zero(code, n)}, {ins[0]}")
    )
  if op in ("abs", "sqrt") and k == "f":
    name = f"@llvm.{'fabs' if op == 'abs' else 'sqrt'}.{intrinsic_suffix(code, n)}"
    e.declares.add(f"declare {ty} {name}({ty})")
    return e.emit(f"call {ty} {name}({ty} {ins[0]})")
  if op == "abs":
    if k == "s":
      neg = e.emit(f"sub {ty} {e.zero(code, n)}, {ins[0]}")
      is_neg = e.icmp("slt", ty, ins[0], e.zero(code, n))
      return e.select(llvm_type(1, n), is_neg, ty, neg, ins[0])
    return ins[0]
  if op == "not":
    return e.emit(f"xor {ty} {ins[0]}, {e.all_ones(code, n)}")
  if op in SHIFTS:
    return _shift(e, op, code, n, ins[0], ins[1])
  if k == "b" and op in ("add", "multiply"):
    # bool arithmetic in C++: x + y is `or` after the cast back, x * y is `and`.
    op = {"add": "or", "multiply": "and"}[op]
  if k == "b" and op in ("subtract", "divide"):
    raise Unsupported(f"pred {op}")
  table = {
    "add": ("fadd", "add"),
    "subtract": ("fsub", "sub"),
    "multiply": ("fmul", "mul"),
    "divide": ("fdiv", None),
    "and": (None, "and"),
    "or": (None, "or"),
    "xor": (None, "xor"),
  }
  fop, iop = table[op]
  return e.emit(f"{fop if k == 'f' else iop} {ty} {ins[0]}, {ins[1]}")


SHIFTS = {"shift_left", "shift_right_logical", "shift_right_arithmetic"}


def _shift(e: Emitter, op: str, code: int, n: int, x: str, y: str) -> str:
  """elementwise.cc ShiftLeft etc.: a count of the width or more (read unsigned) gives 0,
  or the sign for an arithmetic shift right, where LLVM's shifts would be poison."""
  if kind(code) not in ("s", "u"):
    raise Unsupported(f"{op} of a non-integer")
  ty = llvm_type(code, n)
  width = loops.STORAGE[code][1]
  wide = e.icmp("uge", ty, y, e.const_splat(code, n, width))
  pred = llvm_type(1, n)
  if op == "shift_right_arithmetic":
    return e.emit(
      f"ashr {ty} {x}, {e.select(pred, wide, ty, e.const_splat(code, n, width - 1), y)}"
    )
  safe = e.select(pred, wide, ty, e.zero(code, n), y)
  shifted = e.emit(f"{'shl' if op == 'shift_left' else 'lshr'} {ty} {x}, {safe}")
  return e.select(pred, wide, ty, e.zero(code, n), shifted)


def _nested_loop(e: Emitter, plan: Plan, instr: Instr, values: dict[int, str]) -> None:
  """A while loop inside the loop (loops._check_nested): its own head, body and exit
  blocks in the enclosing region's code, carried values as phis, captures as they are."""
  cond, body = instr.attrs["cond"], instr.attrs["body"]
  n = len(instr.outs)
  e.counter += 1
  k = e.counter
  head, inner, done = f"nest{k}_head", f"nest{k}_body", f"nest{k}_exit"
  ins = [values[s] for s in instr.ins]
  pre = e.block
  e.lines.append(f"  br label %{head}")
  e.lines.append(f"{head}:")
  e.block = head
  phi_at = len(e.lines)
  carried = [f"%n{k}_{i}" for i in range(n)]
  cond_values = {p: (carried[i] if i < n else ins[i]) for i, p in enumerate(cond.params)}
  _region(e, cond, cond_values, region=2)  # 2: no call sites, no in-place updates
  e.lines.append(f"  br i1 {cond_values[cond.results[0]]}, label %{inner}, label %{done}")
  e.lines.append(f"{inner}:")
  e.block = inner
  body_values = {p: (carried[i] if i < n else ins[i]) for i, p in enumerate(body.params)}
  _region(e, body, body_values, region=2)
  latch = e.block
  e.lines.append(f"  br label %{head}")
  phis = []
  for i in range(n):
    code, dims = plan.slots[instr.outs[i]]
    phis.append(
      f"  {carried[i]} = phi {llvm_type(code, elements(dims))} [{ins[i]}, %{pre}], "
      f"[{body_values[body.results[i]]}, %{latch}]"
    )
  e.lines[phi_at:phi_at] = phis
  e.lines.append(f"{done}:")
  e.block = done
  for i, out in enumerate(instr.outs):
    values[out] = carried[i]


def _case(e: Emitter, plan: Plan, instr: Instr, values: dict[int, str]) -> None:
  """case/if by if-conversion (loops._check_case): every branch computed, the results of
  the one the index names selected; an index outside [0, branches) selects the last, as
  the spec (and kernels/control_flow.cc) say; `if` is a case on a pred, branch 0 false."""
  count = instr.attrs["branches"]
  outs = []
  for b in range(count):
    branch = instr.attrs[f"branch_{b}"]
    inner = {p: values[s] for p, s in zip(branch.params, instr.ins[1:])}
    _region(e, branch, inner, region=2)  # 2: no call sites, no in-place updates
    outs.append([inner[r] for r in branch.results])
  index = values[instr.ins[0]]
  index_code = plan.slots[instr.ins[0]][0]
  for j, out in enumerate(instr.outs):
    code, dims = plan.slots[out]
    ty = llvm_type(code, elements(dims))
    chosen = outs[count - 1][j]
    for b in range(count - 2, -1, -1):
      hit = (
        e.icmp("eq", "i32", index, b) if index_code != 1 else e.emit(f"xor i1 {index}, true")
      )  # a pred index: branch 0 when false
      chosen = e.select("i1", hit, ty, outs[b][j], chosen)
    values[out] = chosen


def _window(
  e: Emitter, plan: Plan, instr: Instr, values: dict[int, str], region: int, index: int
) -> None:
  """dynamic_slice / dynamic_update_slice of a contiguous window (loops.native_window):
  starts clamped into [0, dim - window] (indexing.cc), then one load or store of the run
  at the operand's address: the resident buffer itself, or a stack copy of a register."""
  is_update = instr.op == "dynamic_update_slice"
  code, dims = plan.slots[instr.ins[0]]
  dims = list(dims)
  window = list(plan.slots[instr.ins[1] if is_update else instr.outs[0]][1])
  m, n = elements(dims), elements(window)
  starts = instr.ins[2:] if is_update else instr.ins[1:]
  strides = [int(np.prod(dims[d + 1 :], dtype=np.int64)) for d in range(len(dims))]
  offset = "0"
  for d, slot in enumerate(starts):
    if window[d] == dims[d]:
      continue  # the start clamps to 0
    s_code = plan.slots[slot][0]
    start = values[slot]
    if DTYPES[s_code][1] < 64:
      start = e.emit(
        f"{'sext' if kind(s_code) == 's' else 'zext'} {scalar_type(s_code)} {start} to i64"
      )
    elif kind(s_code) == "u":  # above 2^63: clamps to the top, as the kernel's unsigned compare
      big = e.icmp("slt", "i64", start, "0")
      start = e.select("i1", big, "i64", dims[d] - window[d], start)
    low = e.icmp("slt", "i64", start, "0")
    start = e.select("i1", low, "i64", "0", start)
    high = e.icmp("sgt", "i64", start, dims[d] - window[d])
    start = e.select("i1", high, "i64", dims[d] - window[d], start)
    scaled = e.emit(f"mul i64 {start}, {strides[d]}")
    offset = e.emit(f"add i64 {offset}, {scaled}")
  operand = values[instr.ins[0]]
  mem_m, mem_n = llvm_type(code, m, in_register=False), llvm_type(code, n, in_register=False)
  align = max(1, DTYPES[code][1] // 8)
  in_place = e.update_at.get((index, instr.outs[0])) if region == 1 and is_update else None
  base = _operand_base(e, operand, in_place, mem_m)
  address = e.emit(f"getelementptr {scalar_type(code)}, ptr {base}, i64 {offset}")
  if not is_update:
    values[instr.outs[0]] = e.emit(f"load {mem_n}, ptr {address}, align {align}")
    return
  e.lines.append(f"  store {mem_n} {values[instr.ins[1]]}, ptr {address}, align {align}")
  if in_place is not None:
    values[instr.outs[0]] = base
  else:
    values[instr.outs[0]] = e.emit(f"load {mem_m}, ptr {base}, align 32")


def _operand_base(e: Emitter, operand: str, in_place: int | None, mem_t: str) -> str:
  """A pointer to the operand of a dynamic_slice/update or scatter: the result buffer of
  carried value `in_place` (updated in place), the operand itself when it is a resident
  buffer, or else a stack copy of its register value (type `mem_t`)."""
  if in_place is not None:
    return e.carried_ptr[in_place]
  if operand in e.pointers:
    return operand
  e.counter += 1
  base = f"%w{e.counter}"
  e.allocas.append(f"  {base} = alloca {mem_t}, align 32")
  e.lines.append(f"  store {mem_t} {operand}, ptr {base}, align 32")
  return base


def _index_i64(e: Emitter, code: int, value: str) -> str:
  """An integer index as i64, widened as indices.h IndexValue does: a u64 above INT64_MAX
  saturates to INT64_MAX (still above every limit)."""
  if DTYPES[code][1] < 64:
    return e.emit(f"{'sext' if kind(code) == 's' else 'zext'} {scalar_type(code)} {value} to i64")
  if kind(code) == "u":
    big = e.icmp("slt", "i64", value, "0")
    return e.select("i1", big, "i64", str(2**63 - 1), value)
  return value


def _scatter(
  e: Emitter, plan: Plan, instr: Instr, values: dict[int, str], region: int, index: int
) -> None:
  """A scatter of one update into a contiguous run (loops.native_scatter): each start
  component read from the indices and checked against [0, limit]; the run at the offset
  is read, combined (set: the update; add: old + update, the kernel's one combine per
  element) and written back, or written back unchanged when a start is out of range (the
  kernel drops such an update), so no branch is needed. The operand is the resident
  buffer updated in place, or a stack copy of a register value."""
  a = instr.attrs
  code, dims = plan.slots[instr.ins[0]]
  index_code, index_dims = plan.slots[instr.ins[1]]
  m, n = elements(dims), elements(plan.slots[instr.ins[2]][1])
  offset, ok = "0", "true"
  for c, (stride, limit) in enumerate(zip(a["start_strides"], a["start_limits"])):
    start = e.gather(
      index_code,
      elements(index_dims),
      values[instr.ins[1]],
      np.array([c * a["index_vector_stride"]]),
    )
    start = _index_i64(e, index_code, start)
    low = e.icmp("sge", "i64", start, "0")
    high = e.icmp("sle", "i64", start, limit)
    ok = e.emit(f"and i1 {ok}, {e.emit(f'and i1 {low}, {high}')}")
    offset = e.emit(f"add i64 {offset}, {e.emit(f'mul i64 {start}, {stride}')}")
  offset = e.select("i1", ok, "i64", offset, "0")  # in bounds either way
  operand = values[instr.ins[0]]
  mem_m, mem_n = llvm_type(code, m, in_register=False), llvm_type(code, n, in_register=False)
  align = max(1, DTYPES[code][1] // 8)
  in_place = e.update_at.get((index, instr.outs[0])) if region == 1 else None
  base = _operand_base(e, operand, in_place, mem_m)
  address = e.emit(f"getelementptr {scalar_type(code)}, ptr {base}, i64 {offset}")
  old = e.emit(f"load {mem_n}, ptr {address}, align {align}")
  update = values[instr.ins[2]]
  if a["body"] == "add":
    update = elementwise(e, "add", {}, code, code, n, [old, update])
  new = e.select("i1", ok, mem_n, update, old)
  e.lines.append(f"  store {mem_n} {new}, ptr {address}, align {align}")
  if in_place is not None:
    values[instr.outs[0]] = base
  else:
    values[instr.outs[0]] = e.emit(f"load {mem_m}, ptr {base}, align 32")


def _walk(
  e: Emitter, plan: Plan, instr: Instr, values: dict[int, str], region: int, index: int
) -> None:
  """A gather or scatter element by element (loops.native_walk): per batch position, the
  start from its index vector (gather: each component clamped into [0, limit]; scatter:
  the window dropped when one is outside, by writing back what is there at offset 0,
  which every window fits, so no branch), then one scalar load (gather) or load, combine
  and store (scatter) per window element at the operand's address: the resident buffer
  (in place), or a stack copy of a register value. Pred elements are bytes in memory."""
  a = instr.attrs
  is_scatter = instr.op == "scatter"
  code, dims = plan.slots[instr.ins[0]]
  index_code, index_dims = plan.slots[instr.ins[1]]
  io_dims = plan.slots[instr.ins[2] if is_scatter else instr.outs[0]][1]
  m, n_index, n_io = elements(dims), elements(index_dims), elements(io_dims)
  batches, windows = loops.walk(plan, instr)
  reg_t, mem_t = scalar_type(code), scalar_type(code, in_register=False)
  align = max(1, DTYPES[code][1] // 8)
  in_place = e.update_at.get((index, instr.outs[0])) if region == 1 and is_scatter else None
  operand = values[instr.ins[0]]
  if kind(code) == "b" and in_place is None and operand not in e.pointers:
    operand = e.emit(f"zext {llvm_type(code, m)} {operand} to {llvm_type(code, m, False)}")
  base = _operand_base(e, operand, in_place, llvm_type(code, m, in_register=False))
  gathered: dict[int, str] = {}
  for index_offset, operand_offset, io_offset in batches:
    start, ok = str(operand_offset), "true"
    for c, (stride, limit) in enumerate(zip(a["start_strides"], a["start_limits"])):
      at = np.array([index_offset + c * a["index_vector_stride"]])
      v = _index_i64(e, index_code, e.gather(index_code, n_index, values[instr.ins[1]], at))
      if is_scatter:
        inside = e.emit(f"and i1 {e.icmp('sge', 'i64', v, '0')}, {e.icmp('sle', 'i64', v, limit)}")
        ok = e.emit(f"and i1 {ok}, {inside}")
      else:  # ClampIndex
        v = e.select("i1", e.icmp("slt", "i64", v, "0"), "i64", "0", v)
        v = e.select("i1", e.icmp("sgt", "i64", v, limit), "i64", limit, v)
      start = e.emit(f"add i64 {start}, {e.emit(f'mul i64 {v}, {stride}')}")
    if is_scatter:
      start = e.select("i1", ok, "i64", start, "0")
    for w_io, w_operand in windows:
      offset = e.emit(f"add i64 {start}, {w_operand}")
      address = e.emit(f"getelementptr {mem_t}, ptr {base}, i64 {offset}")
      old = e.emit(f"load {mem_t}, ptr {address}, align {align}")
      if not is_scatter:
        gathered[io_offset + w_io] = e.icmp("ne", "i8", old, "0") if kind(code) == "b" else old
        continue
      update = e.gather(code, n_io, values[instr.ins[2]], np.array([io_offset + w_io]))
      if kind(code) == "b":
        update = e.emit(f"zext i1 {update} to i8")
      elif a["body"] == "add":
        update = elementwise(e, "add", {}, code, code, 1, [old, update])
      new = e.select("i1", ok, mem_t, update, old)
      e.lines.append(f"  store {mem_t} {new}, ptr {address}, align {align}")
  if is_scatter:
    if in_place is not None:
      values[instr.outs[0]] = base
    else:
      loaded = e.emit(f"load {llvm_type(code, m, in_register=False)}, ptr {base}, align 32")
      if kind(code) == "b":
        loaded = e.icmp("ne", llvm_type(code, m, in_register=False), loaded, "zeroinitializer")
      values[instr.outs[0]] = loaded
    return
  if n_io == 1:
    values[instr.outs[0]] = gathered[0]
    return
  vector = "poison"
  for j in range(n_io):
    vector = e.emit(f"insertelement <{n_io} x {reg_t}> {vector}, {reg_t} {gathered[j]}, i32 {j}")
  values[instr.outs[0]] = vector


def _dot(e: Emitter, plan: Plan, instr: Instr, values: dict[int, str]) -> str:
  """acc = sum over k in order of lhs[L[:, k]] * rhs[R[:, k]] (vector shuffles)."""
  code, dims = plan.slots[instr.outs[0]]
  n = elements(dims)
  ty = llvm_type(code, n)
  m_l, m_r = (elements(plan.slots[s][1]) for s in instr.ins)
  li, ri = loops.dot_indices(plan, instr)
  acc = None
  for k in range(li.shape[1]):
    a = e.gather(code, m_l, values[instr.ins[0]], li[:, k])
    b = e.gather(code, m_r, values[instr.ins[1]], ri[:, k])
    product = e.emit(f"fmul {ty} {a}, {b}")
    acc = product if acc is None else e.emit(f"fadd {ty} {acc}, {product}")
  return acc


def intrinsic_suffix(code: int, n: int) -> str:
  t = "f32" if DTYPES[code][1] == 32 else "f64"
  return t if n == 1 else f"v{n}{t}"


_FCMP = {"EQ": "oeq", "NE": "une", "LT": "olt", "LE": "ole", "GT": "ogt", "GE": "oge"}
_ICMP = {"EQ": "eq", "NE": "ne", "LT": "lt", "LE": "le", "GT": "gt", "GE": "ge"}


def _compare(e: Emitter, direction: str, code: int, n: int, x: str, y: str) -> str:
  ty = llvm_type(code, n)
  k = kind(code)
  if k == "f":
    return e.emit(f"fcmp {_FCMP[direction]} {ty} {x}, {y}")
  cond = _ICMP[direction]
  if cond not in ("eq", "ne"):
    cond = ("s" if k == "s" else "u") + cond
  return e.icmp(cond, ty, x, y)


def _total_order_compare(e: Emitter, direction: str, code: int, n: int, x: str, y: str) -> str:
  # elementwise.cc TotalOrderKey: the float's bits as a signed integer, the magnitude bits
  # of negatives flipped, compared as integers (IEEE-754 totalOrder: -NaN < -inf < ... <
  # -0 < +0 < ... < +inf < +NaN).
  icode = 4 if code == 11 else 5  # s32, s64
  ity = llvm_type(icode, n)
  maximum = e.const_splat(icode, n, (1 << (DTYPES[icode][1] - 1)) - 1)

  def key(v: str) -> str:
    bits = e.emit(f"bitcast {llvm_type(code, n)} {v} to {ity}")
    flipped = e.emit(f"xor {ity} {bits}, {maximum}")
    negative = e.icmp("slt", ity, bits, e.zero(icode, n))
    return e.select(llvm_type(1, n), negative, ity, flipped, bits)

  return _compare(e, direction, icode, n, key(x), key(y))


def min_max(e: Emitter, op: str, code: int, n: int, x: str, y: str) -> str:
  # element_ops.h: maximum = (x >= y || x != x) ? x : y; minimum with <=.
  ty = llvm_type(code, n)
  k = kind(code)
  direction = "GE" if op == "maximum" else "LE"
  cmp = _compare(e, direction, code, n, x, y)
  if k == "f":
    nan = e.emit(f"fcmp uno {ty} {x}, {x}")
    cmp = e.emit(f"or {llvm_type(1, n)} {cmp}, {nan}")
  return e.select(llvm_type(1, n), cmp, ty, x, y)


def _int_divide(e: Emitter, code: int, n: int, x: str, y: str) -> str:
  # elementwise.cc Divide: y == 0 -> -1; signed MIN / -1 -> MIN; else x / y truncated.
  ty = llvm_type(code, n)
  bits = DTYPES[code][1]
  zero = e.zero(code, n)
  is_zero = e.icmp("eq", ty, y, zero)
  one = e.const_splat(code, n, 1)
  if kind(code) == "s":
    minus_one = e.const_splat(code, n, -1)
    is_m1 = e.icmp("eq", ty, y, minus_one)
    is_min = e.icmp("eq", ty, x, e.const_splat(code, n, -(1 << (bits - 1))))
    overflow = e.emit(f"and {llvm_type(1, n)} {is_m1}, {is_min}")
    bad = e.emit(f"or {llvm_type(1, n)} {is_zero}, {overflow}")
    safe = e.select(llvm_type(1, n), bad, ty, one, y)
    q = e.emit(f"sdiv {ty} {x}, {safe}")
    q = e.select(llvm_type(1, n), overflow, ty, x, q)
  else:
    safe = e.select(llvm_type(1, n), is_zero, ty, one, y)
    q = e.emit(f"udiv {ty} {x}, {safe}")
  return e.select(llvm_type(1, n), is_zero, ty, e.all_ones(code, n), q)


def _int_remainder(e: Emitter, code: int, n: int, x: str, y: str) -> str:
  # elementwise.cc Remainder: y == 0 -> x; signed y == -1 -> 0; else x % y (truncated).
  ty = llvm_type(code, n)
  is_zero = e.icmp("eq", ty, y, e.zero(code, n))
  one = e.const_splat(code, n, 1)
  if kind(code) == "s":
    is_m1 = e.icmp("eq", ty, y, e.const_splat(code, n, -1))
    bad = e.emit(f"or {llvm_type(1, n)} {is_zero}, {is_m1}")
    r = e.emit(f"srem {ty} {x}, {e.select(llvm_type(1, n), bad, ty, one, y)}")
    r = e.select(llvm_type(1, n), is_m1, ty, e.zero(code, n), r)
  else:
    r = e.emit(f"urem {ty} {x}, {e.select(llvm_type(1, n), is_zero, ty, one, y)}")
  return e.select(llvm_type(1, n), is_zero, ty, x, r)


def int_sign(e: Emitter, code: int, n: int, x: str) -> str:
  """elementwise.cc Sign of an integer: (0 < x) - (x < 0), in x's type."""
  ty = llvm_type(code, n)
  zero = e.zero(code, n)
  positive = e.icmp("ugt" if kind(code) == "u" else "sgt", ty, x, zero)
  pos = e.emit(f"zext {llvm_type(1, n)} {positive} to {ty}")
  if kind(code) == "u":
    return pos
  negative = e.icmp("slt", ty, x, zero)
  neg = e.emit(f"zext {llvm_type(1, n)} {negative} to {ty}")
  return e.emit(f"sub {ty} {pos}, {neg}")


def convert_value(e: Emitter, src: int, dst: int, n: int, x: str) -> str:
  # convert.cc: float -> int truncates, saturates, NaN -> 0 (LLVM's fpto[su]i.sat);
  # anything -> pred is x != 0; pred -> anything is 0/1.
  sk, dk = kind(src), kind(dst)
  sb, db = DTYPES[src][1], DTYPES[dst][1]
  st, dt = llvm_type(src, n), llvm_type(dst, n)
  if src == dst:
    return x
  if dk == "b":
    if sk == "f":
      return e.emit(f"fcmp une {st} {x}, {e.zero(src, n)}")
    return e.icmp("ne", st, x, e.zero(src, n))
  if sk == "f" and dk == "f":
    return e.emit(f"{'fpext' if db > sb else 'fptrunc'} {st} {x} to {dt}")
  if sk == "f":
    return _float_to_int(e, src, dst, n, x)
  signed = sk == "s"
  if dk == "f":
    return e.emit(f"{'sitofp' if signed else 'uitofp'} {st} {x} to {dt}")
  if db > sb:
    return e.emit(f"{'sext' if signed else 'zext'} {st} {x} to {dt}")
  if db < sb:
    return e.emit(f"trunc {st} {x} to {dt}")
  return x  # same width, other signedness: the same bits


def _float_to_int(e: Emitter, src: int, dst: int, n: int, x: str) -> str:
  """convert.cc's float -> integer: truncation, saturation at the type's limits, NaN -> 0,
  as LLVM's fpto[su]i.sat, which LLVM 14 splits into a scalar conversion per lane (a
  quantization to int8, round(x / s) clipped: 5x XLA:CPU's time). Here: NaN replaced by
  0, the value clamped into the range the plain fpto[su]i converts, then converted, which
  vectorizes (cvttps2dq); a limit the float type cannot hold (2^31 - 1 in f32) is clamped
  to the largest float below it, and operands at or above 2^(bits-1) (2^bits unsigned)
  take the limit by a select."""
  signed = kind(dst) == "s"
  bits = DTYPES[dst][1]
  ft = loops.NUMPY[src]
  st, dt = llvm_type(src, n), llvm_type(dst, n)
  pred = llvm_type(1, n)
  low = -(2.0 ** (bits - 1)) if signed else 0.0  # exact in every float type
  top = 2.0 ** (bits - 1) if signed else 2.0**bits  # the first value out of range
  high = float(np.nextafter(ft(top), ft(0)))  # the largest float below it
  nan = e.emit(f"fcmp uno {st} {x}, {x}")
  y = e.select(pred, nan, st, e.zero(src, n), x)
  y = e.select(
    pred,
    e.emit(f"fcmp olt {st} {y}, {e.const_splat(src, n, low)}"),
    st,
    e.const_splat(src, n, low),
    y,
  )
  y = e.select(
    pred,
    e.emit(f"fcmp ogt {st} {y}, {e.const_splat(src, n, high)}"),
    st,
    e.const_splat(src, n, high),
    y,
  )
  out = e.emit(f"{'fptosi' if signed else 'fptoui'} {st} {y} to {dt}")
  limit = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
  if int(high) != limit:  # the type's limit is not a float: x >= top gives it
    over = e.emit(f"fcmp oge {st} {x}, {e.const_splat(src, n, top)}")
    out = e.select(pred, over, dt, e.const_splat(dst, n, limit), out)
  return out


def _int_suffix(bits: int, n: int) -> str:
  return f"i{bits}" if n == 1 else f"v{n}i{bits}"


def emit_loop(
  plan: Plan,
  instr: Instr,
  symbol: str,
  called: bool = False,
  calls: list | None = None,
  memory: bool = False,
) -> str:
  """The LLVM IR module text of `instr` (a while the tier accepts) as function `symbol`.

  `called`: ops in loops.CALLED become calls of the interpreter's kernels (the caller has
  the symbols WorkshopJitCall and workshop_kernel_<op> to link them against).
  `memory`: values too big for registers live in buffers (loops.memory_plan): the
  function's args then end with a pointer to loops.Memory.scratch bytes.
  """
  if memory:
    cond, body, mem = loops.check_memory_loop(plan, instr)
    resident, update_at = mem.resident, mem.update_at
  else:
    cond, body = loops.check_loop(plan, instr, called)
    resident, updates = loops.resident_values(plan, instr, called)
    update_at = {step: i for i, chain in updates.items() for step in chain}
    mem = None
  e = Emitter()
  e.declares = set()
  e.allocas = []
  e.globals = set()
  e.can_call = called
  e.calls = calls if calls is not None else []
  e.uses_run = False
  e.pointers = set()  # SSA names of resident values (pointers to their buffers)
  e.update_at = update_at
  e.homes = mem.homes if mem else {}
  e.runs = mem.runs if mem else set()
  n = len(instr.outs)
  n_in = len(instr.ins)
  # The pointer to each resident carried value's current buffer: its result buffer, or
  # in memory mode the phi alternating between that and its other buffer.
  e.carried_ptr = {i: (f"%cur{i}" if mem else f"%ro{i}") for i in resident if i < n}
  e.pointers |= set(e.carried_ptr.values())
  entry: list[str] = []
  if mem:
    entry.append(f"  %sp = getelementptr ptr, ptr %args, i64 {n_in + n}")
    entry.append("  %scratch = load ptr, ptr %sp")
    for i, offset in mem.other.items():
      entry.append(f"  %alt{i} = getelementptr i8, ptr %scratch, i64 {offset}")
  operands = []
  for i, slot in enumerate(instr.ins):
    code, dims = plan.slots[slot]
    m = elements(dims)
    entry.append(f"  %p{i} = getelementptr ptr, ptr %args, i64 {i}")
    entry.append(f"  %a{i} = load ptr, ptr %p{i}")
    if i in resident:
      if i < n:  # carried: lives in its result buffer from now on
        nbytes = loops.byte_size(code, dims)
        entry.append(f"  %rp{i} = getelementptr ptr, ptr %args, i64 {n_in + i}")
        entry.append(f"  %ro{i} = load ptr, ptr %rp{i}")
        entry.append(
          f"  call void @llvm.memcpy.p0.p0.i64(ptr %ro{i}, ptr %a{i}, i64 {nbytes}, i1 false)"
        )
        operands.append(e.carried_ptr[i])
      else:
        operands.append(f"%a{i}")
      e.pointers.add(operands[-1])
      continue
    mem_t = llvm_type(code, m, in_register=False)
    align = max(1, DTYPES[code][1] // 8)
    entry.append(f"  %l{i} = load {mem_t}, ptr %a{i}, align {align}")
    if kind(code) == "b":
      entry.append(f"  %v{i}_in = icmp ne {mem_t} %l{i}, zeroinitializer")
      operands.append(f"%v{i}_in")
    else:
      operands.append(f"%l{i}")
  # head: one phi per carried value; captures are loop-invariant.
  carried = [operands[i] if i in resident else f"%c{i}" for i in range(n)]
  cond_values = {cond.params[i]: (carried[i] if i < n else operands[i]) for i in range(n_in)}
  body_values = {body.params[i]: (carried[i] if i < n else operands[i]) for i in range(n_in)}
  e.lines.append("head:")
  phi_at = len(e.lines)
  e.block = "head"
  _region(e, cond, cond_values, 0)
  e.lines.append(f"  br i1 {cond_values[cond.results[0]]}, label %body, label %exit")
  e.lines.append("body:")
  e.block = "body"
  for i in mem.other if mem else ():
    same = e.icmp("eq", "ptr", f"%cur{i}", f"%ro{i}")
    e.lines.append(f"  %oth{i} = select i1 {same}, ptr %alt{i}, ptr %ro{i}")
  _region(e, body, body_values, 1)
  for i in sorted(mem.copies) if mem else ():
    code, dims = plan.slots[instr.outs[i]]
    e.lines.append(
      f"  call void @llvm.memcpy.p0.p0.i64(ptr %oth{i}, ptr {body_values[body.results[i]]}, "
      f"i64 {loops.byte_size(code, dims)}, i1 false)"
    )
  latch = e.block  # the body's last block (after any nested loop)
  e.lines.append("  br label %head")
  phis = []
  for i in range(n):
    if i in resident and mem:
      step = f"%oth{i}" if i in mem.copies else body_values[body.results[i]]
      phis.append(f"  %cur{i} = phi ptr [%ro{i}, %entry], [{step}, %{latch}]")
    if i in resident:
      continue
    code, dims = plan.slots[instr.outs[i]]
    t = llvm_type(code, elements(dims))
    phis.append(
      f"  {carried[i]} = phi {t} [{operands[i]}, %entry], "
      f"[{body_values[body.results[i]]}, %{latch}]"
    )
  e.lines[phi_at:phi_at] = phis
  e.lines.append("exit:")
  for i in mem.other if mem else ():
    # The last value is in the other buffer: into the result buffer with it.
    code, dims = plan.slots[instr.outs[i]]
    same = e.icmp("eq", "ptr", f"%cur{i}", f"%ro{i}")
    e.lines.append(f"  br i1 {same}, label %done{i}, label %copy{i}")
    e.lines.append(f"copy{i}:")
    e.lines.append(
      f"  call void @llvm.memcpy.p0.p0.i64(ptr %ro{i}, ptr %cur{i}, "
      f"i64 {loops.byte_size(code, dims)}, i1 false)"
    )
    e.lines.append(f"  br label %done{i}")
    e.lines.append(f"done{i}:")
  for i in range(n):
    if i in resident:
      continue
    code, dims = plan.slots[instr.outs[i]]
    m = elements(dims)
    k = n_in + i
    e.lines.append(f"  %q{i} = getelementptr ptr, ptr %args, i64 {k}")
    e.lines.append(f"  %o{i} = load ptr, ptr %q{i}")
    value = carried[i]
    if kind(code) == "b":
      e.lines.append(f"  %z{i} = zext {llvm_type(code, m)} {value} to {llvm_type(code, m, False)}")
      value = f"%z{i}"
    align = max(1, DTYPES[code][1] // 8)
    e.lines.append(f"  store {llvm_type(code, m, False)} {value}, ptr %o{i}, align {align}")
  e.lines.append("  ret void")
  if resident:
    e.declares.add("declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
  return _module(e, symbol, "ptr %args, ptr %calls", entry + ["  br label %head"], [cond, body])


def _module(e: Emitter, symbol: str, params: str, entry: list[str], regions: list[Plan]) -> str:
  """The module text of function `symbol(params)`: the entry block's allocas and `entry`
  lines, then e.lines, with the declarations they use (intrinsics on the value sizes of
  `regions`, the kernel call entries)."""
  intrinsics = set(e.declares) | e.globals
  if e.globals:
    intrinsics.add("declare i32 @WorkshopJitCall(ptr, i32, i32, i32, ptr, ptr, i64)")
  if e.uses_run:
    intrinsics.add("declare i32 @WorkshopJitRun(ptr, ptr, ptr)")
  text = "\n".join(e.lines)
  for name in ("fabs", "sqrt"):
    for code in (11, 12):
      for m in {1} | {elements(s[1]) for r in regions for s in r.slots}:
        t = llvm_type(code, m)
        fn = f"@llvm.{name}.{intrinsic_suffix(code, m)}"
        if fn + "(" in text:
          intrinsics.add(f"declare {t} {fn}({t})")
  return (
    "\n".join(sorted(intrinsics))
    + "\n\n"
    + f"define void @{symbol}({params}) #0 {{\nentry:\n"
    + "\n".join(e.allocas + entry)
    + "\n"
    + text
    + "\n}\n\n"
    + 'attributes #0 = { nounwind "denormal-fp-math"="preserve-sign,preserve-sign" '
    '"denormal-fp-math-f32"="preserve-sign,preserve-sign" }\n'
  )


def emit_block(block: Plan, symbol: str, called: bool = False) -> str:
  """The LLVM IR module text of straight-line plan `block` (loops.check_block) as
  function `void symbol(ptr %args)`: args[i] points at the value of block.params[i],
  args[len(params) + j] at where block.results[j] goes. Values live in registers as in
  a loop; `called`: CALLED ops call the interpreter's kernels (WorkshopJitCall)."""
  loops.check_block(block, called)
  e = Emitter()
  e.declares = set()
  e.allocas = []
  e.globals = set()
  e.can_call = called
  e.calls = []
  e.uses_run = False
  e.pointers = set()
  e.update_at = {}
  e.homes, e.runs, e.carried_ptr = {}, set(), {}
  e.block = "entry"
  entry: list[str] = []
  values: dict[int, str] = {}
  for i, slot in enumerate(block.params):
    code, dims = block.slots[slot]
    mem_t = llvm_type(code, elements(dims), in_register=False)
    align = max(1, DTYPES[code][1] // 8)
    entry.append(f"  %p{i} = getelementptr ptr, ptr %args, i64 {i}")
    entry.append(f"  %a{i} = load ptr, ptr %p{i}")
    entry.append(f"  %l{i} = load {mem_t}, ptr %a{i}, align {align}")
    if kind(code) == "b":
      entry.append(f"  %v{i}_in = icmp ne {mem_t} %l{i}, zeroinitializer")
      values[slot] = f"%v{i}_in"
    else:
      values[slot] = f"%l{i}"
  _region(e, block, values, 1)
  if e.calls or e.uses_run:
    raise Unsupported("a kernel run in a block")
  n_in = len(block.params)
  for j, slot in enumerate(block.results):
    code, dims = block.slots[slot]
    m = elements(dims)
    e.lines.append(f"  %q{j} = getelementptr ptr, ptr %args, i64 {n_in + j}")
    e.lines.append(f"  %o{j} = load ptr, ptr %q{j}")
    value = values[slot]
    if kind(code) == "b":
      e.lines.append(f"  %z{j} = zext {llvm_type(code, m)} {value} to {llvm_type(code, m, False)}")
      value = f"%z{j}"
    align = max(1, DTYPES[code][1] // 8)
    e.lines.append(f"  store {llvm_type(code, m, False)} {value}, ptr %o{j}, align {align}")
  e.lines.append("  ret void")
  return _module(e, symbol, "ptr %args", entry, [block])
