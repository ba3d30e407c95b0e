"""A fused elementwise region (compiler/fusion.py's `fusion`) as one native loop.

The interpreter runs a fusion block by block, one kernel call and one pass over L1 per op
(kernels/fusion.cc). Here the whole body becomes one LLVM function

    void @<symbol>(ptr %args, i64 %begin, i64 %end)

args[i] pointing at operand i, then args[len(ins) + j] at result j. It computes items
[begin, end), which kernels/fusion.cc (`jit_fusion`) spreads over the thread pool:

* flat (every operand full size or a scalar): items are elements; a loop over vectors of
  32 bytes (8 f32 lanes), then the last few elements as one vector under a lane mask
  (llvm.masked.load/store: lanes past the end are neither read nor written).
* rows (a row fusion, or broadcasts of rows/columns): items are rows of C elements (C
  static); an operand is full size (element r * C + c), per row (element r), a column
  (element c: gamma, beta; or (r % P) * C + c, a tile of P rows: an attention mask [S, S]
  under [B, H, S, S]) or a scalar. A row is computed in phases: each reduction of
  the trailing dims (softmax's max and sum, layer norm's mean and variance) ends one, its
  result is a per-row scalar for the later phases, and a full-size value computed in one
  phase and read in a later one is kept in a stack buffer of one row (or read back from
  the result it is). Reductions fold in the reduce kernel's own order (kernels/reduce/reduce.cc
  Fold: four accumulators of 32 bytes, combined, then one, its lanes as a tree, then the
  rest in order; then `init op fold`), so their bits are the interpreter's. A row's last
  C % 8 columns are one masked vector too; its lanes fold into the sum one by one.

Every value lives in registers (`<W x T>`); ops are the loop tier's (llvm_ir.py: plain
IEEE instructions, no fast-math, the interpreter's max/min/divide/convert formulas).
exp, tanh and logistic of f32 are inlined: the interpreter's own algorithms
(kernels/math/exp_f32.cc, tanh_f32.cc) with the same float32 operations in the same order and
no FMA contraction, i.e. the bounds their fits proved without FMA (exp 1.009 ulp,
logistic 2.48, tanh 1.91; tools/fit_exp.py, fit_tanh.py); where the interpreter's wide
clone contracts to FMA the two differ in the last bits, within those bounds. rsqrt is
1 / sqrt(x), as the interpreter computes it. jax.nn.gelu's composite (`gelu_tanh`) is its
kernel's expression. Anything else raises `loops.Unsupported` and the fusion stays
interpreted.

One module, over 800 lines, on purpose: the flat and row layouts, the inlined math and the
reduction order are one emitter whose parts must agree bit for bit with the interpreter's;
they are read together.
"""

from __future__ import annotations

import math

import numpy as np

from ..fusion import READS_WHOLE, fusion_elements
from ..plan import Instr, Plan
from . import llvm_ir
from .llvm_ir import convert_value, intrinsic_suffix, min_max, scalar_type, llvm_type
from .loops import NUMPY, STORAGE as DTYPES, Unsupported, dtype_name, elements, kind

# Below this many elements a fusion stays interpreted: compiling a distinct body costs
# about 10 ms (cold cache), and on 16K elements it saves a few microseconds per call (a
# tanh of 64x256: ~3 of ~8 us), so a 48-layer MLP gradient at batch 64 (95 such fusions,
# 4 distinct) would compile 40-85 ms longer for a gain that takes thousands of calls to
# repay. From 64K elements on, the interpreter also spreads a fusion over the pool, and
# the gain is tens of us per call.
MIN_ELEMENTS = 65536
# In a loop body (elements times the trip count): an interpreted fusion also pays a fixed
# cost per run (its schedule, blocks, one kernel per op) that the loop repeats, so a
# smaller one repays its compile there (searchsorted of 4096 probes, 13 steps of 4096
# elements: 250 -> 80 us per call on the 2-core VM, XLA:CPU 99-127).
MIN_LOOP_ELEMENTS = 16384


def least_elements(repeat: int) -> int:
  """Fewest elements (times `repeat`, the runs per call) of a fusion compiled."""
  return MIN_ELEMENTS if repeat <= 1 else MIN_LOOP_ELEMENTS


# And below this many element operations (Region.work() per element, transcendentals
# weighted, times the elements): compiled, a 48-layer MLP gradient at batch 256 (95
# fusions of 64K elements, 4 distinct bodies of 1-1.4M operations) compiled 1.3x slower
# than on the CPU backend, for a few microseconds per call. The bench's softmax, layer
# norm and elementwise chains from 256x1024 / 2^18 elements on are above it.
MIN_WORK = 1 << 21
# A body of at least this many steps is compiled whatever its size (at the top level, in
# a branch or in a loop body): the interpreter runs it step by step, about 0.1 us a step
# and block of 1024 elements, and a threefry hash (every jax.random call: ~125 steps) took
# 30 us for `split(key)` and 255 us for `uniform` of 128x128, against 9 and 108 compiled
# (2-core VM; XLA:CPU 7 and 170). Compiling one adds about 17 ms cold, a few ms of IR
# emission with the object cache warm (20 `normal`s of distinct shapes: 1.3-1.4 s
# interpreted, 1.5-1.7 s warm, 1.9-2.1 s cold; XLA:CPU 6.1-6.8 s, all under load).
LONG_BODY = 64


def long_body(body: Plan) -> bool:
  """Whether a fusion body has LONG_BODY steps: instructions other than broadcasts,
  reshapes, copies and slices (which the interpreter folds into its readers' operand
  views or block copies)."""
  return sum(1 for i in body.instrs if i.op not in _VIEWS and i.op != "slice") >= LONG_BODY


# Stack bytes for the one-row buffers of values that cross phases.
MAX_ROW_BUFFERS = 256 * 1024
# Longest body compiled: jax.random.normal's threefry hash and erf_inv over an array is
# one fusion of about 215 instructions (a Langevin step's noise).
MAX_INSTRS = 400

BINARY = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "and", "or", "xor"}
BINARY |= llvm_ir.SHIFTS
UNARY = {"negate", "abs", "sqrt", "not", "convert", "rsqrt", "copy"}
F32_ONLY = {"exponential", "tanh", "logistic", "gelu_tanh"}
# (op, dtype code) -> the glibc libmvec function the interpreter maps it with
# (kernels/math/vector_math.cc: the "d" AVX2 entry points where the host has AVX2 and FMA, else
# the "b" SSE ones); generated code calls the same entry point on the same lanes, so each
# element has the interpreter's bits (within 4 ulp of the correctly rounded result, glibc's
# manual). f64 exponential is libmvec's too (f32's is inlined, below). Sine passes
# subnormals through after the call, as the interpreter does (KEEPS_SUBNORMALS); f64
# tanh is left out. f32 log, sine and cosine are the plugin's own (vector_math.cc:
# libmvec's f32 ones are less accurate than XLA:CPU's), exported under the same ABI as
# workshop_logf, workshop_sinf and workshop_cosf.
LIBMVEC = {
  ("log", 11): "workshop_logf",
  ("log", 12): "log",
  ("log_plus_one", 11): "log1pf",
  ("log_plus_one", 12): "log1p",
  ("exponential_minus_one", 11): "expm1f",
  ("exponential_minus_one", 12): "expm1",
  ("cosine", 11): "workshop_cosf",
  ("cosine", 12): "cos",
  ("sine", 11): "workshop_sinf",
  ("sine", 12): "sin",
  ("exponential", 12): "exp",
}
# kernels/elementwise/elementwise.cc kKeepsSubnormals: sin(x) = x for subnormal x (as on
# XLA:CPU), which the vector functions under DAZ would flush.
KEEPS_SUBNORMALS = {"sine"}
EXP_ZERO_D = -746.0  # kernels/math/vector_math.cc kExpZeroD
# What may touch f16/bf16 values (kernels/math/half.h: the compiler computes on them in f32,
# between converts): converts, selects and data movement (broadcasts, reshapes: see
# Region._classify), on their i16 bits.
ON_HALVES = {"convert", "select", "copy"}
REDUCERS = {"add", "multiply", "maximum", "minimum", "and", "or"}
# Rounding ops as LLVM's intrinsics, which round exactly as libm's floor, ceil, round and
# nearbyint (in the default rounding mode) do: one instruction (roundps) per vector where
# the interpreter calls libm per element (jnp.round of 1M floats in a fusion: 6x XLA:CPU's
# time). The operand's subnormals are flushed first, as elementwise.cc FlushSubnormal does.
ROUNDING = {
  "floor": "floor",
  "ceil": "ceil",
  "round_nearest_afz": "round",
  "round_nearest_even": "roundeven",
}


_VIEWS = ("broadcast_in_dim", "reshape", "copy")


class Region:
  """What the body is: item mode, classes of slots, phases (see the module docstring)."""

  def __init__(self, body: Plan, row_attr: int) -> None:
    self.body = body
    slots = body.slots
    if any(i.op in READS_WHOLE - {"slice"} for i in body.instrs):
      raise Unsupported("a concatenate (codegen.compile_fusions writes it out first)")
    self.n = fusion_elements(body)
    for code, _ in slots:
      if code not in DTYPES:
        raise Unsupported(f"element type {dtype_name(code)}")
    if len(body.instrs) > MAX_INSTRS:
      raise Unsupported(f"{len(body.instrs)} instructions")
    self.producer = {i.outs[0]: i for i in body.instrs if len(i.outs) == 1}
    if len(self.producer) != len(body.instrs):
      raise Unsupported("an instruction with several results")
    broadcasts = [
      i
      for i in body.instrs
      if i.op == "broadcast_in_dim"
      and elements(slots[i.outs[0]][1]) == self.n
      and 1 < elements(slots[i.ins[0]][1])
    ]
    # Slices of larger operands: read in place, one contiguous run of the operand per
    # row (so the fusion takes rows, of a length that divides the slice's last dim).
    self.slices = {i.outs[0]: i for i in body.instrs if i.op == "slice"}
    for i in self.slices.values():
      if i.attrs["stride"][-1] != 1 or i.outs[0] in body.results:
        raise Unsupported("a slice strided along its last dim, or a result")
    if row_attr > 1:
      self.row = row_attr
      if any(slots[o][1][-1] % self.row for o in self.slices):
        raise Unsupported("a slice whose rows are not the fusion's")
    elif not broadcasts and not self.slices:
      self.row = 0  # flat
    else:
      self.row = self._choose_row(broadcasts)
    self.cls: dict[int, str] = {}
    self.period: dict[int, int] = {}  # "col" operands: rows in their tile (1: a column)
    # Values read in place from an operand at a start computed once per row: slices and
    # broadcasts whose rows are runs of their operand (_pattern's "run").
    self.views: dict[int, Instr] = dict(self.slices)
    self._classify()
    self._levels()

  @property
  def flat(self) -> bool:
    return self.row == 0

  @property
  def rows(self) -> int:
    return self.n if self.flat else self.n // self.row

  def _choose_row(self, broadcasts) -> int:
    """The row length C (a product of trailing dims) under which every non-scalar
    broadcast reads per row or per column and every slice a run of its operand; the
    longest such."""
    slots = self.body.slots
    dims = slots[(broadcasts + list(self.slices.values()))[0].outs[0]][1]
    for k in range(1, len(dims) + 1):
      c = math.prod(dims[k - 1 :]) if not broadcasts else math.prod(dims[k:])
      if (
        c >= 2
        and self.n // c >= 1
        and all(self._readable(b, c) for b in broadcasts)
        and all(slots[o][1][-1] % c == 0 for o in self.slices)
      ):
        if c == self.n and not broadcasts and c > 4096:
          # One row would be one item for one thread: a shorter row that divides it (a
          # contiguous slice reads a contiguous run of its operand whatever the row).
          c = next((d for d in range(4096, 255, -1) if self.n % d == 0), 0)
          if not c:
            raise Unsupported("a slice of a long row that no row length divides")
        return c
    raise Unsupported("a broadcast that reads neither rows nor columns, or a slice")

  def _readable(self, instr: Instr, c: int) -> bool:
    """Whether broadcast `instr` reads per row, per column or (of an operand, which
    _classify requires) as a run of its operand with rows of c elements."""
    pattern = self._pattern(instr, c)[0]
    return pattern in ("row", "col") or (pattern == "run" and instr.ins[0] in self.body.params)

  def _pattern(self, instr: Instr, c: int) -> tuple[str | None, int]:
    """How broadcast `instr` (to N elements) reads its operand with rows of c elements:
    ("row", 1) (element i // c), ("col", P) (element (i // c % P) * c + i % c: a column,
    or with P > 1 a tile of P rows repeated along the leading dims, as an attention mask
    [S, S] broadcast to [B, H, S, S]) or (None, 0)."""
    slots = self.body.slots
    in_dims = slots[instr.ins[0]][1]
    out_dims = slots[instr.outs[0]][1]
    k, tail = len(out_dims), 1
    while k > 0 and tail * out_dims[k - 1] <= c:
      if tail == c:
        break
      tail *= out_dims[k - 1]
      k -= 1
    if tail != c:
      return None, 0
    mapped = [d for size, d in zip(in_dims, instr.attrs["dims"]) if size != 1]
    leading = [d for d in range(k) if out_dims[d] != 1]
    trailing = [d for d in range(k, len(out_dims)) if out_dims[d] != 1]
    if mapped == leading:
      return "row", 1
    for j in range(len(leading) + 1):
      if mapped == leading[j:] + trailing:
        return "col", math.prod(out_dims[d] for d in leading[j:])
    if trailing and mapped == sorted(mapped) and mapped[len(mapped) - len(trailing) :] == trailing:
      # Each row is one contiguous run of the operand (its last non-1 dims are the
      # row's), at a start that depends on the row: x[:, None, :] - c[None] in a
      # pairwise distance reads row i // 64 of x for row i.
      return "run", 0
    return None, 0

  def _classify(self) -> None:
    body, slots, cls = self.body, self.body.slots, self.cls
    r = self.rows
    for p in body.params:
      m = elements(slots[p][1])
      cls[p] = "full" if m == self.n else "scalar" if m == 1 else None
    for instr in body.instrs:
      out = instr.outs[0]
      m = elements(slots[out][1])
      if instr.op == "broadcast_in_dim" or (instr.op == "reshape" and m != self.n):
        src = instr.ins[0]
        # In a fusion of one row (r = 1) a one-element value the row computes (its sum) is
        # per row, not a scalar operand: it takes the row path below.
        if elements(slots[src][1]) == 1 and cls.get(src) != "row":
          cls[out] = (
            "scalar"
            if m == 1
            else "row"
            if (m == r and not self.flat and m != self.n)
            else "full"
            if m == self.n
            else None
          )
          if cls[out] is None:
            raise Unsupported("a scalar broadcast of another size")
          continue
        if self.flat:
          raise Unsupported("a broadcast in a flat fusion")
        period = 1
        if m == self.n:
          pattern, period = (
            self._pattern(instr, self.row) if instr.op == "broadcast_in_dim" else (None, 0)
          )
          if pattern == "col" and self.period.setdefault(src, period) != period:
            raise Unsupported("one operand broadcast as two tiles")
          if pattern == "run":
            if src not in body.params or cls.get(src) not in (None, "view") or out in body.results:
              raise Unsupported("a broadcast run of a value other than an operand")
            cls[src] = "view"
            cls[out] = "full"
            self.views[out] = instr
            continue
        elif m == r and elements(slots[src][1]) == r:
          pattern = "row" if instr.op == "reshape" or loops_keeps_order(slots, instr) else None
        else:
          pattern = None
        if pattern is None:
          raise Unsupported(f"{instr.op} pattern")
        self._set_class(src, pattern if src in body.params else cls.get(src))
        if cls.get(src) != pattern:
          raise Unsupported(f"{instr.op} of a {cls.get(src)} value as a {pattern}")
        cls[out] = "full" if m == self.n else "row"
        continue
      if instr.op == "slice":
        src = instr.ins[0]
        if src not in body.params or any(src in i.ins for i in body.instrs if i.op != "slice"):
          raise Unsupported("a slice of a value other than an operand read only by slices")
        cls[src] = "view"
        cls[out] = "full"
        continue
      if instr.op == "reduce":
        if (
          self.flat
          or len(instr.ins) != 2
          or instr.attrs.get("body") not in REDUCERS
          or elements(slots[instr.ins[1]][1]) != 1
          or m != r
          or list(instr.attrs["dims"])
          != list(
            range(
              len(slots[instr.ins[0]][1]) - len(instr.attrs["dims"]), len(slots[instr.ins[0]][1])
            )
          )
          or elements(slots[instr.ins[0]][1]) != self.n
        ):
          raise Unsupported("a reduce other than of the fusion's rows")
        if (
          kind(slots[out][0]) in ("b", "h")
          or len({slots[s][0] for s in instr.ins + instr.outs}) != 1
        ):
          raise Unsupported("reduce dtype")
        cls[out] = "row"
        continue
      self._check_op(instr)
      if m == self.n:
        cls[out] = "full"
      elif not self.flat and m == r:
        cls[out] = "row"
        for s in instr.ins:
          if s in body.params and cls.get(s) is None:
            cls[s] = "row"
      else:
        raise Unsupported(f"{instr.op} result of {m} elements")
      want = cls[out]
      for s in instr.ins:
        c = cls.get(s)
        if c not in (want, "scalar"):
          raise Unsupported(f"{instr.op} mixes {c} and {want} operands")
    for p in body.params:
      if cls.get(p) is None:
        raise Unsupported("an operand of unknown role")

  def _set_class(self, slot: int, pattern: str | None) -> None:
    if slot in self.body.params and self.cls.get(slot) is None:
      self.cls[slot] = pattern

  def _check_op(self, instr: Instr) -> None:
    slots = self.body.slots
    op = instr.op
    out_code = slots[instr.outs[0]][0]
    codes = [slots[s][0] for s in instr.ins]
    if any(kind(c) == "h" for c in codes + [out_code]):
      if op in ON_HALVES and (op != "select" or kind(codes[0]) == "b"):
        return
      raise Unsupported(f"{op} of f16/bf16")
    if (op, out_code) in LIBMVEC:
      if any(c != out_code for c in codes):
        raise Unsupported(f"{op} with mixed dtypes")
      return
    if op in F32_ONLY:
      if any(c != 11 for c in codes + [out_code]):
        raise Unsupported(f"{op} of a dtype other than f32")
      if op == "gelu_tanh" and (
        len(instr.ins) != 5 or any(elements(slots[s][1]) != 1 for s in instr.ins[1:])
      ):
        raise Unsupported("gelu_tanh operands")
      return
    if op == "compare":
      if instr.attrs.get("compare_type") == "TOTALORDER" and kind(codes[0]) != "f":
        raise Unsupported("TOTALORDER compare of integers")
      return
    if op in ("select", "clamp"):
      return
    if op == "is_finite":  # f32/f64 in (halves were refused above), pred out
      return
    if op == "sign":
      if kind(out_code) not in ("f", "s", "u") or codes != [out_code]:
        raise Unsupported(f"sign of {dtype_name(out_code)}")
      return
    if op in ROUNDING:
      if kind(out_code) != "f" or codes != [out_code]:
        raise Unsupported(f"{op} of {dtype_name(out_code)}")
      return
    if op == "remainder":  # integers only: float fmod stays the kernel's
      if kind(out_code) not in ("s", "u") or any(c != out_code for c in codes):
        raise Unsupported(f"remainder of {dtype_name(out_code)}")
      return
    if op in BINARY | UNARY:
      if op in ("sqrt", "rsqrt") and kind(out_code) != "f":
        raise Unsupported(f"integer {op}")
      if op in ("and", "or", "xor", "not") and kind(out_code) == "f":
        raise Unsupported(f"float {op}")
      if op in llvm_ir.SHIFTS and kind(out_code) not in ("s", "u"):
        raise Unsupported(f"{op} of {dtype_name(out_code)}")
      if op != "convert" and any(c != out_code for c in codes):
        raise Unsupported(f"{op} with mixed dtypes")
      if kind(out_code) == "b" and op in ("subtract", "divide", "negate"):
        raise Unsupported(f"pred {op}")
      return
    raise Unsupported(f"op {op}")

  def _levels(self) -> None:
    """level[slot]: the first phase in which the value exists; reduces end phases."""
    body = self.body
    level = {p: 0 for p in body.params}
    self.reduce_phase: dict[int, int] = {}  # reduce instr index -> phase it folds in
    for k, instr in enumerate(body.instrs):
      base = max((level[s] for s in instr.ins), default=0)
      if instr.op == "reduce":
        self.reduce_phase[k] = level[instr.ins[0]]
        level[instr.outs[0]] = base + 1
      else:
        level[instr.outs[0]] = base
    self.level = level
    self.phases = max(level.values()) + 1
    # Full-size values computed in one phase and read in a later one.
    self.crossing: set[int] = set()
    for k, instr in enumerate(body.instrs):
      at = self.reduce_phase.get(k, level[instr.outs[0]])
      for s in instr.ins:
        if self.cls[s] == "full" and s not in body.params and s not in self.views and level[s] < at:
          self.crossing.add(s)

  def work(self) -> int:
    """Operations per element, about (transcendentals count ten; a convert from or to a
    16-bit float four, and so does a slice: the interpreter's pass of its own, 2-3x an
    add's, where generated code converts in registers or reads in place; a bf16 `x + 1` of
    512x512 took 2.7x XLA:CPU's time interpreted)."""
    heavy = {
      "exponential": 12,
      "logistic": 14,
      "tanh": 14,
      "gelu_tanh": 20,
      **{op: 12 for op, _ in LIBMVEC},
    }
    slots = self.body.slots

    def cost(i: Instr) -> int:
      if i.op == "convert" and "h" in (kind(slots[i.ins[0]][0]), kind(slots[i.outs[0]][0])):
        return 4
      if i.op == "slice":
        # Generated code reads a slice in place; the interpreter writes each block of it
        # through a strided copy first (fusion.cc MakeSliceView), a pass of its own:
        # associative_scan's even/odd halves, 1.3-1.5x XLA:CPU's time interpreted.
        return 4
      return heavy.get(i.op, 1)

    return sum(cost(i) for i in self.body.instrs if i.op not in _VIEWS)


def loops_keeps_order(slots, instr: Instr) -> bool:
  """A broadcast between two per-row slots ([R] -> [R, 1]) that keeps row-major order."""
  mapped = [d for size, d in zip(slots[instr.ins[0]][1], instr.attrs["dims"]) if size != 1]
  return mapped == sorted(mapped)


# f32 constants of kernels/math/exp_f32.cc and tanh_f32.cc (tools/fit_exp.py, fit_tanh.py).
_F = lambda s: float(np.float32(s))  # noqa: E731
EXP = dict(
  c6=_F("0.00137803482"),
  c5=_F("0.00836891402"),
  c4=_F("0.0416690931"),
  c3=_F("0.166665182"),
  c2=_F("0.499999911"),
  log2e=_F("1.44269502"),
  ln2hi=_F("0.693145752"),
  ln2lo=_F("1.42860677e-06"),
  min=_F("-87.3365402"),
  max=_F("88.7228317"),
  shifter=float.fromhex("0x1.8p23"),
)
TANH = dict(
  d2=_F("-4.50547395e-06"),
  d1=_F("-0.0156174693"),
  d0=_F("-0.333333135"),
  q2=_F("0.0168519672"),
  q1=_F("0.446850002"),
  saturate=_F("9.01091385"),
)


def _f32_bits(value: float) -> int:
  return int(np.array(value, np.float32).view(np.int32))


def _half_type(n: int) -> str:
  """LLVM's f16 type of n lanes (a storage slot of f16 holds their i16 bits)."""
  return "half" if n == 1 else f"<{n} x half>"


class _Code(llvm_ir.Emitter):
  """IR text with blocks: `label()` starts one, `block` is the current one's name."""

  def __init__(self, fma: bool = False) -> None:
    super().__init__()
    self.fma = fma
    self.declares = set()
    self.block = "entry"
    self.labels = 0

  def new_label(self, stem: str) -> str:
    self.labels += 1
    return f"{stem}{self.labels}"

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def fc(self, n: int, value: float) -> str:
    return self.const_splat(11, n, value)

  def ic(self, n: int, value: int) -> str:
    return self.const_splat(4, n, value)

  def bits(self, n: int, x: str) -> str:
    return self.emit(f"bitcast {llvm_type(11, n)} {x} to {llvm_type(4, n)}")

  def float_of(self, n: int, x: str) -> str:
    return self.emit(f"bitcast {llvm_type(4, n)} {x} to {llvm_type(11, n)}")

  def f(self, op: str, n: int, a: str, b: str) -> str:
    return self.emit(f"{op} {llvm_type(11, n)} {a}, {b}")

  def madd(self, n: int, a: str, b: str, c: str) -> str:
    """a * b + c: one rounding (llvm.fma) where the interpreter's kernels run their FMA
    clone (kernels/math/simd.h: AVX2 and FMA), else two, as tools/f32_replay.madd."""
    if not self.fma:
      return self.f("fadd", n, self.f("fmul", n, a, b), c)
    name = f"@llvm.fma.{intrinsic_suffix(11, n)}"
    ty = llvm_type(11, n)
    self.declares.add(f"declare {ty} {name}({ty}, {ty}, {ty})")
    return self.emit(f"call {ty} {name}({ty} {a}, {ty} {b}, {ty} {c})")

  def i(self, op: str, n: int, a: str, b: int | str) -> str:
    """An i32 operation; an int `b` is a constant."""
    return self.emit(f"{op} {llvm_type(4, n)} {a}, {self.ic(n, b) if isinstance(b, int) else b}")

  def half_to_f32(self, code: int, n: int, h: str) -> str:
    """kernels/math/half.h ToFloat: exact; an f16 NaN comes out quiet. With F16C (`fma`:
    x86-64-v3) an f16 is widened by VCVTPH2PS, as kernels/math/half.cc does: same bits."""
    if code == 10 and self.fma:
      halves = self.emit(f"bitcast {llvm_type(code, n)} {h} to {_half_type(n)}")
      return self.emit(f"fpext {_half_type(n)} {halves} to {llvm_type(11, n)}")
    x = self.emit(f"zext {llvm_type(code, n)} {h} to {llvm_type(4, n)}")
    if code == 13:  # bf16: the top half of an f32
      return self.float_of(n, self.i("shl", n, x, 16))
    i, it = self.i, llvm_type(4, n)
    sign = i("shl", n, i("and", n, x, 0x8000), 16)
    mag = i("and", n, x, 0x7FFF)
    exponent = i("lshr", n, mag, 10)
    normal = i("add", n, i("shl", n, mag, 13), (127 - 15) << 23)
    as_float = self.emit(f"uitofp {it} {mag} to {llvm_type(11, n)}")
    subnormal = self.bits(n, self.f("fmul", n, as_float, self.fc(n, 2.0**-24)))
    payload = i("and", n, mag, 0x3FF)
    has_payload = self.icmp("ne", it, payload, self.ic(n, 0))
    quiet = self.emit(
      f"select {llvm_type(1, n)} {has_payload}, {it} {self.ic(n, 0x400000)}, {it} {self.ic(n, 0)}"
    )
    special = i("or", n, i("or", n, i("shl", n, payload, 13), 0x7F800000), quiet)
    is_sub = self.icmp("eq", it, exponent, self.ic(n, 0))
    is_special = self.icmp("eq", it, exponent, self.ic(n, 31))
    bits = self.select(llvm_type(1, n), is_special, it, special, normal)
    bits = self.select(llvm_type(1, n), is_sub, it, subnormal, bits)
    return self.float_of(n, i("or", n, sign, bits))

  def f32_to_half(self, code: int, n: int, v: str) -> str:
    """kernels/math/half.h ToFloat16 / ToBFloat16: round to nearest even, overflow to inf,
    subnormals kept; NaNs as half.h says (f16 keeps the top payload bits and is quiet,
    bf16 is the canonical quiet NaN with the sign kept). With F16C an f16 is rounded by
    VCVTPS2PH (round to nearest even), as kernels/math/half.cc does."""
    if code == 10 and self.fma:
      halves = self.emit(f"fptrunc {llvm_type(11, n)} {v} to {_half_type(n)}")
      return self.emit(f"bitcast {_half_type(n)} {halves} to {llvm_type(code, n)}")
    i, it, b1 = self.i, llvm_type(4, n), llvm_type(1, n)
    x = self.bits(n, v)
    mag = i("and", n, x, 0x7FFFFFFF)
    is_nan = self.icmp("ugt", it, mag, self.ic(n, 0x7F800000))
    if code == 13:
      high = i("lshr", n, x, 16)
      rounded = i("lshr", n, i("add", n, i("add", n, x, 0x7FFF), i("and", n, high, 1)), 16)
      quiet = i("or", n, i("and", n, high, 0x8000), 0x7FC0)
      bits = self.select(b1, is_nan, it, quiet, rounded)
    else:
      sign = i("and", n, i("lshr", n, x, 16), 0x8000)
      dropped = i("lshr", n, mag, 13)
      normal = i(
        "lshr",
        n,
        i(
          "add", n, i("add", n, i("sub", n, mag, (127 - 15) << 23), 0xFFF), i("and", n, dropped, 1)
        ),
        13,
      )
      # Below 2^-14 the FPU rounds: mag + 0.5 leaves the f16 mantissa in the low bits (under
      # the workers' DAZ, as in the interpreter, an f32 subnormal counts as 0).
      half_up = self.f("fadd", n, self.float_of(n, mag), self.fc(n, 0.5))
      subnormal = i("sub", n, self.bits(n, half_up), 0x3F000000)
      nan = i("or", n, i("and", n, dropped, 0x3FF), 0x7E00)
      huge = self.icmp("uge", it, mag, self.ic(n, 0x477FF000))
      tiny = self.icmp("ult", it, mag, self.ic(n, 0x38800000))
      bits = self.select(b1, tiny, it, subnormal, normal)
      bits = self.select(b1, huge, it, self.ic(n, 0x7C00), bits)
      bits = self.select(b1, is_nan, it, nan, bits)
      bits = i("or", n, sign, bits)
    return self.emit(f"trunc {it} {bits} to {llvm_type(code, n)}")

  def libmvec(self, name: str, code: int, n: int, x: str) -> str:
    """libmvec's `name` on n lanes: the interpreter's entry point (LIBMVEC), called on
    whole vectors of its width; fewer lanes are padded with zeros (the interpreter pads a
    tail so too), more are split."""
    avx2 = self.fma  # kernels/math/vector_math.cc UseAvx2: AVX2 and FMA, as host_has_fma
    width = (8 if avx2 else 4) if code == 11 else (4 if avx2 else 2)
    symbol = f"_ZGV{'d' if avx2 else 'b'}N{width}v_{name}"
    t = scalar_type(code)
    vt = f"<{width} x {t}>"
    self.declares.add(f"declare {vt} @{symbol}({vt})")
    parts = []
    for start in range(0, n, width):
      take = min(width, n - start)
      if n == 1:
        lanes = self.splat(code, width, x)
      elif start == 0 and take == n == width:
        lanes = x
      else:  # lanes [start, start + take) of x, then zeros
        idx = [start + j if j < take else n for j in range(width)]
        mask = ", ".join(f"i32 {j}" for j in idx)
        lanes = self.emit(
          f"shufflevector <{n} x {t}> {x}, <{n} x {t}> zeroinitializer, <{width} x i32> <{mask}>"
        )
      parts.append((self.emit(f"call {vt} @{symbol}({vt} {lanes})"), take))
    if n == 1:
      return self.emit(f"extractelement {vt} {parts[0][0]}, i32 0")
    if len(parts) == 1:
      if n == width:
        return parts[0][0]
      mask = ", ".join(f"i32 {j}" for j in range(n))
      return self.emit(f"shufflevector {vt} {parts[0][0]}, {vt} poison, <{n} x i32> <{mask}>")
    # n is width times a power of two: concatenate neighbours until one vector is left.
    vectors, size = [v for v, _ in parts], width
    while len(vectors) > 1:
      mask = ", ".join(f"i32 {j}" for j in range(2 * size))
      st = f"<{size} x {t}>"
      vectors = [
        self.emit(f"shufflevector {st} {a}, {st} {b}, <{2 * size} x i32> <{mask}>")
        for a, b in zip(vectors[::2], vectors[1::2])
      ]
      size *= 2
    return vectors[0]

  def exp(self, n: int, x: str) -> str:
    """kernels/math/exp_f32.cc Exp, rounding as tools/fit_exp.py's replay of it."""
    c, f, m = EXP, self.f, self.madd
    shifted = m(n, x, self.fc(n, c["log2e"]), self.fc(n, c["shifter"]))
    k = f("fsub", n, shifted, self.fc(n, c["shifter"]))
    minus_k = self.emit(f"fneg {llvm_type(11, n)} {k}")
    r = m(n, minus_k, self.fc(n, c["ln2lo"]), m(n, minus_k, self.fc(n, c["ln2hi"]), x))
    r2 = f("fmul", n, r, r)
    q = m(
      n,
      m(n, self.fc(n, c["c6"]), r2, m(n, self.fc(n, c["c5"]), r, self.fc(n, c["c4"]))),
      r2,
      m(n, self.fc(n, c["c3"]), r, self.fc(n, c["c2"])),
    )
    p = f("fadd", n, m(n, q, r2, r), self.fc(n, 1.0))
    it = llvm_type(4, n)
    scaled = self.emit(
      f"add {it} {self.bits(n, p)}, "
      f"{self.emit(f'shl {it} {self.bits(n, shifted)}, {self.ic(n, 23)}')}"
    )
    low = self.emit(f"fcmp olt {llvm_type(11, n)} {x}, {self.fc(n, c['min'])}")
    y = self.select(llvm_type(1, n), low, it, self.ic(n, 0), scaled)
    high = self.emit(f"fcmp ugt {llvm_type(11, n)} {x}, {self.fc(n, c['max'])}")
    big = f("fadd", n, x, self.fc(n, float("inf")))
    return self.emit(
      f"select {llvm_type(1, n)} {high}, {llvm_type(11, n)} {big}, {llvm_type(11, n)} {self.float_of(n, y)}"
    )

  def tanh(self, n: int, x: str) -> str:
    """kernels/math/tanh_f32.cc TanhF32, rounding as tools/fit_tanh.py's replay of it."""
    c, f, m, it, b1 = TANH, self.f, self.madd, llvm_type(4, n), llvm_type(1, n)
    bits = self.bits(n, x)
    mag = self.emit(f"and {it} {bits}, {self.ic(n, 0x7FFFFFFF)}")
    large = self.icmp("sge", it, mag, self.ic(n, _f32_bits(1.0)))
    step = self.select(b1, large, it, self.ic(n, 1 << 23), self.ic(n, 0))
    w = self.float_of(n, self.emit(f"sub {it} {mag}, {step}"))
    s = f("fmul", n, w, w)
    num = m(n, m(n, self.fc(n, c["d2"]), s, self.fc(n, c["d1"])), s, self.fc(n, c["d0"]))
    den = m(n, m(n, self.fc(n, c["q2"]), s, self.fc(n, c["q1"])), s, self.fc(n, 1.0))
    r = f("fdiv", n, num, den)
    u = m(n, f("fmul", n, w, s), r, w)
    doubled = f("fdiv", n, f("fadd", n, u, u), m(n, u, u, self.fc(n, 1.0)))
    y = self.select(b1, large, it, self.bits(n, doubled), self.bits(n, u))
    sat = self.icmp("sge", it, mag, self.ic(n, _f32_bits(c['saturate'])))
    y = self.select(b1, sat, it, self.ic(n, _f32_bits(1.0)), y)
    sign = self.emit(f"and {it} {bits}, {self.ic(n, -(1 << 31))}")
    y = self.emit(f"or {it} {y}, {sign}")
    tiny = self.icmp("slt", it, mag, self.ic(n, _f32_bits(2.0**-12)))
    nan = self.icmp("sgt", it, mag, self.ic(n, _f32_bits(float('inf'))))
    keep = self.emit(f"or {b1} {tiny}, {nan}")
    return self.float_of(n, self.select(b1, keep, it, bits, y))


def _op(e: _Code, body: Plan, instr: Instr, n: int, ins: list[str]) -> str:
  """`instr` on n lanes; `ins` are its operands already at n lanes."""
  slots = body.slots
  op = instr.op
  code = slots[instr.outs[0]][0]
  in_code = slots[instr.ins[0]][0] if instr.ins else code
  ty = llvm_type(code, n)
  if (op, code) == ("exponential", 12):
    # kernels/math/vector_math.cc ExpD4: lanes below -746 (e^x rounds to +0 there) are answered
    # as +0 and given to libmvec as 0, which would take its slow scalar path for them.
    low = e.emit(f"fcmp olt {ty} {ins[0]}, {e.const_splat(code, n, EXP_ZERO_D)}")
    safe = e.select(llvm_type(1, n), low, ty, e.zero(code, n), ins[0])
    return e.select(
      llvm_type(1, n), low, ty, e.zero(code, n), e.libmvec(LIBMVEC[(op, code)], code, n, safe)
    )
  if (op, code) in LIBMVEC:
    result = e.libmvec(LIBMVEC[(op, code)], code, n, ins[0])
    if op in KEEPS_SUBNORMALS:  # by the bits: compares read subnormals as 0 under DAZ
      it, bits = llvm_type(code - 7, n), DTYPES[code][1]  # i32 for f32, i64 for f64
      mag = e.emit(
        f"and {it} {e.emit(f'bitcast {ty} {ins[0]} to {it}')}, "
        f"{e.const_splat(code - 7, n, (1 << (bits - 1)) - 1)}"
      )
      normal = 1 << (23 if code == 11 else 52)  # the smallest normal's bits
      low = e.icmp(
        "ult",
        it,
        e.emit(f"sub {it} {mag}, {e.const_splat(code - 7, n, 1)}"),
        e.const_splat(code - 7, n, normal - 1),
      )
      result = e.select(llvm_type(1, n), low, ty, ins[0], result)
    return result
  if op == "exponential":
    return e.exp(n, ins[0])
  if op == "tanh":
    return e.tanh(n, ins[0])
  if op == "logistic":  # 1 / (1 + Exp(-x))
    t = e.exp(n, e.emit(f"fneg {ty} {ins[0]}"))
    return e.f("fdiv", n, e.fc(n, 1.0), e.f("fadd", n, e.fc(n, 1.0), t))
  # kernels/elementwise/gelu.cc: x * (half * (one + tanh(c2 * (x + c1 * x^3))))
  if op == "gelu_tanh":
    x, c1, c2, one, half = ins
    cube = e.f("fmul", n, e.f("fmul", n, x, x), x)
    u = e.f("fmul", n, c2, e.f("fadd", n, x, e.f("fmul", n, c1, cube)))
    t = e.tanh(n, u)
    return e.f("fmul", n, x, e.f("fmul", n, half, e.f("fadd", n, one, t)))
  if op in ROUNDING:
    suffix = intrinsic_suffix(code, n)
    for name in ("fabs", "copysign", ROUNDING[op]):
      args = f"{ty}, {ty}" if name == "copysign" else ty
      e.declares.add(f"declare {ty} @llvm.{name}.{suffix}({args})")
    mag = e.emit(f"call {ty} @llvm.fabs.{suffix}({ty} {ins[0]})")
    tiny = e.emit(f"fcmp olt {ty} {mag}, {e.const_splat(code, n, np.finfo(NUMPY[code]).tiny)}")
    zero = e.emit(f"call {ty} @llvm.copysign.{suffix}({ty} {e.zero(code, n)}, {ty} {ins[0]})")
    flushed = e.select(llvm_type(1, n), tiny, ty, zero, ins[0])
    return e.emit(f"call {ty} @llvm.{ROUNDING[op]}.{suffix}({ty} {flushed})")
  if op == "rsqrt":
    root = e.emit(f"call {ty} @llvm.sqrt.{intrinsic_suffix(code, n)}({ty} {ins[0]})")
    e.declares.add(f"declare {ty} @llvm.sqrt.{intrinsic_suffix(code, n)}({ty})")
    return e.emit(f"fdiv {ty} {e.const_splat(code, n, 1)}, {root}")
  if op == "broadcast_in_dim":  # of a scalar, already splat
    return ins[0]
  if op == "is_finite":  # std::isfinite: |x| ordered and not equal to +inf (NaN: false)
    in_ty = llvm_type(in_code, n)
    name = f"@llvm.fabs.{intrinsic_suffix(in_code, n)}"
    e.declares.add(f"declare {in_ty} {name}({in_ty})")
    mag = e.emit(f"call {in_ty} {name}({in_ty} {ins[0]})")
    return e.emit(f"fcmp one {in_ty} {mag}, {e.const_splat(in_code, n, np.inf)}")
  if op == "sign" and kind(code) != "f":  # elementwise.cc Sign: (0 < x) - (x < 0)
    return llvm_ir.int_sign(e, code, n, ins[0])
  if op == "sign":  # elementwise.cc Sign: NaN itself, else copysign(x == 0 ? 0 : 1, x)
    zero = e.emit(f"fcmp oeq {ty} {ins[0]}, {e.zero(code, n)}")
    mag = e.select(llvm_type(1, n), zero, ty, e.zero(code, n), e.const_splat(code, n, 1))
    name = f"@llvm.copysign.{intrinsic_suffix(code, n)}"
    e.declares.add(f"declare {ty} {name}({ty}, {ty})")
    signed = e.emit(f"call {ty} {name}({ty} {mag}, {ty} {ins[0]})")
    nan = e.emit(f"fcmp uno {ty} {ins[0]}, {ins[0]}")
    return e.select(llvm_type(1, n), nan, ty, ins[0], signed)
  if op == "convert":
    return _convert_any(e, in_code, code, n, ins[0])
  return llvm_ir.elementwise(e, op, instr.attrs, in_code, code, n, ins)


def _convert_any(e: _Code, src: int, dst: int, n: int, x: str) -> str:
  """convert.cc ConvertElement: f16/bf16 reached through f32 both ways (f64 -> f16 rounds
  twice, as XLA does), except f16/bf16 -> pred, which tests the bits."""
  if src == dst:
    return x
  if kind(src) == "h":
    if kind(dst) == "b":  # a subnormal bf16 is true although DAZ would compare it equal to 0
      mag = e.emit(f"and {llvm_type(src, n)} {x}, {e.const_splat(3, n, 0x7FFF)}")
      return e.icmp("ne", llvm_type(src, n), mag, e.zero(src, n))
    x, src = e.half_to_f32(src, n, x), 11
  if kind(dst) == "h":
    return e.f32_to_half(dst, n, convert_value(e, src, 11, n, x))
  return convert_value(e, src, dst, n, x)


def _reducer(e: _Code, body: str, code: int, n: int, acc: str, v: str) -> str:
  """acc op v, as kernels/reduce/reduce.cc VecOp / element_ops.h (NaN rule of max/min)."""
  if body in ("maximum", "minimum"):
    return min_max(e, body, code, n, acc, v)
  k = kind(code)
  ty = llvm_type(code, n)
  if body == "add":
    return e.emit(f"{'fadd' if k == 'f' else 'add'} {ty} {acc}, {v}")
  if body == "multiply":
    return e.emit(f"{'fmul' if k == 'f' else 'mul'} {ty} {acc}, {v}")
  if k == "f":
    raise Unsupported(f"float {body} reduction")
  return e.emit(f"{body} {ty} {acc}, {v}")


class _Emit:
  """Emission of one region (module docstring)."""

  def __init__(self, region: Region, fma: bool, constants: dict) -> None:
    self.g = region
    self.e = _Code(fma)
    self.constants = constants  # scalar param -> value known at compile time
    self.ptr: dict[int, str] = {}  # slot -> pointer to its memory (operands, results)
    self.buffer: dict[int, str] = {}  # crossing slot -> its row buffer (alloca)
    self.scalar: dict[int, str] = {}  # scalar slot -> SSA
    self.row_value: dict[int, str] = {}  # per-row slot -> SSA (in the current row)
    self.allocas: list[str] = []

  # -- memory --------------------------------------------------------------------------

  def _gep(self, code: int, base: str, index: str) -> str:
    return self.e.emit(f"getelementptr {scalar_type(code, False)}, ptr {base}, i64 {index}")

  def _masked(self, code: int, n: int) -> tuple[str, str, str]:
    """(memory type, intrinsic suffix, alignment) of n lanes of `code` in memory."""
    mem = llvm_type(code, n, in_register=False)
    scalar = scalar_type(code, False)
    suffix = f"v{n}" + ({"float": "f32", "double": "f64"}.get(scalar, scalar))
    return mem, suffix, str(max(1, DTYPES[code][1] // 8))

  def _load(self, code: int, n: int, base: str, index: str, mask: str | None = None) -> str:
    """n lanes at base[index]; with `mask` (<n x i1>) only its lanes are read (the tail
    of a row or range: the others may lie past the end), the rest are zero."""
    e = self.e
    mem, suffix, align = self._masked(code, n)
    at = self._gep(code, base, index)
    if mask is None or n == 1:
      value = e.emit(f"load {mem}, ptr {at}, align {align}")
    else:
      name = f"@llvm.masked.load.{suffix}.p0"
      e.declares.add(f"declare {mem} {name}(ptr, i32, <{n} x i1>, {mem})")
      value = e.emit(
        f"call {mem} {name}(ptr {at}, i32 {align}, <{n} x i1> {mask}, {mem} zeroinitializer)"
      )
    if kind(code) == "b":
      value = e.icmp("ne", mem, value, "zeroinitializer")
    return value

  def _store(
    self, code: int, n: int, value: str, base: str, index: str, mask: str | None = None
  ) -> None:
    e = self.e
    mem, suffix, align = self._masked(code, n)
    if kind(code) == "b":
      value = e.emit(f"zext {llvm_type(code, n)} {value} to {mem}")
    at = self._gep(code, base, index)
    if mask is None or n == 1:
      e.lines.append(f"  store {mem} {value}, ptr {at}, align {align}")
    else:
      name = f"@llvm.masked.store.{suffix}.p0"
      e.declares.add(f"declare void {name}({mem}, ptr, i32, <{n} x i1>)")
      e.lines.append(f"  call void {name}({mem} {value}, ptr {at}, i32 {align}, <{n} x i1> {mask})")

  # -- one chunk of W lanes ------------------------------------------------------------

  def chunk(
    self, phase: int, n: int, col: str, index: str, wanted: list[int], mask: str | None = None
  ) -> dict:
    """Computes phase `phase`'s full-size values at lanes [col, col + n) of the row
    (element `index` of the full arrays); stores results and crossing values; returns
    {slot: SSA} for the slots in `wanted` (the phase's reduce inputs). `mask`: only
    these lanes exist (a tail); the others compute on zeros and are not stored."""
    g, e, body = self.g, self.e, self.g.body
    slots = body.slots
    values: dict[int, str] = {}

    def get(s: int) -> str:
      if s in values:
        return values[s]
      code = slots[s][0]
      c = g.cls[s]
      if s in g.views:  # read in place: this row's run of the operand
        at = e.emit(f"add i64 {self.view_base[s]}, {col}")
        v = self._load(code, n, self.ptr[g.views[s].ins[0]], at, mask)
      elif c == "scalar":
        v = e.splat(code, n, self.scalar[s])
      elif c == "row":
        v = e.splat(code, n, self.row_value[s])
      elif c == "col":
        at = col if g.period.get(s, 1) == 1 else e.emit(f"add i64 {self.tile_base[s]}, {col}")
        v = self._load(code, n, self.ptr[s], at, mask)
      elif s in body.params or (s in self.ptr and g.level[s] < phase):
        v = self._load(code, n, self.ptr[s], index, mask)
      elif s in self.buffer:
        v = self._load(code, n, self.buffer[s], col, mask)
      else:
        raise AssertionError(f"slot {s} unavailable in phase {phase}")
      values[s] = v
      return v

    stores = []
    for instr in body.instrs:
      out = instr.outs[0]
      if g.cls[out] != "full" or g.level[out] != phase or instr.op == "reduce" or out in g.views:
        continue
      values[out] = _op(e, body, instr, n, [get(s) for s in instr.ins])
      code = slots[out][0]
      if out in self.ptr:
        stores.append((code, values[out], self.ptr[out], index))
      if out in self.buffer:
        stores.append((code, values[out], self.buffer[out], col))
    got = {s: get(s) for s in wanted}
    # Stores after every load of the chunk: a result may be written over an operand of
    # the same shape (donation, runtime/executor.cc), which is then safe for a flat fusion
    # (one phase) because its lanes [index, index + n) are all read before any is written.
    for code, value, ptr, at in stores:
      self._store(code, n, value, ptr, at, mask)
    return got

  # -- loops ---------------------------------------------------------------------------

  def loop(
    self,
    start: str,
    stop: str,
    step: int,
    carried: list[tuple[str, str]],
    fn,
    static_trips: int | None = None,
  ) -> list[str]:
    """for (i = start; i + step <= stop; i += step) carried = fn(i, carried); returns the
    final carried values. `carried`: (type, initial value). Guarded unless the trip count
    is statically known to be at least one."""
    e = self.e
    head, done = e.new_label("loop"), e.new_label("after")
    pre = e.block
    if static_trips is not None:
      if static_trips <= 0:
        return [v for _, v in carried]
      e.lines.append(f"  br label %{head}")
    else:
      first_end = e.emit(f"add i64 {start}, {step}")
      enter = e.icmp("sle", "i64", first_end, stop)
      e.lines.append(f"  br i1 {enter}, label %{head}, label %{done}")
    e.label(head)
    i = e.tmp()
    phis_at = len(e.lines)
    names = [e.tmp() for _ in carried]
    new = fn(i, names)
    nxt = e.emit(f"add i64 {i}, {step}")
    limit = e.emit(f"add i64 {nxt}, {step}")
    more = e.icmp("sle", "i64", limit, stop)
    latch = e.block
    e.lines.append(f"  br i1 {more}, label %{head}, label %{done}")
    phis = [f"  {i} = phi i64 [{start}, %{pre}], [{nxt}, %{latch}]"]
    phis += [
      f"  {name} = phi {t} [{init}, %{pre}], [{v}, %{latch}]"
      for name, (t, init), v in zip(names, carried, new)
    ]
    e.lines[phis_at:phis_at] = phis
    e.label(done)
    if static_trips is not None:
      return new
    out = []
    for (t, init), v in zip(carried, new):
      out.append(e.emit(f"phi {t} [{init}, %{pre}], [{v}, %{latch}]"))
    # The index after the loop, for the next loop to start from.
    self.after_index = e.emit(f"phi i64 [{start}, %{pre}], [{nxt}, %{latch}]")
    return out

  # -- the function --------------------------------------------------------------------

  def lanes(self) -> int:
    """Lanes per vector: 32 bytes of the widest element (kernels/reduce/reduce.cc's Vec)."""
    widest = max(max(1, DTYPES[s[0]][1] // 8) for s in self.g.body.slots)
    return 32 // widest

  def phase_rows(self, phase: int, row_index: str) -> None:
    """Phase `phase` over one row of C (static): its full-size values and reductions."""
    g, e, body = self.g, self.e, self.g.body
    c = g.row
    reduces = [(k, body.instrs[k]) for k, p in g.reduce_phase.items() if p == phase]
    has_full = any(
      g.cls[i.outs[0]] == "full" and g.level[i.outs[0]] == phase
      for i in body.instrs
      if i.op != "reduce"
    )
    if not reduces and not has_full:
      return
    base = e.emit(f"mul i64 {row_index}, {c}")
    wanted = [i.ins[0] for _, i in reduces]
    codes = [body.slots[i.outs[0]][0] for _, i in reduces]
    w = self.lanes()
    if reduces:
      w = 32 // max(1, DTYPES[codes[0]][1] // 8)
      if any(32 // max(1, DTYPES[cd][1] // 8) != w for cd in codes):
        raise Unsupported("reductions of different widths in one phase")

    def at(col: str) -> str:
      return e.emit(f"add i64 {base}, {col}")

    def step(n, col, accs, first, mask=None):
      got = self.chunk(phase, n, col, at(col), wanted, mask)
      if not reduces:
        return []
      out = []
      for (_, instr), code, acc, s in zip(reduces, codes, accs, wanted):
        combined = _reducer(e, instr.attrs["body"], code, n, acc, got[s])
        out.append(
          combined
          if first is None
          else e.emit(
            f"select i1 {first}, {llvm_type(code, n)} {got[s]}, {llvm_type(code, n)} {combined}"
          )
        )
      return out

    def zeros(n):
      return [(llvm_type(code, n), e.zero(code, n)) for code in codes]

    def tail(start: int, count: int) -> list[str]:
      """The last `count` < w columns from `start`: one chunk of w lanes under a constant
      mask; returns the reduce inputs at w lanes (lanes from `count` on are garbage)."""
      mask = "<" + ", ".join(f"i1 {'true' if j < count else 'false'}" for j in range(w)) + ">"
      got = self.chunk(phase, w, str(start), at(str(start)), wanted, mask)
      return [got[s] for s in wanted]

    def is_first(i, start="0"):
      return e.icmp("eq", "i64", i, start)

    if not reduces:
      u = 2
      big = c // (u * w)
      done = big * u * w

      def body_u(i, _):
        for j in range(u):
          col = e.emit(f"add i64 {i}, {j * w}") if j else i
          step(w, col, [], None)
        return []

      self.loop("0", str(done), u * w, [], body_u, static_trips=big)
      small = (c - done) // w
      self.loop(
        str(done),
        str(done + small * w),
        w,
        [],
        lambda i, _: step(w, i, [], None) or [],
        static_trips=small,
      )
      done += small * w
      if c - done == 1:
        step(1, str(done), [], None)
      elif c > done:
        tail(done, c - done)
      return
    # Reductions: kernels/reduce/reduce.cc Fold's order exactly (module docstring).
    if c < w:  # acc = in[0], then op in[1], ... in order
      lanes = tail(0, c)
      accs = []
      for (_, instr), code, got in zip(reduces, codes, lanes):
        acc = e.gather(code, w, got, np.array([0]))
        for j in range(1, c):
          acc = _reducer(
            e, instr.attrs["body"], code, 1, acc, e.gather(code, w, got, np.array([j]))
          )
        accs.append(acc)
    else:
      done = 0
      if c >= 4 * w:
        quads = c // (4 * w)

        def quad(i, a):
          first = is_first(i)
          lanes = [a[j * len(codes) : (j + 1) * len(codes)] for j in range(4)]
          out = []
          for j in range(4):
            col = e.emit(f"add i64 {i}, {j * w}") if j else i
            out.append(step(w, col, lanes[j], first))
          return [v for part in out for v in part]

        flat = self.loop("0", str(quads * 4 * w), 4 * w, zeros(w) * 4, quad, static_trips=quads)
        m = len(codes)
        a = [flat[j * m : (j + 1) * m] for j in range(4)]
        accs = []
        for r, (_, instr) in enumerate(reduces):
          op = instr.attrs["body"]
          a0 = _reducer(e, op, codes[r], w, a[0][r], a[1][r])
          a2 = _reducer(e, op, codes[r], w, a[2][r], a[3][r])
          accs.append(_reducer(e, op, codes[r], w, a0, a2))
        done = quads * 4 * w
        rest = (c - done) // w
        accs = self.loop(
          str(done),
          str(done + rest * w),
          w,
          list(zip([t for t, _ in zeros(w)], accs)),
          lambda i, a: step(w, i, a, None),
          static_trips=rest,
        )
      else:
        rest = c // w
        accs = self.loop(
          "0",
          str(rest * w),
          w,
          zeros(w),
          lambda i, a: step(w, i, a, is_first(i)),
          static_trips=rest,
        )
      done += rest * w
      # The lanes of the one vector as a tree: l op l + width, width halving.
      scalars = []
      for (_, instr), code, acc in zip(reduces, codes, accs):
        op = instr.attrs["body"]
        width = w
        while width > 1:
          width //= 2
          low = e.gather(code, width * 2, acc, np.arange(width))
          high = e.gather(code, width * 2, acc, np.arange(width, 2 * width))
          acc = _reducer(e, op, code, width, low, high)
        scalars.append(acc)
      accs = scalars
      if c > done:  # the last c - done elements, in order
        lanes = tail(done, c - done)
        for r, ((_, instr), code, got) in enumerate(zip(reduces, codes, lanes)):
          for j in range(c - done):
            accs[r] = _reducer(
              e, instr.attrs["body"], code, 1, accs[r], e.gather(code, w, got, np.array([j]))
            )
    for (_, instr), code, acc in zip(reduces, codes, accs):
      init = self.value_row(instr.ins[1])
      self.row_value[instr.outs[0]] = _reducer(e, instr.attrs["body"], code, 1, init, acc)

  def value_row(self, s: int) -> str:
    return self.scalar[s] if self.g.cls[s] == "scalar" else self.row_value[s]

  def per_row_ops(self, phase: int, row_index: str) -> None:
    """The per-row instructions whose inputs exist in `phase` (one lane each)."""
    g, e, body = self.g, self.e, self.g.body
    for instr in body.instrs:
      out = instr.outs[0]
      if g.cls[out] != "row" or g.level[out] != phase or instr.op == "reduce":
        continue
      self.row_value[out] = _op(e, body, instr, 1, [self.value_row(s) for s in instr.ins])
    for s, v in list(self.row_value.items()):
      if (
        s in self.ptr and g.level.get(s) == phase and s not in body.params and s not in self.stored
      ):
        self._store(body.slots[s][0], 1, v, self.ptr[s], row_index)
        self.stored.add(s)

  def function(self, symbol: str) -> str:
    g, e, body = self.g, self.e, self.g.body
    entry = []
    for j, s in enumerate(list(body.params) + list(body.results)):
      entry.append(f"  %pp{j} = getelementptr ptr, ptr %args, i64 {j}")
      entry.append(f"  %pa{j} = load ptr, ptr %pp{j}")
      self.ptr.setdefault(s, f"%pa{j}")
    e.lines.extend(entry)
    for s in body.params:
      if g.cls[s] == "scalar":
        code = body.slots[s][0]
        if s in self.constants and kind(code) in ("f", "s", "u", "b"):
          self.scalar[s] = llvm_ir.literal(code, self.constants[s].reshape(-1)[0])
        else:
          self.scalar[s] = self._load(code, 1, self.ptr[s], "0")
    for instr in body.instrs:  # scalar broadcasts and reshapes of scalars
      if g.cls[instr.outs[0]] == "scalar":
        self.scalar[instr.outs[0]] = self.scalar[instr.ins[0]]
    for s in g.crossing:
      if s in self.ptr:
        continue
      code = body.slots[s][0]
      self.allocas.append(f"  %buf{s} = alloca [{g.row} x {scalar_type(code, False)}], align 64")
      self.buffer[s] = f"%buf{s}"
    if sum(g.row * max(1, DTYPES[body.slots[s][0]][1] // 8) for s in self.buffer) > MAX_ROW_BUFFERS:
      raise Unsupported("row buffers too big for the stack")
    if g.flat:
      self.flat_body()
    else:

      def row(r, _):
        self.row_value = {
          s: self._load(body.slots[s][0], 1, self.ptr[s], r)
          for s in body.params
          if g.cls[s] == "row"
        }
        self.tile_base = {}  # tiles: where this row's tile row starts
        for s, period in g.period.items():
          if period > 1:
            within = e.emit(f"urem i64 {r}, {period}")
            self.tile_base[s] = e.emit(f"mul i64 {within}, {g.row}")
        self.view_base = {
          s: self.slice_row(r, i) if i.op == "slice" else self.run_row(r, i)
          for s, i in g.views.items()
        }
        self.stored = set()
        for p in range(g.phases):
          self.per_row_ops(p, r)
          self.phase_rows(p, r)
        return []

      self.loop("%begin", "%end", 1, [], row)
    e.lines.append("  ret void")
    header = "\n".join(sorted(e.declares))
    return (
      header + "\n\n" + f"define void @{symbol}(ptr %args, i64 %begin, i64 %end) #0 {{\n"
      "entry:\n"
      + "\n".join(self.allocas + e.lines)
      + "\n}\n\n"
      + 'attributes #0 = { nounwind "denormal-fp-math"="preserve-sign,preserve-sign" '
      '"denormal-fp-math-f32"="preserve-sign,preserve-sign" }\n'
    )

  def slice_row(self, r: str, instr: Instr) -> str:
    """The element of slice `instr`'s operand where row `r` of its result starts: the
    result's element r * C as a multi-index, mapped through the slice's start and strides
    (C divides the last dim, whose stride is 1, so the row is contiguous there)."""
    e, slots = self.e, self.g.body.slots
    out_dims, in_dims = slots[instr.outs[0]][1], slots[instr.ins[0]][1]
    start, stride = instr.attrs["start"], instr.attrs["stride"]
    first = e.emit(f"mul i64 {r}, {self.g.row}")
    at = str(sum(int(b) * math.prod(in_dims[d + 1 :]) for d, b in enumerate(start)))
    for d, size in enumerate(out_dims):
      if size == 1:
        continue
      index = (
        e.emit(f"udiv i64 {first}, {math.prod(out_dims[d + 1 :])}")
        if d + 1 < len(out_dims)
        else first
      )
      if d > 0:
        index = e.emit(f"urem i64 {index}, {size}")
      term = e.emit(f"mul i64 {index}, {int(stride[d]) * math.prod(in_dims[d + 1 :])}")
      at = e.emit(f"add i64 {at}, {term}")
    return at

  def run_row(self, r: str, instr: Instr) -> str:
    """The element of broadcast `instr`'s operand where row `r` of its result starts (a
    "run" broadcast: the row's dims are the operand's last, so the row is contiguous):
    the result's element r * C as a multi-index, its broadcast dims dropped."""
    e, slots = self.e, self.g.body.slots
    out_dims, in_dims = slots[instr.outs[0]][1], slots[instr.ins[0]][1]
    first = e.emit(f"mul i64 {r}, {self.g.row}")
    at = "0"
    for j, d in enumerate(instr.attrs["dims"]):
      if in_dims[j] == 1 or math.prod(out_dims[d + 1 :]) < self.g.row:
        continue  # broadcast along d, or d lies inside the row
      index = e.emit(f"udiv i64 {first}, {math.prod(out_dims[d + 1 :])}")
      if d > 0:
        index = e.emit(f"urem i64 {index}, {out_dims[d]}")
      term = e.emit(f"mul i64 {index}, {math.prod(in_dims[j + 1 :])}")
      at = e.emit(f"add i64 {at}, {term}")
    return at

  def flat_body(self) -> None:
    e = self.e
    w = self.lanes()

    def vec(i, _):
      # One vector per iteration: two (unrolled) made the backend spill the hoisted
      # constants of a tanh/exp chain, for no gain.
      self.chunk(0, w, i, i, [])
      return []

    self.after_index = "%begin"
    self.loop("%begin", "%end", w, [], vec)
    start = self.after_index
    # The last end - start < w elements: one chunk under a mask of the lanes that exist.
    left = e.emit(f"sub i64 %end, {start}")
    has = e.icmp("sgt", "i64", left, "0")
    tail, done = e.new_label("tail"), e.new_label("done")
    e.lines.append(f"  br i1 {has}, label %{tail}, label %{done}")
    e.label(tail)
    count = e.splat(5, w, left)
    lanes = "<" + ", ".join(f"i64 {j}" for j in range(w)) + ">"
    mask = e.emit(f"icmp ult <{w} x i64> {lanes}, {count}")
    self.chunk(0, w, start, start, [], mask)
    e.lines.append(f"  br label %{done}")
    e.label(done)


def emit_fusion(
  instr: Instr,
  symbol: str,
  fma: bool = False,
  thresholds: bool = True,
  repeat: int = 1,
  constants: dict | None = None,
) -> tuple[str, dict]:
  """(LLVM IR of fusion `instr` as function `symbol`, the jit_fusion attributes it needs:
  items, work per item, row). `fma`: round exp/tanh's multiply-adds once, as the
  interpreter's AVX2+FMA clones do (codegen.host_has_fma). `thresholds`: refuse regions
  below MIN_ELEMENTS / MIN_WORK (off under WORKSHOP_CODEGEN=force), counting its
  elements `repeat` times (a fusion in a loop body: the loop's trip count; MIN_WORK is
  not applied there, the interpreter's per-run cost repeating every iteration). Raises
  Unsupported for what the tier does not cover. `constants`: body param -> its value (a
  one-element array) where the operand is a constant, emitted as a literal."""
  body = instr.attrs.get("body")
  if not isinstance(body, Plan):
    raise Unsupported("no body")
  region = Region(body, int(instr.attrs.get("row", 1)))
  runs = f" x {repeat} runs" if repeat > 1 else ""
  heavy = long_body(body)
  if thresholds and region.n * repeat < least_elements(repeat) and not heavy:
    raise Unsupported(f"{region.n} elements{runs} (fewer than {least_elements(repeat)})")
  if thresholds and repeat == 1 and not heavy and region.n * region.work() < MIN_WORK:
    raise Unsupported(
      f"{region.n * region.work()} element operations{runs} (fewer than {MIN_WORK})"
    )
  if len(body.results) != len(instr.outs) or len(body.params) != len(instr.ins):
    raise Unsupported("operands and results do not match the body")
  if len(set(body.results)) != len(body.results) or set(body.results) & set(body.params):
    raise Unsupported("a result that is an operand or repeats")
  for s in body.results:
    if region.cls[s] not in ("full", "row"):
      raise Unsupported("a result that is neither full size nor per row")
  emitter = _Emit(region, fma, constants or {})
  code = emitter.function(symbol)
  # At least 1: a body of broadcasts alone does no element operations but still writes
  # its results (the kernel sizes its chunks by work and refuses 0).
  per_item = max(1, region.work() * (1 if region.flat else region.row))
  return code, {"items": region.rows, "work": per_item, "row_length": region.row}
