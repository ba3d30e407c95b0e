"""The code-generation tier: small while loops and fused elementwise regions compiled
into native functions.

Fusions: `compile_fusions(plan)` (after compiler/fusion.py) replaces each `fusion` the
tier covers (fusions.py: elementwise arithmetic, compares, selects, converts, f32
exp/tanh/logistic, broadcasts of scalars, rows, columns and tiles, reductions of rows; at
least fusions.MIN_ELEMENTS elements and MIN_WORK element operations) by a `jit_fusion`: the fusion's operands, results and
`body`/`row` attributes (the interpreter's fallback), plus backend "llvm", code, symbol,
`items` (rows, or elements of a flat fusion), `work` (operations per item, for the thread
pool's grain) and `row_length` (C, 0 when flat). kernels/fusion.cc loads the function as
for loops and runs it over the items, split over the thread pool. Each distinct body
(fusions of identical structure, as in the layers of a deep model, share one) is emitted
and compiled once per process, and the object code is cached on disk as for loops.

Loops:

`compile_loops(plan)` replaces each `while` whose cond and body the tier covers
(loops.check_loop: elementwise arithmetic, compares, selects, converts, constants and
small data movement on values of at most 256 elements) by a `jit_loop` instruction: the
same operands, results and `cond`/`body` sub-plans (the interpreter's fallback), plus

  backend: "llvm" (llvm_ir.py, JIT-compiled in-process by llvmlite) or "gcc" (cxx.py,
           g++ into a cached shared library), code: the source text, symbol: its name,
  calls:   [[region (0 cond, 1 body), instruction index], ...]: the instructions the
           code runs by calling their kernels (loops.RUN), in call-site order;
  work:    element operations the whole loop does when its trip count is static (a
           fori_loop with constant bounds), else -1: the executor runs a program whose
           loops all do little work on the caller's thread (runtime/executable.cc).

The C++ kernel (kernels/codegen/jit_loop.cc) asks `load(backend, code, symbol)` for the function's
address when its plan is prepared (compile, or DeserializeAndLoad: a serialized executable
holds the source, not machine code, and compiles it again in the new process), and runs
the interpreted loop if that fails. Everything is decided here, at compile time:

  WORKSHOP_CODEGEN=1     the default: every loop the tier covers, and the fusions it covers
                         that are worth their compile time (fusions.MIN_ELEMENTS, MIN_WORK)
  WORKSHOP_CODEGEN=0     the tier is off (every loop and fusion interpreted)
  WORKSHOP_CODEGEN=force every loop and fusion the tier covers, whatever its size: the
                         size thresholds are off, so small test programs exercise the
                         generated code (tests/conftest.py runs the op tests so and with 0)
  WORKSHOP_CODEGEN=gcc   the g++ backend instead of llvmlite (loops only)
  WORKSHOP_CODEGEN_DEBUG=1  print why a loop or fusion stays interpreted

Without llvmlite the tier is off, with one warning.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import warnings

import numpy as np

from ..fusion import READS_WHOLE, fusion_elements
from ..plan import Instr, Plan, free_lists, region
from . import loops

# One lock for all of this module's state and every llvmlite call that changes the JIT
# (initialising it, adding modules, the global symbol table). Compiles run on several
# Python threads at once: llvmlite's calls release the GIL (ctypes), so without it two
# threads could each create "the" engine, and the one dropped took its functions' code
# with it while plans still pointed there (another program's code ran, or a segfault).
# Reentrant: load() initialises through _llvm_init().
_lock = threading.RLock()
_loaded: dict[tuple[str, str], tuple[object, int]] = {}  # (backend, sha) -> (keep-alive, address)
_llvm = None  # (llvmlite.binding, the MCJIT engine) once initialised; never replaced
_llvm_failed: str | None = None
_warned = False


def _setting() -> str:
  return os.environ.get("WORKSHOP_CODEGEN", "1").strip().lower()


def forced() -> bool:
  """Whether WORKSHOP_CODEGEN=force: fusions are compiled whatever their size."""
  return _setting() == "force"


def backend() -> str | None:
  """The backend WORKSHOP_CODEGEN selects ("llvm" by default), None when off/unavailable."""
  setting = _setting()
  if setting in ("0", "off", "false", "no", ""):
    return None
  if setting in ("gcc", "g++", "cxx"):
    return "gcc"
  if setting not in ("1", "on", "true", "yes", "llvm", "force"):
    _warn(f"WORKSHOP_CODEGEN={setting!r} is not a setting (0, 1, force or gcc); using 1")
  if _llvm_init() is None:
    _warn(f"llvmlite is unavailable ({_llvm_failed}); loops and fusions run in the interpreter")
    return None
  return "llvm"


def _warn(message: str) -> None:
  global _warned
  if not _warned:
    _warned = True
    warnings.warn(f"workshop codegen: {message}", RuntimeWarning, stacklevel=3)


def _debug(message: str) -> None:
  if os.environ.get("WORKSHOP_CODEGEN_DEBUG"):
    print(f"workshop codegen: {message}", file=sys.stderr)


def compile_loops(plan: Plan) -> Plan:
  """`plan` with every while loop the tier covers (at any depth) as a jit_loop."""
  if not _has_loop(plan):
    return plan  # without loading llvmlite (65 ms the first time, measured)
  which = backend()
  if which is None:
    return plan
  return _rewrite(plan, which)


def compile_memory_loops(plan: Plan) -> Plan:
  """`plan` with every while loop left interpreted (at any depth) that the tier covers
  with its values of more than loops.MAX_ELEMENTS elements in memory
  (loops.memory_plan) as a jit_loop. Runs after fusion: the kernels such a loop calls
  are then the fused ones (a decode step's softmax is one or two calls, not six)."""
  if not _has_loop(plan) or backend() != "llvm" or _kernel_symbols() is None:
    return plan
  return _rewrite(plan, "llvm", memory=True)


# Fewest instructions (constants not counted) a jit_block takes: an interpreted
# instruction costs a dispatch and an allocation (0.3-1 us on the 2-core VM), a block one
# dispatch, one allocation per result, and about 10 ms of LLVM at compile time.
MIN_BLOCK = 4


def compile_blocks(plan: Plan) -> Plan:
  """`plan` with each maximal run of consecutive small straight-line instructions
  (loops.block_op: the ops a generated loop computes in registers, on values of at most
  loops.MAX_ELEMENTS elements) of at least MIN_BLOCK in the cond/body of every
  interpreted `while`, and in the branches of `case`s inside them, at any depth, as one
  `jit_block`: a native function from the run's operands to the values read after it
  (llvm_ir.emit_block), its instructions kept as the `body` the interpreter falls back
  to. What keeps a loop interpreted (a kernel run inside a conditional, values too big
  for registers) then costs its own instructions per iteration, not the bookkeeping
  around them (equinox's checkpointed while_loop, a sampler's threefry split)."""
  if not _has_loop(plan) or backend() != "llvm":
    return plan
  return _blocks(plan, False, _kernel_symbols() is not None)


def _blocks(plan: Plan, in_loop: bool, called: bool) -> Plan:
  instrs = []
  for instr in plan.instrs:
    if instr.op == "jit_loop":
      # The cases its code hands to the interpreter (loops.interpreted_case) run their
      # branches interpreted every step they are taken; blocks inside a branch leave the
      # positions of the cond's and body's instructions, which the call sites index, as
      # they are.
      attrs = dict(instr.attrs)
      for key in ("cond", "body"):
        region = attrs[key]
        inner = [
          Instr(
            i.op,
            i.ins,
            i.outs,
            {k: _blocks(v, True, called) if isinstance(v, Plan) else v for k, v in i.attrs.items()},
            i.loc,
          )
          if i.op == "case" and loops.interpreted_case(region, i)
          else i
          for i in region.instrs
        ]
        attrs[key] = Plan(region.slots, region.params, region.results, inner, region.frees)
      instr = Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)
    elif instr.op in ("while", "case"):
      inner = in_loop or instr.op == "while"
      attrs = {
        k: _blocks(v, inner, called) if isinstance(v, Plan) else v for k, v in instr.attrs.items()
      }
      instr = Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)
    instrs.append(instr)
  if not in_loop:
    return Plan(plan.slots, plan.params, plan.results, instrs, plan.frees)
  out: list[Instr] = []
  run: list[Instr] = []
  for k, instr in enumerate(instrs + [None]):
    if instr is not None and loops.block_op(plan, instr, called):
      run.append(instr)
      continue
    if sum(i.op != "constant" for i in run) >= MIN_BLOCK:
      block = _try_block(plan, run, instrs[k:])
      out.extend(block if isinstance(block, list) else [block])
    else:
      out.extend(run)
    run = []
    if instr is not None:
      out.append(instr)
  return Plan(plan.slots, plan.params, plan.results, out, free_lists(out, plan.results))


def _try_block(plan: Plan, run: list[Instr], rest: list[Instr]) -> Instr | list[Instr]:
  """The jit_block of `run` (instructions of `plan` followed by `rest`), or `run` as it
  is when its code cannot be made."""
  from . import llvm_ir  # pylint: disable=import-outside-toplevel

  defined = {s for i in run for s in i.outs}
  read_later = set(plan.results) | {s for i in rest for s in i.ins}
  outs = [s for i in run for s in i.outs if s in read_later]
  ins = list(dict.fromkeys(s for i in run for s in i.ins if s not in defined))
  loc = f"block of {len(run)} ending at {run[-1].loc}"
  if not outs:
    return run
  body = Plan(plan.slots, ins, outs, list(run), free_lists(list(run), outs))
  try:
    code = llvm_ir.emit_block(body, "block", _kernel_symbols() is not None)
    symbol = "workshop_block_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    code = with_tag(code.replace("@block(", f"@{symbol}(", 1), symbol)
    load("llvm", code, symbol)  # compile now: a failure keeps the instructions
  except loops.Unsupported as e:
    _debug(f"{loc} stays interpreted: {e}")
    return run
  except Exception as e:  # pylint: disable=broad-except  (a codegen bug must not fail the compile)
    _warn(f"compiling the {loc} failed ({type(e).__name__}: {e}); it runs in the interpreter")
    return run
  attrs = {"body": body, "backend": "llvm", "code": code, "symbol": symbol}
  return Instr("jit_block", ins, outs, attrs, run[-1].loc)


def compile_fusions(plan: Plan, repeat: int = 1, known: dict | None = None) -> Plan:
  """`plan` with every fusion the tier covers as a jit_fusion (llvm backend only: with
  WORKSHOP_CODEGEN=gcc fusions stay interpreted), also in the cond/body of interpreted
  `while` loops and in `case` branches, at any depth. `repeat`: how many times `plan`
  runs per call (a loop body: the product of the enclosing loops' static trip counts,
  loops.trip_count; 1 where a count is not static), which multiplies a fusion's size
  before the thresholds (MIN_ELEMENTS, MIN_WORK) judge it: an RK4 step's 16K-element
  chains, run 200 times, are worth compiling. `known`: param slot -> value of the params
  that are scalar constants (a loop's captures of the enclosing plan's constants)."""
  from . import fusions  # pylint: disable=import-outside-toplevel

  least = 1 if forced() else fusions.least_elements(repeat)
  big = {
    id(i)
    for i in plan.instrs
    if i.op == "fusion"
    and (
      _fusion_elements(i) * repeat >= least
      or (isinstance(i.attrs.get("body"), Plan) and fusions.long_body(i.attrs["body"]))
    )
  }
  shared = _repeated_flat_fusions(plan, big, repeat)
  big |= shared
  if os.environ.get("WORKSHOP_CODEGEN_DEBUG"):
    for instr in plan.instrs:
      if instr.op == "fusion" and id(instr) not in big:
        _debug(
          f"fusion at {instr.loc} stays interpreted: {_fusion_elements(instr)} elements"
          f"{_times(repeat)} (fewer than {least}; WORKSHOP_CODEGEN=force compiles it anyway)"
        )
    if big and backend() == "gcc":
      _debug(f"{len(big)} fusion(s) stay interpreted: the gcc backend compiles loops only")
  regions = any(i.op in ("while", "case") for i in plan.instrs)
  if not (big or regions) or backend() != "llvm":
    return plan  # without loading llvmlite
  instrs = []
  slots = list(plan.slots)
  try:
    scalars = _constant_scalars(plan, known)
  except Exception as e:  # pylint: disable=broad-except  (a codegen bug must not fail the compile)
    _warn(f"reading the constants of a plan failed ({type(e).__name__}: {e})")
    scalars = {}
  for instr in plan.instrs:
    if id(instr) in big:
      instr = (
        _try_flat_fusion(instr)
        if id(instr) in shared
        else _try_fusion(instr, repeat=repeat, constants=_known_operands(instr, scalars))
      )
      if instr.op == "fusion" and any(i.op in READS_WHOLE for i in instr.attrs["body"].instrs):
        # The generated tier reads operands in its own layouts only: slices and
        # concatenates go back before the fusion, written out, and the rest is compiled if
        # it can be.
        try:
          before, rest = _moves_out(slots, instr)
        except Exception as e:  # pylint: disable=broad-except  (a codegen bug must not fail the compile)
          _warn(f"moving the slices out of {instr.loc} failed ({type(e).__name__}: {e})")
          before, rest = [], instr
        done = (
          _try_fusion(rest, repeat=repeat, constants=_known_operands(rest, scalars))
          if before
          else rest
        )
        if done.op == "jit_fusion":
          instrs += before
          instr = done
    elif instr.op in ("while", "case"):
      inner = repeat
      if instr.op == "while":
        inner *= max(1, loops.trip_count(plan, instr))
      attrs = {
        k: compile_fusions(v, inner, _captured(instr, v, scalars) if instr.op == "while" else None)
        if isinstance(v, Plan)
        else v
        for k, v in instr.attrs.items()
      }
      instr = Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)
    instrs.append(instr)
  if len(instrs) == len(plan.instrs):
    return Plan(plan.slots, plan.params, plan.results, instrs, plan.frees)
  return Plan(slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


_FOLDED_COMPARE = {
  "EQ": np.equal,
  "NE": np.not_equal,
  "LT": np.less,
  "LE": np.less_equal,
  "GT": np.greater,
  "GE": np.greater_equal,
}


def _constant_scalars(plan: Plan, known: dict | None = None) -> dict[int, np.ndarray]:
  """slot -> value (one element) of each scalar `constant` of `plan`, of each `convert`
  of one between integer types or to a wider float (exact in numpy as in the kernels:
  integers wrap; floor_divide converts its divisor so), and of each `compare` and
  `select` of such values (jnp.remainder's divisor, made safe from zero by a select, is
  then a literal: LLVM divides by it with a multiply, 6x faster for `% 11`). `known`:
  values of params, as _captured gives them."""
  out = dict(known or {})
  for instr in plan.instrs:
    if not instr.outs or loops.elements(plan.slots[instr.outs[0]][1]) != 1:
      continue
    code = plan.slots[instr.outs[0]][0]
    if code not in loops.NUMPY or code not in loops.STORAGE:  # complex: not taken in
      continue
    if instr.op == "convert" and instr.ins[0] in out:
      src, k = plan.slots[instr.ins[0]][0], loops.kind(code)
      wider_float = loops.kind(src) == k == "f" and loops.STORAGE[code][1] >= loops.STORAGE[src][1]
      if wider_float or (loops.kind(src) in ("s", "u") and k in ("s", "u")):
        out[instr.outs[0]] = out[instr.ins[0]].astype(loops.NUMPY[code])
    elif instr.op == "compare" and all(s in out for s in instr.ins):
      if instr.attrs.get("compare_type") != "TOTALORDER":  # NaN is never folded in
        a, b = (out[s] for s in instr.ins)
        out[instr.outs[0]] = np.asarray(_FOLDED_COMPARE[instr.attrs["direction"]](a, b))
    elif instr.op == "select" and all(s in out for s in instr.ins):
      out[instr.outs[0]] = out[instr.ins[1]] if out[instr.ins[0]].all() else out[instr.ins[2]]
    elif instr.op == "constant" and loops.kind(code) in ("f", "s", "u", "b"):
      try:
        value = loops.constant_values(plan, instr)
      except loops.Unsupported:
        continue
      if not (loops.kind(code) == "f" and np.isnan(value).any()):  # keep NaN payloads
        out[instr.outs[0]] = value
  return out


def _captured(instr: Instr, region: Plan, scalars: dict) -> dict[int, np.ndarray]:
  """Param slot -> value of the params of while `instr`'s cond or body `region` that
  capture a scalar constant of the enclosing plan (the params after the carried values:
  JAX passes a loop body's constants in from outside; they never change)."""
  carried = len(instr.outs)
  if len(region.params) != len(instr.ins):
    return {}
  return {
    p: scalars[s] for p, s in zip(region.params[carried:], instr.ins[carried:]) if s in scalars
  }


def _known_operands(instr: Instr, scalars: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
  """Body param -> value, for the operands of fusion `instr` that are scalar constants:
  the generated code takes them as literals (XLA's fusions take constants in), so LLVM
  folds them: a floor divide by 2 becomes shifts, threefry's rotations shifts by an
  immediate count without the out-of-range select."""
  body = instr.attrs.get("body")
  if not isinstance(body, Plan) or len(body.params) != len(instr.ins):
    return {}
  return {p: scalars[s] for p, s in zip(body.params, instr.ins) if s in scalars}


def _moves_out(slots: list, instr: Instr) -> tuple[list[Instr], Instr]:
  """The slices and concatenates (fusion.READS_WHOLE) of fusion `instr`'s body, as
  instructions of the enclosing plan (`slots` grows by their results), and the fusion that
  takes their results as operands instead; ([], instr) when one is itself a result of the
  fusion."""
  body: Plan = instr.attrs["body"]
  moved = [i for i in body.instrs if i.op in READS_WHOLE]
  if any(i.outs[0] in body.results for i in moved):
    return [], instr
  outer = dict(zip(body.params, instr.ins))  # body slot -> enclosing plan slot
  before: list[Instr] = []
  for i in moved:
    slots.append(body.slots[i.outs[0]])
    outer[i.outs[0]] = len(slots) - 1
    before.append(Instr(i.op, [outer[s] for s in i.ins], [len(slots) - 1], i.attrs, i.loc))
  kept = [i for i in body.instrs if i.op not in READS_WHOLE]
  read = {s for i in kept for s in i.ins} | set(body.results)
  params = [p for p in body.params if p in read] + [i.outs[0] for i in moved]
  rest = region(body.slots, params, body.results, kept)  # the whole-read operands gone
  return before, Instr(
    "fusion", [outer[p] for p in params], instr.outs, {**instr.attrs, "body": rest}, instr.loc
  )


def _times(repeat: int) -> str:
  """How a debug message says that a fusion runs `repeat` times per call."""
  return f" x {repeat} runs" if repeat > 1 else ""


# The element count a flat fusion body is emitted at when its instances share one function:
# a flat body's code walks items [begin, end) and never reads its size.
_ANY_SIZE = 1 << 20


def _flat_size_free(instr: Instr) -> Instr | None:
  """`instr` with every full-size slot of its body reshaped to [_ANY_SIZE], if it is a
  flat fusion (no rows: every body slot full size or one element); else None."""
  body = instr.attrs.get("body")
  if not isinstance(body, Plan) or instr.attrs.get("row", 1) != 1:
    return None
  n = _fusion_elements(instr)
  sizes = [loops.elements(s[1]) for s in body.slots]
  if n <= 1 or any(m not in (1, n) for m in sizes):
    return None
  if any(
    i.op == "broadcast_in_dim" and loops.elements(body.slots[i.ins[0]][1]) != 1 for i in body.instrs
  ):
    return None
  slots = [
    (code, (_ANY_SIZE,)) if m == n else (code, ()) for (code, _), m in zip(body.slots, sizes)
  ]
  instrs = [
    Instr(i.op, i.ins, i.outs, {**i.attrs, "dims": []}, i.loc) if i.op == "broadcast_in_dim" else i
    for i in body.instrs
  ]
  free = Plan(slots, body.params, body.results, instrs, body.frees)
  return Instr(instr.op, instr.ins, instr.outs, {**instr.attrs, "body": free}, instr.loc)


def _repeated_flat_fusions(plan: Plan, big: set[int], repeat: int = 1) -> set[int]:
  """ids of the flat fusions that share a body with others whose work adds up to the
  thresholds: an optimizer update over a pytree (the same few chains on each of 100
  parameter arrays of 1K-80K elements) compiles each chain once, for every leaf, instead
  of interpreting 300 small fusions op by op. Leaves over MIN_ELEMENTS (`big`) but under
  MIN_WORK alone share the function too, rather than stay interpreted beside it. `repeat`:
  how many times the plan runs (a loop body's static trip count), which multiplies the work."""
  from . import fusions  # pylint: disable=import-outside-toplevel

  groups: dict[str, list[tuple[Instr, int]]] = {}
  for instr in plan.instrs:
    if instr.op != "fusion":
      continue
    free = _flat_size_free(instr)
    if free is not None:
      groups.setdefault(_structure(free), []).append((instr, _fusion_elements(instr)))
  shared: set[int] = set()
  for members in groups.values():
    if len(members) < 2:
      continue
    try:
      work = fusions.Region(_flat_size_free(members[0][0]).attrs["body"], 1).work()
    except loops.Unsupported:
      continue
    total = sum(n for _, n in members) * repeat
    # In a loop body MIN_WORK does not apply, as for one fusion (fusions.emit_fusion).
    if total >= fusions.least_elements(repeat) and (repeat > 1 or total * work >= fusions.MIN_WORK):
      shared.update(id(i) for i, _ in members)
  return shared


def _try_flat_fusion(instr: Instr) -> Instr:
  """_try_fusion of the size-free body (one function for every instance), with this
  instance's element count as its items."""
  free = _flat_size_free(instr)
  done = _try_fusion(free, thresholds=False)
  if done.op != "jit_fusion":
    return instr
  attrs = {**done.attrs, "body": instr.attrs["body"], "items": _fusion_elements(instr)}
  return Instr("jit_fusion", instr.ins, instr.outs, attrs, instr.loc)


def generated_code(f, *args) -> list[tuple[str, str, str]]:
  """(instruction, location, generated source) of each region of jit(f)(*args)'s plan
  (top level) that the tier compiled, in plan order: what notebook 06 shows."""
  import jax  # pylint: disable=import-outside-toplevel
  from ..compile import compile_program  # pylint: disable=import-outside-toplevel

  text = jax.jit(f).lower(*args).as_text()
  plan = compile_program(text.encode(), "mlir", b"", 1).plan
  return [(i.op, i.loc, i.attrs["code"]) for i in plan.instrs if i.op in ("jit_fusion", "jit_loop")]


_fma: bool | None = None


def host_has_fma() -> bool:
  """Whether this CPU runs the interpreter's FMA clones (kernels/math/simd.h: x86-64-v3, i.e.
  AVX2, FMA and F16C among others), so generated exp/tanh contract their multiply-adds as
  those do, and f16 converts use F16C as kernels/math/half.cc does."""
  global _fma
  with _lock:
    if _fma is None:
      llvm = (_llvm_init() or (None,))[0]
      features = llvm.get_host_cpu_features() if llvm is not None else {}
      _fma = all(features.get(f) for f in ("fma", "avx2", "f16c")) and _has_simd_clones()
    return _fma


def _has_simd_clones() -> bool:
  """Whether the plugin's interpreter has its SIMD clones: AddressSanitizer and
  ThreadSanitizer builds compile it without (setup.py, WORKSHOP_NO_SIMD_CLONES), and their
  runtime is then loaded into the process (preloaded, as the plugin needs it)."""
  process = ctypes.CDLL(None)
  return not any(hasattr(process, name) for name in ("__asan_init", "__tsan_init"))


def _fusion_elements(instr: Instr) -> int:
  body = instr.attrs.get("body")
  if not isinstance(body, Plan):
    return 0
  return fusion_elements(body)


# Fusion body structure (everything but locations) -> (code, symbol, attributes), or the
# reason it stays interpreted: the layers of a deep model repeat the same few fusions (a
# 48-layer MLP's gradient has 95 fusions of 4 kinds), and emitting one costs ~1 ms.
_emitted: dict[str, tuple[str, str, dict] | str] = {}


def forget_generated() -> None:
  """Forgets the functions this process emitted and loaded, as a new process would (the
  disk cache stays): bench/compile_latency.py measures compiles from that state."""
  with _lock:
    _loaded.clear()
    _emitted.clear()


def _structure(instr: Instr) -> str:
  body = instr.attrs["body"]
  return repr(
    (
      instr.attrs.get("row"),
      body.slots,
      body.params,
      body.results,
      [(i.op, i.ins, i.outs, sorted(i.attrs.items())) for i in body.instrs],
    )
  )


def _try_fusion(
  instr: Instr, thresholds: bool = True, repeat: int = 1, constants: dict | None = None
) -> Instr:
  """`instr` as a jit_fusion, or unchanged where the tier refuses it. `constants`: body
  param -> value of the operands known at compile time (_known_operands)."""
  from . import fusions  # pylint: disable=import-outside-toplevel

  constants = constants or {}
  force = forced() or not thresholds
  # A region too small by default is taken when forced, or when it runs `repeat` times.
  known = sorted((p, v.dtype.str, v.tobytes()) for p, v in constants.items())
  key = f"{force};{1 if force else repeat};{known};{_structure(instr)}"
  with _lock:
    done = _emitted.get(key)
  if isinstance(done, str):
    _debug(f"{instr.loc} stays interpreted: {done}")
    return instr
  try:
    if done is None:
      code, extra = fusions.emit_fusion(
        instr, "fusion", host_has_fma(), thresholds=not force, repeat=repeat, constants=constants
      )
      symbol = "workshop_fusion_" + hashlib.sha256(code.encode()).hexdigest()[:16]
      code = with_tag(code.replace("@fusion(", f"@{symbol}(", 1), symbol)
      done = (code, symbol, extra)
    code, symbol, extra = done
    load("llvm", code, symbol)  # compile now: a failure keeps the fusion interpreted
    with _lock:
      _emitted[key] = done
  except loops.Unsupported as e:
    with _lock:
      _emitted[key] = str(e)
    _debug(f"{instr.loc} stays interpreted: {e}")
    return instr
  except Exception as e:  # pylint: disable=broad-except  (a codegen bug must not fail the compile)
    _warn(f"compiling the {instr.loc} failed ({type(e).__name__}: {e}); it runs in the interpreter")
    return instr
  attrs = dict(instr.attrs, backend="llvm", code=code, symbol=symbol, **extra)
  return Instr("jit_fusion", instr.ins, instr.outs, attrs, instr.loc)


def _has_loop(plan: Plan) -> bool:
  return any(
    instr.op in ("while", "jit_loop")
    or any(isinstance(v, Plan) and _has_loop(v) for v in instr.attrs.values())
    for instr in plan.instrs
  )


def _rewrite(plan: Plan, which: str, memory: bool = False) -> Plan:
  instrs = []
  for instr in plan.instrs:
    attrs = {
      k: (_rewrite(v, which, memory) if isinstance(v, Plan) else v) for k, v in instr.attrs.items()
    }
    instr = Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)
    if instr.op == "while":
      instr = _try_loop(plan, instr, which, memory)
    instrs.append(instr)
  return Plan(plan.slots, plan.params, plan.results, instrs, plan.frees)


def _try_loop(plan: Plan, instr: Instr, which: str, memory: bool = False) -> Instr:
  scratch = None
  try:
    if which == "llvm":
      from . import llvm_ir as emitter
    else:
      from . import cxx as emitter
    calls: list[list[int]] = []
    code = (
      emitter.emit_loop(plan, instr, "loop", _kernel_symbols() is not None, calls, memory)
      if which == "llvm"
      else emitter.emit_loop(plan, instr, "loop")
    )
    symbol = "workshop_loop_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    if memory:
      # The scratch size is part of the name the plan calls the code by, so an executable
      # whose attribute was edited apart from its code is refused (jit_loop.cc).
      scratch = loops.memory_plan(plan, instr).scratch
      symbol = symbol.replace("_loop_", f"_loop_scratch{scratch}_")
    code = (
      code.replace("loop(", symbol + "(", 1)
      if which == "gcc"
      else with_tag(code.replace("@loop(", f"@{symbol}(", 1), symbol)
    )
    load(which, code, symbol)  # compile now: a failure keeps the loop interpreted
  except loops.Unsupported as e:
    _debug(f"while at {instr.loc} stays interpreted: {e}")
    return instr
  except Exception as e:  # pylint: disable=broad-except  (a codegen bug must not fail the compile)
    _warn(
      f"compiling the loop at {instr.loc} failed ({type(e).__name__}: {e}); "
      "it runs in the interpreter"
    )
    return instr
  attrs = dict(
    instr.attrs, backend=which, code=code, symbol=symbol, work=loops.static_work(plan, instr)
  )
  if calls:
    attrs["calls"] = calls
  if scratch is not None:
    attrs["scratch"] = scratch
  return Instr("jit_loop", instr.ins, instr.outs, attrs, instr.loc)


# Part of the object cache's key: cached objects of an older form of generated code
# (before the tag below) must not be taken for this one.
_CODE_FORMAT = "tagged-1"


def symbol_tag(symbol: str) -> int:
  """The tag of generated function `symbol` (workshop_loop_<16 hex>, workshop_fusion_<16
  hex>): its 64-bit hash, the same the C++ side derives from the symbol
  (kernels/codegen/generated_code.h)."""
  return int(symbol.rsplit("_", 1)[1], 16)


def with_tag(code: str, symbol: str) -> str:
  """`code` (LLVM IR) with the tag of `symbol` as prefix data of its definition: the 8
  bytes just before the function's entry, which kernels/codegen/generated_code.h checks
  when the plan is prepared and before every call, so a plan can only ever call the
  function it names (an error, not a jump, if anything else were at that address)."""
  tag = symbol_tag(symbol)
  signed = tag - (1 << 64) if tag >= 1 << 63 else tag
  head = f"define void @{symbol}("
  start = code.index(head)
  brace = code.index(" {\n", start)
  return code[:brace] + f" prefix i64 {signed}" + code[brace:]


def load(which: str, code: str, symbol: str) -> int:
  """The address of `symbol` compiled from `code` (cached per process; kept alive).

  Raises:
    ValueError: `code` does not define `symbol` (llvm: with its tag as prefix data).
  """
  if which == "llvm":
    tag = symbol_tag(symbol)
    signed = tag - (1 << 64) if tag >= 1 << 63 else tag
    if f"define void @{symbol}(" not in code or f" prefix i64 {signed} {{" not in code:
      raise ValueError(f"the generated code does not define {symbol} with its tag")
  key = (which, hashlib.sha256(code.encode()).hexdigest())
  with _lock:
    hit = _loaded.get(key)
    if hit is None:
      hit = _compile_llvm(code, symbol) if which == "llvm" else _compile_gcc(code, symbol, key[1])
      _loaded[key] = hit
    return hit[1]


def _llvm_init():
  """(llvmlite.binding, the process's one MCJIT engine), or None if llvmlite won't load.

  One engine for every loop: MCJIT owns the target machine it is given, so engines must
  not share one, and adding a module to an existing engine is cheaper than a new engine.
  """
  with _lock:
    return _llvm_init_locked()


def _llvm_init_locked():
  global _llvm, _llvm_failed
  if _llvm is not None or _llvm_failed is not None:
    return _llvm
  try:
    import llvmlite.binding as llvm  # pylint: disable=import-outside-toplevel

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(
      cpu=llvm.get_host_cpu_name(),
      features=llvm.get_host_cpu_features().flatten(),
      opt=2,
      codemodel="jitdefault",
    )
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
    # Object code persists on disk under a key of the source, the host CPU and the LLVM
    # version, so another process loading the same loop skips code generation.
    host = (
      f"{llvm.get_host_cpu_name()};{llvm.get_host_cpu_features().flatten()};"
      f"{llvm.llvm_version_info};{_CODE_FORMAT}"
    )
    engine.set_object_cache(
      lambda module, data: _object_store(module, data, host),
      lambda module: _object_fetch(module, host),
    )
    _llvm = (llvm, engine)
  except Exception as e:  # pylint: disable=broad-except
    _llvm_failed = f"{type(e).__name__}: {e}"
  return _llvm


def _compile_llvm(code: str, symbol: str):
  # No IR pass pipeline: the emitted IR is already SSA without memory traffic, and the
  # pipeline (O1 or O2) took 8-20 ms per loop for no measurable run-time gain (measured
  # on both bench loops); the backend's own opt=2 does instruction selection and
  # scheduling.
  llvm, engine = _llvm_init() or (None, None)
  if llvm is None:
    raise RuntimeError(f"llvmlite is unavailable ({_llvm_failed})")
  module = llvm.parse_assembly(code)
  module.verify()
  if "@WorkshopJitCall" in code or "@WorkshopJitRun" in code:
    _link_kernels(llvm, code)
  if "@_ZGV" in code:
    _link_libmvec(llvm, code)
  module.name = symbol  # the object cache's key (with the host): symbol hashes the code
  engine.add_module(module)  # the engine owns it now
  engine.finalize_object()
  address = engine.get_function_address(symbol)
  if not address:
    raise RuntimeError(f"{symbol} not found after JIT compilation")
  return module, address


_kernels = None  # (plugin CDLL, {op: handle}) once loaded; False if unavailable
_linked: set[str] = set()


def _kernel_symbols():
  """The plugin library whose kernels generated code may call (kernels/codegen/jit_loop.cc
  WorkshopJitCall), or None (then loops with such ops stay interpreted)."""
  global _kernels
  with _lock:
    return _kernel_symbols_locked()


def _kernel_symbols_locked():
  global _kernels
  if _kernels is None:
    try:
      from jax_plugins.workshop import library_path  # pylint: disable=import-outside-toplevel

      lib = ctypes.CDLL(library_path())
      lib.WorkshopJitKernelHandle.restype = ctypes.c_void_p
      lib.WorkshopJitKernelHandle.argtypes = [ctypes.c_char_p]
      lib.WorkshopJitVectorFunction.restype = ctypes.c_void_p
      lib.WorkshopJitVectorFunction.argtypes = [ctypes.c_char_p]
      _kernels = lib
    except Exception:  # pylint: disable=broad-except
      _kernels = False
  return _kernels or None


def _link_kernels(llvm, code: str) -> None:
  """Tells the JIT's linker where WorkshopJitCall and each called kernel are."""
  import re  # pylint: disable=import-outside-toplevel

  lib = _kernel_symbols()
  if lib is None:
    raise RuntimeError("the plugin's kernels are unavailable to generated code")
  for name in ("WorkshopJitCall", "WorkshopJitRun"):
    if name not in _linked:
      llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
      _linked.add(name)
  for op in set(re.findall(r"@workshop_kernel_(\w+) = external", code)):
    if op not in _linked:
      handle = lib.WorkshopJitKernelHandle(op.encode())
      if not handle:
        raise RuntimeError(f"no kernel {op}")
      llvm.add_symbol(f"workshop_kernel_{op}", handle)
      _linked.add(op)


def _link_libmvec(llvm, code: str) -> None:
  """Tells the JIT's linker where the vector functions `code` calls are (fusions.LIBMVEC:
  the interpreter's own, from libmvec or, named workshop_*, from the plugin)."""
  import re  # pylint: disable=import-outside-toplevel

  global _libmvec
  if _libmvec is None:
    _libmvec = ctypes.CDLL("libmvec.so.1")
  for name in set(re.findall(r"@(_ZGV\w+)\(", code)):
    if name not in _linked:
      if "_workshop_" in name:
        lib = _kernel_symbols()
        address = lib.WorkshopJitVectorFunction(name.encode()) if lib is not None else None
        if not address:
          raise RuntimeError(f"the plugin's {name} is unavailable to generated code")
      else:
        address = ctypes.cast(getattr(_libmvec, name), ctypes.c_void_p).value
      llvm.add_symbol(name, address)
      _linked.add(name)


_libmvec = None


def _object_path(module, host: str) -> str | None:
  if not module.name.startswith(("workshop_loop_", "workshop_fusion_", "workshop_block_")):
    return None
  digest = hashlib.sha256(f"{module.name};{host}".encode()).hexdigest()[:32]
  return os.path.join(_cache_dir(), f"{digest}.o")


def _object_store(module, data: bytes, host: str) -> None:
  try:
    path = _object_path(module, host)
    if path is not None:
      with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False) as f:
        f.write(data)
      os.replace(f.name, path)  # atomic: a concurrent reader sees all or nothing
  except OSError:
    pass  # a read-only cache only costs the next process a compile


def _object_fetch(module, host: str) -> bytes | None:
  try:
    path = _object_path(module, host)
    if path is not None and os.path.exists(path):
      with open(path, "rb") as f:
        return f.read()
  except OSError:
    pass
  return None


def _cache_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  path = os.environ.get("WORKSHOP_CODEGEN_CACHE") or os.path.join(base, "pjrt-workshop", "codegen")
  os.makedirs(path, exist_ok=True)
  return path


def _compile_gcc(code: str, symbol: str, digest: str):
  library = os.path.join(_cache_dir(), f"{digest[:32]}.so")
  if not os.path.exists(library):
    with tempfile.TemporaryDirectory() as tmp:
      source = os.path.join(tmp, "loop.cc")
      with open(source, "w", encoding="utf-8") as f:
        f.write(code)
      out = os.path.join(tmp, "loop.so")
      _run(source, out)
      os.replace(out, library)  # atomic: a concurrent process sees all or nothing
  handle = ctypes.CDLL(library)
  return handle, ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value


def _run(source: str, out: str) -> None:
  done = subprocess.run(
    [
      os.environ.get("CXX", "g++"),
      "-std=c++20",
      "-O2",
      "-march=native",
      "-ffp-contract=off",
      "-fno-math-errno",
      "-fPIC",
      "-shared",
      source,
      "-o",
      out,
    ],
    capture_output=True,
    text=True,
    check=False,
  )
  if done.returncode != 0:
    raise RuntimeError(f"g++ failed: {done.stderr[-2000:]}")
