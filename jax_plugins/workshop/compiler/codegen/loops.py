"""Which while loops the code-generation tier takes, and what their ops mean.

A loop qualifies when its cond and body are straight-line plans of the ops in `OPS` on
small values (at most `MAX_ELEMENTS` elements per slot) of the dtypes in `DTYPES`. Every
op's semantics here are the interpreter's, bit for bit (kernels/elementwise/elementwise.cc,
element_ops.h, convert.cc): the emitters (llvm_ir.py, cxx.py) follow this module's
description, and tests/ops/test_codegen_loops.py compares them with the interpreter.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import dtypes
from ..plan import Instr, Plan

# PJRT_Buffer_Type code -> (name, bits, kind): kind "f" float, "s" signed, "u" unsigned,
# "b" pred. Loops leave f16/bf16 and complex to the interpreter.
DTYPES = {
  1: ("pred", 1, "b"),
  2: ("s8", 8, "s"),
  3: ("s16", 16, "s"),
  4: ("s32", 32, "s"),
  5: ("s64", 64, "s"),
  6: ("u8", 8, "u"),
  7: ("u16", 16, "u"),
  8: ("u32", 32, "u"),
  9: ("u64", 64, "u"),
  11: ("f32", 32, "f"),
  12: ("f64", 64, "f"),
}
# 16-bit floats (kind "h"): storage types, held as their i16 bits; only fusions take them,
# computing in f32 as the interpreter does (kernels/math/half.h, fusions.py).
HALVES = {10: ("f16", 16, "h"), 13: ("bf16", 16, "h")}
STORAGE = {**DTYPES, **HALVES}
NUMPY = {
  1: np.uint8,
  2: np.int8,
  3: np.int16,
  4: np.int32,
  5: np.int64,
  6: np.uint8,
  7: np.uint16,
  8: np.uint32,
  9: np.uint64,
  11: np.float32,
  12: np.float64,
}

# Values larger than this stay in the interpreter: the generated code keeps every value
# in (vector) registers, and a loop over large arrays is memory-bound anyway.
MAX_ELEMENTS = 256
# Bigger bodies compile for longer than they are likely to save. A threefry draw per step
# (equinox's buffered loop reading xs[randint(key(step))]) is about 800 instructions,
# which jit_blocks compile anyway: the whole loop compiled no slower (1.3 s both ways,
# the program's compile) and ran 10x faster than as an interpreted loop of blocks.
MAX_INSTRS = 1000

ELEMENTWISE_BINARY = {
  "add",
  "subtract",
  "multiply",
  "divide",
  "maximum",
  "minimum",
  "and",
  "or",
  "xor",
  "shift_left",
  "shift_right_logical",
  "shift_right_arithmetic",
}
ELEMENTWISE_UNARY = {"negate", "abs", "sqrt", "not", "convert", "copy", "reshape"}
MOVES = {"broadcast_in_dim", "transpose", "slice", "reverse"}
OPS = ELEMENTWISE_BINARY | ELEMENTWISE_UNARY | MOVES | {"constant", "compare", "select", "clamp"}
# Ops the generated code does not compute itself but calls the interpreter's kernel for
# (WorkshopJitCall, kernels/codegen/jit_loop.cc), on the whole value: the same bits by
# construction. Only attribute-free kernels whose operands share one dtype.
CALLED_UNARY = {
  "exponential",
  "exponential_minus_one",
  "log",
  "log_plus_one",
  "logistic",
  "sine",
  "cosine",
  "tan",
  "tanh",
  "floor",
  "ceil",
  "round_nearest_afz",
  "round_nearest_even",
  "rsqrt",
  "cbrt",
  "sign",
  "popcnt",
  "count_leading_zeros",
  "is_finite",
  "erf",
  "sinh",
  "cosh",
  "asin",
  "acos",
  "asinh",
  "acosh",
  "atanh",
}
CALLED_BINARY = {
  "remainder",
  "power",
  "atan2",
}
CALLED = CALLED_UNARY | CALLED_BINARY
# Ops the generated code runs by calling the instruction's own kernel with its own
# attributes and slot types (WorkshopJitRun with the prepared instruction): reductions,
# dots, indexing, sorting. Any number of results.
RUN = {
  "reduce",
  "dot_general",
  "dynamic_slice",
  "dynamic_update_slice",
  "iota",
  "concatenate",
  "pad",
  "gather",
  "scatter",
  "argmax",
  "argmin",
  "sort",
  "reduce_precision",
  "compare",
}


def dtype_name(code: int) -> str:
  """The XLA name of PJRT_Buffer_Type `code` ("bf16"), for Unsupported messages."""
  dtype = dtypes.by_code(code)
  return dtype.name if dtype else f"code {code}"


class Unsupported(Exception):
  """The loop stays with the interpreter (the message says why, for WORKSHOP_CODEGEN_DEBUG)."""


def kind(code: int) -> str:
  return STORAGE[code][2]


def elements(dims) -> int:
  return int(np.prod(dims, dtype=np.int64))


def _regions(instr: Instr) -> tuple[Plan, Plan]:
  """(cond, body) of while `instr`, each taking one parameter per operand."""
  cond, body = instr.attrs.get("cond"), instr.attrs.get("body")
  if not isinstance(cond, Plan) or not isinstance(body, Plan):
    raise Unsupported("no cond/body plans")
  if len(cond.params) != len(instr.ins) or len(body.params) != len(instr.ins):
    raise Unsupported("region parameters do not match the operands")
  return cond, body


def check_loop(plan: Plan, instr: Instr, called: bool = False) -> tuple[Plan, Plan]:
  """(cond, body) of a while instruction the tier can compile, else raises Unsupported.

  `called`: the emitter can call kernels (CALLED ops are allowed).
  """
  cond, body = _regions(instr)
  n = len(instr.outs)
  if len(body.results) != n or len(cond.results) != 1:
    raise Unsupported("unexpected region results")
  resident, updates = resident_values(plan, instr, called)
  big_ok = {
    ("outer", s) for i in resident for s in [instr.ins[i]] + ([instr.outs[i]] if i < n else [])
  }
  big_ok |= {(id(r), r.params[i]) for r in (cond, body) for i in resident}
  big_ok |= {(id(body), slot) for chain in updates.values() for _, slot in chain}
  for slot in list(instr.ins) + list(instr.outs):
    _check_slot(plan.slots[slot], ("outer", slot) in big_ok)
  for region in (cond, body):
    if len(region.instrs) > MAX_INSTRS:
      raise Unsupported(f"{len(region.instrs)} instructions")
    for slot, t in enumerate(region.slots):
      _check_slot(t, (id(region), slot) in big_ok)
    for inner in region.instrs:
      if called and interpreted_case(region, inner):
        continue  # a call site: the interpreter runs it on the loop's values
      _check_instr(region, inner, called)
  _check_carried(plan, instr, cond, body)
  return cond, body


def _check_carried(plan: Plan, instr: Instr, cond: Plan, body: Plan) -> None:
  """cond returns pred[]; each carried value has the loop result's type in the body."""
  if cond.slots[cond.results[0]] != (1, ()):
    raise Unsupported("cond does not return pred[]")
  for i in range(len(instr.outs)):
    if tuple(body.slots[body.results[i]]) != tuple(plan.slots[instr.outs[i]]) or tuple(
      body.slots[body.params[i]]
    ) != tuple(plan.slots[instr.outs[i]]):
      raise Unsupported("loop-carried types differ")


def _check_slot(slot, resident: bool = False) -> None:
  code, dims = slot
  if code not in DTYPES:
    raise Unsupported(f"element type {dtype_name(code)}")
  if not 0 < elements(dims) <= (1 << 40 if resident else MAX_ELEMENTS):
    raise Unsupported(f"{elements(dims)} elements")


# Kernels that are correct when their result 0 *is* their operand 0 (kernels/core/kernel.h
# `reuses_operand0`): the generated code updates a resident value in place with them.
IN_PLACE = {"dynamic_update_slice", "scatter"}


def resident_values(
  plan: Plan, instr: Instr, called: bool
) -> tuple[set[int], dict[int, list[tuple[int, int]]]]:
  """Loop operands too big for registers that stay in memory: (their operand indices,
  {carried index: (index in body, result slot) of each instruction that updates it in
  place, in order}).

  lax.scan's pattern: xs carried unchanged and read by dynamic_slice, ys carried and
  written by dynamic_update_slice of one row. A resident value is only read by kernel
  calls (loops.RUN) and interpreted cases (interpreted_case); a carried one lives in its
  result buffer (copied there once, on entry) and the body either passes it through or
  updates it with one IN_PLACE kernel whose operand 0 it is (or a chain of them, each
  updating the last one's result), after every other read of it in the body; kernel
  runs may read the updated value after the chain (_reads_updated). An interpreted case
  may start a chain: its result is copied into the buffer (unless the branch passed the
  value through) after the case has read everything it reads.
  """
  cond, body = instr.attrs["cond"], instr.attrs["body"]
  n = len(instr.outs)
  big = {i for i, slot in enumerate(instr.ins) if elements(plan.slots[slot][1]) > MAX_ELEMENTS}
  if big and not called:
    raise Unsupported("values too big for registers need kernel calls")
  updates: dict[int, list[tuple[int, int]]] = {}
  for i in big:
    for region in (cond, body):
      param = region.params[i]
      for inner in region.instrs:
        if param in inner.ins and not (runs_kernel(inner) or interpreted_case(region, inner)):
          raise Unsupported(f"{inner.op} reads a value too big for registers")
    if cond.params[i] in cond.results:
      raise Unsupported("cond returns a resident value")
    others = [r for j, r in enumerate(body.results) if j != i]
    if body.params[i] in others:
      raise Unsupported("resident value returned in another place")
    if i >= n:
      continue
    result = body.results[i]
    if result == body.params[i]:
      continue
    if result in others:
      raise Unsupported("resident value not updated in place")
    # The chain of IN_PLACE updates from the parameter to the result (a swap of two
    # elements, lu_pivots_to_permutation's body, is two scatters), last first: each reads
    # the previous value only as its operand 0, and nothing else reads that value.
    chain: list[tuple[int, int]] = []
    value = result
    while value != body.params[i]:
      makers = [k for k, inner in enumerate(body.instrs) if value in inner.outs]
      if len(makers) != 1:
        raise Unsupported("resident result not made in the body")
      k = makers[0]
      update = body.instrs[k]
      readers = [inner for inner in body.instrs if value in inner.ins]
      case = interpreted_case(body, update)
      if (
        (not case and (update.op not in IN_PLACE or update.outs != [value]))
        or (not case and update.ins[0] in update.ins[1:])
        or update.outs.count(value) != 1
        or (
          value != result
          and (len(readers) != 1 or readers[0].ins[0] != value or readers[0].ins.count(value) != 1)
        )
        or (value == result and not all(_reads_updated(inner, value) for inner in readers))
      ):
        raise Unsupported("resident value not updated in place")
      chain.append((k, value))
      # A case writes the whole value (it reads what it reads first): the chain starts here.
      value = body.params[i] if case else update.ins[0]
    first = min(k for k, _ in chain)
    if any(body.params[i] in inner.ins for inner in body.instrs[first + 1 :]):
      raise Unsupported("resident value read after its update")
    updates[i] = sorted(chain)
  return big, updates


def _reads_updated(instr: Instr, value: int) -> bool:
  """Whether `instr` may read resident `value` after its last in-place update of the
  step (the attention over a KV cache just written): a kernel run (loops.RUN) that reads
  it only as an operand, from the result buffer it lives in, and never writes over it."""
  return (
    runs_kernel(instr)
    and value not in instr.outs
    and not (instr.op in IN_PLACE and instr.ins[0] == value)
  )


# A float dot_general at most this big (outputs x contraction length) is computed in the
# generated code: one vector multiply-add per contraction index, in index order. Its
# sums are rounded in another order than OpenBLAS's, so such a loop matches the
# interpreter within rounding, not bit for bit (a dot is not an exact op).
MAX_NATIVE_DOT = 4096


def native_dot(plan: Plan, instr: Instr) -> bool:
  if (
    instr.op != "dot_general"
    or kind(plan.slots[instr.outs[0]][0]) != "f"
    or len({plan.slots[s][0] for s in list(instr.ins) + list(instr.outs)}) != 1
  ):
    return False
  if any(elements(plan.slots[s][1]) > MAX_ELEMENTS for s in list(instr.ins) + list(instr.outs)):
    return False
  lhs = plan.slots[instr.ins[0]][1]
  k = int(np.prod([lhs[d] for d in instr.attrs["lhs_contract"]], dtype=np.int64))
  return elements(plan.slots[instr.outs[0]][1]) * max(k, 1) <= MAX_NATIVE_DOT and k >= 1


def dot_indices(plan: Plan, instr: Instr) -> tuple[np.ndarray, np.ndarray]:
  """(L, R), each [outputs, K]: the lhs and rhs flat index of each product of each output,
  in contraction order (StableHLO's result layout: batch, lhs free, rhs free)."""
  a = instr.attrs
  lhs, rhs = list(plan.slots[instr.ins[0]][1]), list(plan.slots[instr.ins[1]][1])
  lb, rb, lc, rc = a["lhs_batch"], a["rhs_batch"], a["lhs_contract"], a["rhs_contract"]
  lf = [d for d in range(len(lhs)) if d not in lb and d not in lc]
  rf = [d for d in range(len(rhs)) if d not in rb and d not in rc]
  batch, lfree, rfree = [lhs[d] for d in lb], [lhs[d] for d in lf], [rhs[d] for d in rf]
  k = int(np.prod([lhs[d] for d in lc], dtype=np.int64))
  li = np.arange(elements(lhs)).reshape(lhs).transpose(lb + lf + lc).reshape(batch + lfree + [k])
  ri = np.arange(elements(rhs)).reshape(rhs).transpose(rb + rf + rc).reshape(batch + rfree + [k])
  out = batch + lfree + rfree
  li = np.broadcast_to(li.reshape(batch + lfree + [1] * len(rfree) + [k]), out + [k])
  ri = np.broadcast_to(ri.reshape(batch + [1] * len(lfree) + rfree + [k]), out + [k])
  return li.reshape(-1, k), ri.reshape(-1, k)


def native_window(plan: Plan, instr: Instr) -> bool:
  """A dynamic_slice / dynamic_update_slice whose window is one contiguous run of the
  operand in row-major order (a scan's row of xs or ys): the generated code clamps the
  starts as the kernel does (indexing.cc) and loads or stores the run directly."""
  if instr.op not in ("dynamic_slice", "dynamic_update_slice"):
    return False
  dims = list(plan.slots[instr.ins[0]][1])
  window = list(plan.slots[instr.outs[0] if instr.op == "dynamic_slice" else instr.ins[1]][1])
  code = plan.slots[instr.ins[0]][0]
  if kind(code) == "b" or len(window) != len(dims) or not dims:
    return False
  if len(instr.ins) != (1 if instr.op == "dynamic_slice" else 2) + len(dims):
    return False
  first = next((d for d, w in enumerate(window) if w != 1), len(dims))
  return all(window[d] == dims[d] for d in range(first + 1, len(dims)))


# Update computations of a scatter the generated code applies itself (native_scatter).
NATIVE_SCATTER_BODIES = {"set", "add"}


def native_scatter(plan: Plan, instr: Instr) -> bool:
  """A scatter of one update (`x.at[i].set(v)`, `x.at[i].add(v)`: a single index vector,
  set or add) whose window is one contiguous run of the operand in row-major order, taken
  in the updates' order: the generated code reads each start as the kernel does
  (gather_scatter.cc ComputeStarts: a start outside [0, limit] drops the update) and
  stores the run at the operand's address, the resident buffer in place. The kernel call
  it replaces cost 1-3 us per iteration (its attribute lookups and walk set-up)."""
  if instr.op != "scatter" or instr.attrs.get("body") not in NATIVE_SCATTER_BODIES:
    return False
  if len(instr.ins) != 3 or len(instr.outs) != 1:
    return False
  a = instr.attrs
  code = plan.slots[instr.ins[0]][0]
  index_code, index_dims = plan.slots[instr.ins[1]]
  update_code, update_dims = plan.slots[instr.ins[2]]
  if code not in DTYPES or kind(code) == "b" or update_code != code:
    return False
  if index_code not in DTYPES or kind(index_code) not in ("s", "u"):
    return False
  if elements(index_dims) > MAX_ELEMENTS or not 0 < elements(update_dims) <= MAX_ELEMENTS:
    return False
  if elements(a["batch_shape"]) != 1 or len(a["start_strides"]) != len(a["start_limits"]):
    return False
  components = len(a["start_strides"])
  if components and (components - 1) * a["index_vector_stride"] >= elements(index_dims):
    return False
  shape, inner = a["window_shape"], 1
  if elements(shape) != elements(update_dims):
    return False
  for j in reversed(range(len(shape))):
    if shape[j] != 1 and (
      a["window_operand_strides"][j] != inner or a["window_strides"][j] != inner
    ):
      return False
    inner *= shape[j]
  return inner <= elements(plan.slots[instr.ins[0]][1])


def native_walk(plan: Plan, instr: Instr) -> bool:
  """A gather, or a scatter with body set (or add, of one update), whose result or
  updates are at most MAX_ELEMENTS elements and indices at most MAX_ELEMENTS (the column
  x[:, i] of a batch of buffers, a vmapped x.at[i].set(v), a pred flag's update): the
  generated code walks the batch and window (gather_scatter.cc's attributes, enumerated
  here at compile time) element by element, each start read as the kernel's
  ComputeStarts does (gather clamps each component into [0, limit]; scatter drops a
  window with one outside), in the kernel's batch order, so a repeated index keeps the
  last update as the kernel does. Pure data movement (one add per element for add), so
  exact. native_scatter's contiguous runs are preferred (one vector load and store)."""
  if instr.op not in ("gather", "scatter") or native_scatter(plan, instr):
    return False
  a = instr.attrs
  is_scatter = instr.op == "scatter"
  if len(instr.ins) != (3 if is_scatter else 2) or len(instr.outs) != 1:
    return False
  if is_scatter and a.get("body") not in NATIVE_SCATTER_BODIES:
    return False
  code = plan.slots[instr.ins[0]][0]
  index_code, index_dims = plan.slots[instr.ins[1]]
  io_code, io_dims = plan.slots[instr.ins[2] if is_scatter else instr.outs[0]]
  if code not in DTYPES or io_code != code or (is_scatter and plan.slots[instr.outs[0]][0] != code):
    return False
  if index_code not in DTYPES or kind(index_code) not in ("s", "u"):
    return False
  if not 0 < elements(index_dims) <= MAX_ELEMENTS or not 0 < elements(io_dims) <= MAX_ELEMENTS:
    return False
  try:
    batches, windows = walk(plan, instr)
  except (KeyError, TypeError, ValueError):
    return False
  if len(batches) * len(windows) != elements(io_dims):
    return False
  if is_scatter and a["body"] == "add" and len(batches) != 1:
    return False  # several adds may hit one element: keep the kernel's order and rounding
  m, n_index, n_io = elements(plan.slots[instr.ins[0]][1]), elements(index_dims), elements(io_dims)
  components = len(a["start_strides"])
  for index_offset, operand_offset, io_offset in batches:
    last = index_offset + max(components - 1, 0) * a["index_vector_stride"]
    top = operand_offset + sum(s * l for s, l in zip(a["start_strides"], a["start_limits"]))
    if index_offset < 0 or last >= n_index:
      return False
    for w_io, w_operand in windows:
      if not 0 <= io_offset + w_io < n_io or not 0 <= operand_offset + w_operand:
        return False
      if top + w_operand >= m:
        return False
  return True


def walk(plan: Plan, instr: Instr) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
  """A gather's or scatter's walk (gather_scatter.cc's attributes) enumerated: each batch
  position's (index offset, operand offset, io offset) in the kernel's row-major batch
  order, and each window element's (io offset, operand offset)."""
  a = instr.attrs
  if len(a["start_strides"]) != len(a["start_limits"]):
    raise ValueError("start attributes")
  batches = []
  for position in np.ndindex(*a["batch_shape"]):
    batches.append(
      tuple(
        int(sum(i * s for i, s in zip(position, a[k])))
        for k in ("batch_index_strides", "batch_operand_strides", "batch_strides")
      )
    )
  windows = []
  for position in np.ndindex(*a["window_shape"]):
    windows.append(
      tuple(
        int(sum(i * s for i, s in zip(position, a[k])))
        for k in ("window_strides", "window_operand_strides")
      )
    )
  return batches, windows


def runs_kernel(instr: Instr, plan: Plan | None = None) -> bool:
  """Whether the emitter calls `instr`'s kernel (RUN) rather than computing it."""
  if plan is not None and (
    native_dot(plan, instr)
    or native_window(plan, instr)
    or native_scatter(plan, instr)
    or native_walk(plan, instr)
  ):
    return False
  return instr.op in RUN and (
    instr.op != "compare" or instr.attrs.get("compare_type") == "TOTALORDER"
  )


def interpreted_case(plan: Plan, instr: Instr) -> bool:
  """Whether `instr` of a loop's cond or body is a case the generated code hands to the
  interpreter (a call site, WorkshopJitRun running kernels/control_flow.cc's case on the
  loop's values) because it cannot compute every branch itself: a branch runs a kernel
  (equinox's checkpointing, an argmax over the saved steps) or holds values too big for
  registers. Only the taken branch runs, as interpreted; the loop around it stays native
  code."""
  if instr.op != "case":
    return False
  try:
    _check_case(plan, instr)
  except Unsupported:
    return True
  return False


def _check_case(plan: Plan, instr: Instr) -> None:
  """A case/if whose branches the emitter can compute both of (if-conversion): every
  branch is straight-line code of the tier's own ops, kernel calls of CALLED ops or
  native dots (no call sites: those index the loop's cond and body), so computing a
  branch whose result is not selected has no effect beyond its cost."""
  index = plan.slots[instr.ins[0]]
  if index[0] not in (1, 4) or elements(index[1]) != 1:
    raise Unsupported("case index")
  count = instr.attrs.get("branches")
  if not isinstance(count, int) or count < 1 or count > 8:
    raise Unsupported("case branches")
  for b in range(count):
    branch = instr.attrs.get(f"branch_{b}")
    if (
      not isinstance(branch, Plan)
      or len(branch.params) != len(instr.ins) - 1
      or len(branch.results) != len(instr.outs)
      or len(branch.instrs) > MAX_INSTRS
    ):
      raise Unsupported("case branch shape")
    _check_region(branch, "a case branch")
    for j, r in enumerate(branch.results):
      if tuple(branch.slots[r]) != tuple(plan.slots[instr.outs[j]]):
        raise Unsupported("case branch result types")


def _check_region(region: Plan, where: str) -> None:
  """The slots and instructions of a case branch or nested loop's cond/body (`where`, for
  the message): nested control flow recursively, dots the emitter computes inline, no
  other kernel run."""
  for slot in region.slots:
    _check_slot(slot)
  for inner in region.instrs:
    if inner.op in ("case", "while", "jit_loop"):
      _check_instr(region, inner, True)
    elif not native_dot(region, inner):
      if runs_kernel(inner):
        raise Unsupported(f"{inner.op} in {where}")
      _check_instr(region, inner, True)


def _check_nested(plan: Plan, instr: Instr) -> None:
  """A while loop (or one already compiled alone: jit_loop) inside a loop the emitter
  compiles along with it (llvm_ir._nested_loop): small values only, no kernel runs (call
  sites index the outer cond and body), cond returning pred[]."""
  cond, body = instr.attrs.get("cond"), instr.attrs.get("body")
  n = len(instr.outs)
  if (
    not isinstance(cond, Plan)
    or not isinstance(body, Plan)
    or len(cond.params) != len(instr.ins)
    or len(body.params) != len(instr.ins)
    or len(body.results) != n
    or len(cond.results) != 1
    or n > len(instr.ins)
  ):
    raise Unsupported("nested loop shape")
  for slot in list(instr.ins) + list(instr.outs):
    _check_slot(plan.slots[slot])
  for region in (cond, body):
    if len(region.instrs) > MAX_INSTRS:
      raise Unsupported(f"{len(region.instrs)} instructions in a nested loop")
    _check_region(region, "a nested loop")
  if tuple(cond.slots[cond.results[0]]) != (1, ()):
    raise Unsupported("nested cond does not return pred[]")
  for i in range(n):
    if (
      tuple(body.slots[body.results[i]]) != tuple(plan.slots[instr.outs[i]])
      or tuple(body.slots[body.params[i]]) != tuple(plan.slots[instr.outs[i]])
      or tuple(cond.slots[cond.params[i]]) != tuple(plan.slots[instr.outs[i]])
    ):
      raise Unsupported("nested loop-carried types differ")


def _check_instr(plan: Plan, instr: Instr, called: bool) -> None:
  if instr.op == "case" and called:
    _check_case(plan, instr)
    return
  if instr.op in ("while", "jit_loop") and called:
    _check_nested(plan, instr)
    return
  if called and runs_kernel(instr):
    if any(isinstance(v, Plan) for v in instr.attrs.values()):
      raise Unsupported(f"{instr.op} with a region")
    return
  if instr.op in CALLED and called:
    if (
      instr.attrs
      or len(instr.outs) != 1
      or len(instr.ins) != (1 if instr.op in CALLED_UNARY else 2)
      or len({plan.slots[s][0] for s in instr.ins}) != 1
      or any(
        elements(plan.slots[s][1]) != elements(plan.slots[instr.outs[0]][1]) for s in instr.ins
      )
    ):
      raise Unsupported(f"{instr.op} operands")
    return
  if instr.op not in OPS:
    raise Unsupported(f"op {instr.op}")
  if len(instr.outs) != 1:
    raise Unsupported(f"{instr.op} with {len(instr.outs)} results")
  out_code, out_dims = plan.slots[instr.outs[0]]
  in_types = [plan.slots[s] for s in instr.ins]
  if instr.op == "compare":
    if instr.attrs.get("compare_type") == "TOTALORDER":
      raise Unsupported("TOTALORDER compare")
  elif instr.op == "divide":
    pass
  elif instr.op in ELEMENTWISE_BINARY | {"negate", "abs", "sqrt", "not"}:
    if any(t[0] != out_code for t in in_types):
      raise Unsupported(f"{instr.op} with mixed dtypes")
    if instr.op == "sqrt" and kind(out_code) != "f":
      raise Unsupported("integer sqrt")
    if instr.op in ("and", "or", "xor", "not") and kind(out_code) == "f":
      raise Unsupported(f"float {instr.op}")
  elif instr.op == "clamp":
    if any(elements(t[1]) not in (1, elements(out_dims)) for t in in_types):
      raise Unsupported("clamp bounds shape")
  if instr.op in ELEMENTWISE_BINARY | {"compare"} and any(
    elements(t[1]) != elements(out_dims) for t in in_types
  ):
    raise Unsupported(f"{instr.op} operands of another size")
  if instr.op == "select":
    if elements(in_types[0][1]) not in (1, elements(out_dims)):
      raise Unsupported("select pred shape")


def block_op(plan: Plan, instr: Instr, called: bool) -> bool:
  """Whether `instr` of `plan` may join a straight-line block (jit_block): an op the
  emitter computes in registers (OPS, a native dot) or, when `called`, a CALLED kernel
  call, on values of at most MAX_ELEMENTS elements of the DTYPES; no kernel runs (a
  block has no call-site table) and no regions."""
  if instr.op in ("case", "while", "jit_loop") or any(
    isinstance(v, Plan) for v in instr.attrs.values()
  ):
    return False
  if not (instr.op in OPS or (called and instr.op in CALLED) or native_dot(plan, instr)):
    return False
  try:
    for slot in list(instr.ins) + list(instr.outs):
      _check_slot(plan.slots[slot])
    if not native_dot(plan, instr):
      _check_instr(plan, instr, called)
  except Unsupported:
    return False
  return True


def check_block(block: Plan, called: bool) -> None:
  """Raises Unsupported unless every instruction of straight-line `block` is a block_op."""
  for instr in block.instrs:
    if not block_op(block, instr, called):
      raise Unsupported(f"{instr.op} in a block")


def source_indices(plan: Plan, instr: Instr) -> np.ndarray:
  """For a data-movement op: the operand's flat index of each result element."""
  in_dims = tuple(plan.slots[instr.ins[0]][1])
  out_dims = tuple(plan.slots[instr.outs[0]][1])
  index = np.arange(elements(in_dims), dtype=np.int64).reshape(in_dims)
  op, a = instr.op, instr.attrs
  if op == "broadcast_in_dim":
    shape = [1] * len(out_dims)
    for i, d in enumerate(a["dims"]):
      shape[d] = in_dims[i]
    result = np.broadcast_to(index.reshape(shape), out_dims)
  elif op == "transpose":
    result = np.transpose(index, a["perm"])
  elif op == "slice":
    result = index[tuple(slice(s, l, st) for s, l, st in zip(a["start"], a["limit"], a["stride"]))]
  elif op == "reverse":
    result = np.flip(index, tuple(a["dims"])) if a["dims"] else index
  else:
    raise AssertionError(op)
  result = np.ascontiguousarray(result).reshape(-1)
  if result.size != elements(out_dims):
    raise Unsupported(f"{op}: shape mismatch")
  return result


def constant_values(plan: Plan, instr: Instr) -> np.ndarray:
  code, dims = plan.slots[instr.outs[0]]
  data = np.frombuffer(instr.attrs["data"], dtype=NUMPY[code])
  if data.size != elements(dims):
    raise Unsupported("constant size")
  return data


def static_work(plan: Plan, instr: Instr) -> int:
  """Element operations of the whole loop if its trip count is static (trip_count),
  else -1."""
  cond, body = instr.attrs["cond"], instr.attrs["body"]
  if any(
    isinstance(v, Plan) and i.op not in FUSIONS
    for region in (cond, body)
    for i in region.instrs
    for v in i.attrs.values()
  ):
    return -1  # nested loops and conditionals: the work per step is not counted here
  trips = trip_count(plan, instr)
  if trips < 0:
    return -1
  per_step = sum(
    _step_work(region, i) for region in (cond, body) for i in region.instrs if i.op != "constant"
  )
  return trips * max(1, per_step)


def trip_count(plan: Plan, instr: Instr) -> int:
  """How many times while `instr` of `plan` runs its body, if static, else -1.

  The static form is fori_loop's (and lax.scan's) with constant bounds: a carried integer
  k starting at a constant a, cond `k < C`, body `k + 1` (constants made in the region or
  captured from the enclosing plan); then the loop runs max(0, C - a) times.
  """
  cond, body = instr.attrs.get("cond"), instr.attrs.get("body")
  if not isinstance(cond, Plan) or not isinstance(body, Plan):
    return -1
  producers = {i.outs[0]: i for i in plan.instrs if len(i.outs) == 1}
  cond_producers = {i.outs[0]: i for i in cond.instrs if len(i.outs) == 1}
  body_producers = {i.outs[0]: i for i in body.instrs if len(i.outs) == 1}

  def constant(table, region, slot):
    """The integer scalar constant in `slot` of `region` (cond, body, or the enclosing
    plan), looking through captures: JAX hoists a fori_loop's bounds out of the loop."""
    if region is not plan and slot in region.params[len(instr.outs) :]:
      return constant(producers, plan, instr.ins[region.params.index(slot)])
    made = table.get(slot)
    if (
      made is None
      or made.op != "constant"
      or region.slots[slot][0] not in (4, 5)
      or elements(region.slots[slot][1]) != 1
    ):
      return None
    return int(constant_values(region, made)[0])

  test = cond_producers.get(cond.results[0])
  if test is None or test.op != "compare" or test.attrs.get("direction") != "LT":
    return -1
  k = cond.params.index(test.ins[0]) if test.ins[0] in cond.params else -1
  limit = constant(cond_producers, cond, test.ins[1])
  if not 0 <= k < len(instr.outs) or limit is None:
    return -1
  start = constant(producers, plan, instr.ins[k])
  step = body_producers.get(body.results[k])
  if start is None or step is None or step.op != "add":
    return -1
  ins = list(step.ins)
  if body.params[k] not in ins:
    return -1
  ins.remove(body.params[k])
  if constant(body_producers, body, ins[0]) != 1:
    return -1
  return max(0, limit - start)


def _step_work(region: Plan, instr: Instr) -> int:
  """Element operations of one instruction of a loop step: its result's elements, or the
  window's for an update the generated code makes in place (a scan's row, x.at[i].set)."""
  if native_window(region, instr) and instr.op == "dynamic_update_slice":
    return elements(region.slots[instr.ins[1]][1])
  if native_scatter(region, instr) or (native_walk(region, instr) and instr.op == "scatter"):
    return elements(region.slots[instr.ins[2]][1])
  return elements(region.slots[instr.outs[0]][1])


# Values in memory (codegen.compile_memory_loops, the second pass, after fusion).
#
# A loop the register tier refused because values of more than MAX_ELEMENTS elements are
# computed in it (a decode step's KV cache and attention, an RNN's hidden state of a
# batch, a sampler's particles) is compiled again once the body's elementwise chains are
# fusions: every instruction that reads or writes such a value runs through its own
# kernel (WorkshopJitRun, as the interpreter would call it), each value in a buffer the
# compiler placed, and the small values between them stay in registers. What the
# interpreter paid per instruction (slot allocation, Storage reference counts, the plan
# walk) goes; the kernels' own work is the same, so the bits are the interpreter's.

# Ops whose kernels a generated loop may call on values in memory: plain kernels (no
# `manages_outputs`, no `aliases_operand`: kernels/core/kernel.h), fusions included
# (their region is the kernel's own business). `reshape` aliases its operand: the
# result is the same buffer.
MEMORY_RUN = (
  RUN
  | OPS
  | CALLED
  | {"fusion", "jit_fusion", "reduce_window", "convolution", "cholesky", "triangular_solve"}
) - {"constant", "reshape"}
# Kernels whose result is their operand's bytes (kernel.h `aliases_operand`): on a value
# in memory, the same buffer.
ALIASES = {"reshape", "bitcast_convert"}
# Fusions: kernels whose region is their own business (a small one is still a call).
FUSIONS = {"fusion", "jit_fusion"}
# Every scratch buffer starts at a multiple of this (a cache line; the kernels' vector
# loads need no more).
SCRATCH_ALIGN = 64


@dataclasses.dataclass
class Memory:
  """Where a loop's values too big for registers live (memory_plan).

  Attributes:
    resident: indices of the loop operands kept in memory.
    homes: (region: 0 cond, 1 body; slot) -> the buffer of every big value: ("p", i) the
      buffer of loop operand i (a carried one: its current buffer), ("t", offset) a
      scratch buffer, ("o", i) the other buffer of carried value i (below).
    runs: (region, instruction index) of the instructions run through their kernel.
    update_at: (body instruction index, result slot) -> carried index, for native
      in-place updates (a scan's row store) of a carried value's current buffer.
    other: carried index -> scratch offset of its second buffer. A carried value whose
      next value is not made in place in its current buffer alternates between its
      result buffer and this one: the body writes the next value into the buffer the
      current one is not in, whose value (the step before's) nobody reads any more.
    copies: carried indices whose next value is in a buffer the step does not own (a
      loop operand's, as `prev = v` of a convergence test): copied into the other buffer
      at the end of the step.
    scratch: bytes of scratch the loop needs (JitLoop allocates them once per run).
  """

  resident: set[int]
  homes: dict[tuple[int, int], tuple[str, int]]
  runs: set[tuple[int, int]]
  update_at: dict[tuple[int, int], int]
  other: dict[int, int]
  copies: set[int]
  scratch: int


def byte_size(code: int, dims) -> int:
  """Bytes of a value of PJRT_Buffer_Type `code` and shape `dims` in a buffer."""
  dtype = dtypes.by_code(code)
  if dtype is None:
    raise Unsupported(f"element type code {code}")
  return elements(dims) * dtype.numpy.itemsize


def _aligned(n: int) -> int:
  return -(-n // SCRATCH_ALIGN) * SCRATCH_ALIGN


def memory_plan(plan: Plan, instr: Instr) -> Memory:
  """The buffers of while `instr`'s values of more than MAX_ELEMENTS elements, or
  Unsupported. Such a value is read and written only by kernel runs (MEMORY_RUN, an
  interpreted case), by reshapes (the same buffer) and, for a loop operand, by the
  native windows, scatters and walks of the register tier (reads; in-place updates of a
  carried value). A kernel run's result takes, in place, the buffer of operand 0 when it
  dies there and the kernel updates in place (IN_PLACE) and the buffer is the loop's
  (scratch, or a carried value's in the body; never a capture: that is the caller's);
  otherwise scratch, reused once every value in it is dead. Every step's values die
  within the step except the carried ones."""
  cond, body = _regions(instr)
  n = len(instr.outs)
  resident = {i for i, s in enumerate(instr.ins) if elements(plan.slots[s][1]) > MAX_ELEMENTS}
  homes: dict[tuple[int, int], tuple[str, int]] = {}
  runs: set[tuple[int, int]] = set()
  update_at: dict[tuple[int, int], int] = {}
  other: dict[int, int] = {}
  copies: set[int] = set()
  top = 0
  for r, region in ((0, cond), (1, body)):
    top = _place_region(region, r, n, resident, homes, runs, update_at, top)
  for i in sorted(resident):
    if cond.params[i] in cond.results:
      raise Unsupported("cond returns a resident value")
    if i >= n:
      continue
    where = homes.get((1, body.results[i]))
    if where != ("p", i):  # not made in place: it needs its other buffer
      if where != ("o", i):
        copies.add(i)
      other[i] = top
      top += _aligned(byte_size(*plan.slots[instr.outs[i]]))
  for i, r in enumerate(body.results[:n]):
    if i not in resident and (1, r) in homes:
      raise Unsupported("a small carried value made in memory")
  return Memory(resident, homes, runs, update_at, other, copies, top)


def _place_region(region, r, n, resident, homes, runs, update_at, top) -> int:
  """memory_plan for one region (r: 0 cond, 1 body); returns the scratch offset after
  its buffers."""
  big = lambda s: elements(region.slots[s][1]) > MAX_ELEMENTS  # noqa: E731
  never = len(region.instrs)
  last: dict[int, int] = {}
  for k, inner in enumerate(region.instrs):
    for s in inner.ins:
      last[s] = k
  for s in region.results:
    last[s] = never
  holders: dict[tuple[str, int], list[int]] = {}

  def home(slot, where):
    homes[(r, slot)] = where
    holders.setdefault(where, []).append(slot)

  def dead_after(where, k):
    return all(last.get(s, -1) <= k for s in holders.get(where, []))

  def owned(where):
    return where[0] == "t" or (r == 1 and where[0] == "p" and where[1] < n)

  for i in resident:
    home(region.params[i], ("p", i))
  # The carried value each body result is (a value made for it goes to its other buffer).
  carried_of = {s: i for i, s in enumerate(region.results[:n]) if r == 1 and i in resident}
  free: dict[int, list[int]] = {}  # bytes -> scratch offsets free again
  for k, inner in enumerate(region.instrs):
    touched = [s for s in list(inner.ins) + list(inner.outs) if big(s)]
    for s in inner.ins:
      if big(s) and (r, s) not in homes:
        raise Unsupported(f"{inner.op} reads a value in memory made outside a kernel run")
    called_loop = False
    if inner.op in ("while", "jit_loop") and not touched:
      try:
        _check_nested(region, inner)
      except Unsupported:
        called_loop = True  # not computable inline: called as the interpreter runs it
    if not touched and not called_loop:
      if inner.op in FUSIONS:
        runs.add((r, k))  # a small fusion: its kernel on stack buffers
      continue
    if inner.op in ALIASES and len(inner.outs) == 1 and len(inner.ins) == 1:
      out = inner.outs[0]
      if big(out) != big(inner.ins[0]) or byte_size(*region.slots[out]) != byte_size(
        *region.slots[inner.ins[0]]
      ):
        raise Unsupported(f"{inner.op} between memory and registers")
      home(out, homes[(r, inner.ins[0])])
      continue
    outs_big = [s for s in inner.outs if big(s)]
    native_update = (
      r == 1
      and (
        native_window(region, inner) or native_scatter(region, inner) or native_walk(region, inner)
      )
      and inner.op in IN_PLACE
      and big(inner.ins[0])
      and homes[(r, inner.ins[0])][0] == "p"
      and homes[(r, inner.ins[0])][1] < n
      and dead_after(homes[(r, inner.ins[0])], k)
      and not any(big(s) for s in inner.ins[1:])
    )
    native_read = (
      inner.op in ("dynamic_slice", "gather")
      and not outs_big
      and (native_window(region, inner) or native_walk(region, inner))
    )
    if native_update:
      i = homes[(r, inner.ins[0])][1]
      home(inner.outs[0], ("p", i))
      update_at[(k, inner.outs[0])] = i
      continue
    if native_read:
      continue
    # A nested loop or a conditional on values in memory is called as the interpreter
    # would run it (kernels/codegen/jit_loop.cc RunManaged), on views of the buffers.
    managed = inner.op in ("while", "jit_loop") or interpreted_case(region, inner)
    if not (inner.op in MEMORY_RUN or managed):
      raise Unsupported(f"{inner.op} on a value in memory")
    if not (inner.op in FUSIONS or managed) and any(
      isinstance(v, Plan) for v in inner.attrs.values()
    ):
      raise Unsupported(f"{inner.op} with a region on a value in memory")
    runs.add((r, k))
    taken: set[tuple[str, int]] = set()
    for j, out in enumerate(inner.outs):
      if not big(out):
        continue
      if managed:
        candidates = []
      elif inner.op in IN_PLACE:
        # Operand 0's buffer, unless another operand is in it too (a reshape or bitcast
        # of it: kernel.h, "other operands never alias output 0").
        others = {homes.get((r, s)) for s in inner.ins[1:]} | set(inner.ins[1:])
        alone = inner.ins[0] not in others and homes.get((r, inner.ins[0])) not in others
        candidates = [0] if j == 0 and alone else []
      else:
        # Not a fusion's operand either, though the kernel allows it: a row fusion
        # written over its operand runs interpreted and through temporaries (fusion.cc
        # ResultsOverOperands; sinkhorn's loop took 26 ms instead of 19).
        candidates = []
      where = None
      for p in candidates:
        s = inner.ins[p]
        if not big(s) or tuple(region.slots[s]) != tuple(region.slots[out]):
          continue
        w = homes[(r, s)]
        if owned(w) and w not in taken and dead_after(w, k):
          if out in carried_of and w[0] == "t":
            continue  # it would have to be copied into the carried value's buffer
          where = w
          break
      if out in carried_of and where != ("p", carried_of[out]):
        where = ("o", carried_of[out])
      if where is None:
        size = _aligned(byte_size(*region.slots[out]))
        if free.get(size):
          where = ("t", free[size].pop())
        else:
          where = ("t", top)
          top += size
      taken.add(where)
      home(out, where)
    # Scratch buffers whose every value died here are free for the next instructions.
    for s in set(inner.ins) | set(inner.outs):
      w = homes.get((r, s))
      if w and w[0] == "t" and w not in taken and dead_after(w, k):
        if w[1] not in free.get(_aligned(byte_size(*region.slots[s])), []):
          free.setdefault(_aligned(byte_size(*region.slots[s])), []).append(w[1])
  return top


def check_memory_loop(plan: Plan, instr: Instr) -> tuple[Plan, Plan, Memory]:
  """(cond, body, memory_plan) of a while the tier compiles with values in memory, else
  Unsupported: check_loop's rules for everything memory_plan leaves in registers."""
  memory = memory_plan(plan, instr)
  cond, body = instr.attrs["cond"], instr.attrs["body"]
  n = len(instr.outs)
  if len(body.results) != n or len(cond.results) != 1:
    raise Unsupported("unexpected region results")
  for i, slot in enumerate(list(instr.ins) + list(instr.outs)):
    if i in memory.resident or (i >= len(instr.ins) and i - len(instr.ins) in memory.resident):
      byte_size(*plan.slots[slot])
    else:
      _check_slot(plan.slots[slot])
  for r, region in ((0, cond), (1, body)):
    if len(region.instrs) > MAX_INSTRS:
      raise Unsupported(f"{len(region.instrs)} instructions")
    used = {s for inner in region.instrs for s in list(inner.ins) + list(inner.outs)}
    used |= set(region.params) | set(region.results)
    for slot in used:
      if (r, slot) in memory.homes:
        byte_size(*region.slots[slot])
      else:
        _check_slot(region.slots[slot])
    for k, inner in enumerate(region.instrs):
      if (r, k) in memory.runs or (r == 1 and any((k, s) in memory.update_at for s in inner.outs)):
        continue
      if inner.op in ALIASES and (r, inner.outs[0]) in memory.homes:
        continue
      if inner.op == "bitcast_convert":  # in registers: LLVM's bitcast (llvm_ir._region)
        a, b = region.slots[inner.ins[0]], region.slots[inner.outs[0]]
        if kind(a[0]) == "b" or kind(b[0]) == "b" or DTYPES[a[0]][1] != DTYPES[b[0]][1]:
          raise Unsupported("bitcast_convert between element sizes")
        if elements(a[1]) != elements(b[1]):
          raise Unsupported("bitcast_convert shape")
        continue
      if interpreted_case(region, inner):
        continue
      _check_instr(region, inner, True)
  _check_carried(plan, instr, cond, body)
  return cond, body, memory
