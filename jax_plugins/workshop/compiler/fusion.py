"""Elementwise fusion: runs of elementwise kernels become one `fusion` kernel.

Unfused, `x * 2 + 1` on N elements is four kernels (two scalar broadcasts, multiply, add),
each streaming N elements through memory. Fused, the C++ `fusion` kernel walks the N
elements in cache-sized blocks and runs the same kernels on each block, so intermediates
stay in L1 and memory sees one read of x and one write of the result; blocks are spread over
the thread pool (plugin_src/kernels/fusion.cc).

A group is a maximal run of consecutive instructions that are elementwise (rules/
optable.ELEMENTWISE), broadcast a smaller operand, slice a larger one or concatenate
smaller ones, all producing N elements.
Its operands are the slots it reads but does not define; its results are the slots it
defines that anything after it (or the plan's results) still reads. The group's
instructions become the `body` sub-plan of the fusion instruction, unchanged, so every
kernel a fusion runs is an ordinary kernel with its ordinary error messages.

A row fusion also takes in reductions over trailing dims: softmax and layer norm become one
pass over their rows instead of one pass per reduction and per elementwise run. A
`reduce` (a combiner body) of the trailing dims of an N-element slot, C elements, fixes
the group's row length C (attribute `row`); the group may then hold per-row instructions:
elementwise ops on per-row slots (the reduce's results, R = N / C elements), broadcasts of
scalars to R elements, reshapes of per-row slots, and broadcasts of a per-row slot back to
N elements along its rows. fusion.cc runs such a group on blocks of whole rows.
"""

from __future__ import annotations

import functools
import heapq
import math

import numpy as np

from . import dtypes
from .idioms import COMPOSITES
from .plan import Instr, Plan, free_lists, region
from .optable import ELEMENTWISE

_ELEMENTWISE = ELEMENTWISE | COMPOSITES
# Data movement a fusion takes in, reading its operands whole rather than block by block
# (kernels/fusion.cc kBroadcast with a slice's strides, kConcat).
READS_WHOLE = frozenset(["slice", "concatenate"])


# Fewest elements of a run fused inside the cond/body of an interpreted `while` or a `case`
# branch: runs of at most codegen loops.MAX_ELEMENTS (256) are bookkeeping (counters,
# indices, a threefry split), which compiler/hoist.py moves out of the loop when
# invariant and codegen.compile_blocks compiles into straight-line native blocks.
MIN_REGION_ELEMENTS = 257


def fuse_plan(plan: Plan, min_elements: int = 0) -> Plan:
  """`plan` with its elementwise runs of at least `min_elements` fused, and those of at
  least MIN_REGION_ELEMENTS in the sub-plans of its interpreted `while` loops and `case`
  branches, at any depth: a loop body runs once per iteration, so its elementwise chains
  gain from fusion (and the code-generation tier, codegen.compile_fusions) as much as the
  top level's do. Generated loops (`jit_loop`) are left as they are: their code indexes
  the instructions of their cond and body by position."""
  plan = _interleaves(plan)
  plan = Plan(plan.slots, plan.params, plan.results, _chains_together(plan), plan.frees)
  slots, instrs = _duplicate_scalar_broadcasts(plan)
  instrs = _arg_reductions_as_row_folds(slots, instrs, plan.results)
  instrs = _full_reductions_in_rows(slots, instrs, plan.results)
  slots, instrs = _iotas_as_broadcasts(slots, instrs, plan.results)
  instrs = [_fuse_regions(i) for i in instrs]
  instrs = fuse(slots, instrs, plan.results, min_elements)
  return Plan(slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


def _interleaves(plan: Plan) -> Plan:
  """`plan` with each interleave written as JAX's associative_scan writes it,
  add(pad(a, v, interior 1), pad(b, v, low 1, interior 1)) along one dim of equal
  lengths, as a concatenate along a new dim after it: reshape(add(concatenate(a', b'),
  broadcast(v))) with a', b' a and b reshaped to a size-1 dim there. Each result element
  is one of a's or b's plus the padding value, as before (so -0.0 still becomes +0.0),
  and the concatenate joins a fusion with the add, reading a and b whole, where the pads
  were two passes writing twice the result (linear recurrences by associative_scan).
  Also `or` for pred (bitwise_or in JAX's _interleave)."""
  slots = list(plan.slots)
  producer = {s: i for i in plan.instrs for s in i.outs}
  readers: dict[int, int] = {}
  for i in plan.instrs:
    for s in i.ins:
      readers[s] = readers.get(s, 0) + 1
  replaced: dict[int, list[Instr]] = {}  # id of the add -> what replaces it
  dropped: set[int] = set()

  def interleave_dim(pa: Instr, pb: Instr) -> int | None:
    """The dim along which pads pa (even positions) and pb (odd) interleave, or None."""
    a, b, out = slots[pa.ins[0]][1], slots[pb.ins[0]][1], slots[pa.outs[0]][1]
    if a != b or slots[pb.outs[0]][1] != out or pa.ins[1] != pb.ins[1]:
      return None
    dims = [d for d, step in enumerate(pa.attrs["dst_step"]) if step != 1]
    if len(dims) != 1:
      return None
    d = dims[0]
    for pad, low in ((pa, 0), (pb, 1)):
      at = pad.attrs
      if (
        list(at["src_start"]) != [0] * len(a)
        or list(at["counts"]) != list(a)
        or list(at["dst_step"]) != [2 if k == d else 1 for k in range(len(a))]
        or list(at["dst_start"]) != [low if k == d else 0 for k in range(len(a))]
      ):
        return None
    if out[d] != 2 * a[d] or any(out[k] != a[k] for k in range(len(a)) if k != d):
      return None
    return d

  for instr in plan.instrs:
    if instr.op not in ("add", "or") or len(instr.ins) != 2 or instr.ins[0] == instr.ins[1]:
      continue
    pads = [producer.get(s) for s in instr.ins]
    if any(p is None or p.op != "pad" or readers.get(p.outs[0]) != 1 for p in pads):
      continue
    if any(p.outs[0] in plan.results for p in pads):
      continue
    for pa, pb in (pads, pads[::-1]):
      d = interleave_dim(pa, pb)
      if d is None:
        continue
      code, a_dims = slots[pa.ins[0]]
      if slots[instr.outs[0]][0] != code or tuple(slots[pa.ins[1]][1]) != ():
        break
      half = tuple(a_dims[: d + 1]) + (1,) + tuple(a_dims[d + 1 :])
      pair = tuple(a_dims[: d + 1]) + (2,) + tuple(a_dims[d + 1 :])

      def new(dims):
        slots.append((code, dims))
        return len(slots) - 1

      ra, rb, both, fill, summed = new(half), new(half), new(pair), new(pair), new(pair)
      loc = instr.loc
      replaced[id(instr)] = [
        Instr("reshape", [pa.ins[0]], [ra], {}, loc),
        Instr("reshape", [pb.ins[0]], [rb], {}, loc),
        Instr("concatenate", [ra, rb], [both], {"dim": d + 1}, loc),
        Instr("broadcast_in_dim", [pa.ins[1]], [fill], {"dims": []}, loc),
        Instr(instr.op, [both, fill], [summed], {}, loc),
        Instr("reshape", [summed], list(instr.outs), {}, loc),
      ]
      dropped.update((id(pa), id(pb)))
      break
  if not replaced:
    return plan
  instrs: list[Instr] = []
  for instr in plan.instrs:
    if id(instr) in dropped:
      continue
    instrs.extend(replaced.get(id(instr), [instr]))
  return Plan(slots, plan.params, plan.results, instrs, plan.frees)


# How deep a chain of same-size instructions _chains_together makes ahead of its reader,
# and how many readers of one instruction it moves up (AdamW's clipped gradient has two:
# the m and the v steps).
_PULL_DEPTH = 8
_MAX_PULLED_READERS = 2


def _chains_together(plan: Plan) -> list[Instr]:
  """plan.instrs with each fusible instruction moved up to just after the fusible one of
  its size that it reads, as soon as all its operands exist (a depth-first list schedule),
  so that fusion, which fuses runs of consecutive instructions, sees the chain whole. JAX
  traces a pytree update stage by stage (`jax.tree.map` of the clipped gradients, then of
  m, then of v, then of the parameters: each leaf's four steps 50 instructions apart), and
  XLA's fusion, which works on the graph, fuses each leaf's chain into one loop; fused
  stage by stage, each step of each leaf was a pass over memory of its own. Only fusible
  (pure elementwise) instructions move, and only earlier: every value is still made
  before it is read."""
  instrs = plan.instrs
  size = {id(i): _fusible_elements(plan.slots, i) for i in instrs}
  producer: dict[int, Instr] = {s: i for i in instrs for s in i.outs}
  readers: dict[int, list[Instr]] = {}
  for i in instrs:
    for s in set(i.ins):
      readers.setdefault(s, []).append(i)
  available = set(plan.params)
  emitted: set[int] = set()
  out: list[Instr] = []

  refused: set[int] = set()  # Slots found not makeable since the last emission.

  def pullable(s: int, n: int, depth: int = _PULL_DEPTH) -> bool:
    """Whether the not yet emitted value `s` can be made now for a reader of size n: by a
    fusible instruction of that size (or a scalar constant or broadcast of a scalar: JAX
    makes each stage's constants within the stage) whose own operands exist or can be made so, at most
    `depth` instructions deep (Adam's v = b2 * v + (1 - b2) * g * g is four)."""
    if s in available:
      return True
    p = producer.get(s)
    if p is None or s in refused or id(p) in emitted or depth == 0 or p.op in READS_WHOLE:
      return False
    scalar = (p.op == "broadcast_in_dim" and all(_elements(plan.slots, x) == 1 for x in p.ins)) or (
      p.op == "constant" and _elements(plan.slots, s) == 1
    )
    ok = (size[id(p)] == n or scalar) and all(pullable(x, n, depth - 1) for x in p.ins)
    if not ok and depth == _PULL_DEPTH:
      refused.add(s)
    return ok

  def follows(reader: Instr, made_by: Instr) -> bool:
    n = size[id(reader)]
    return (
      n is not None
      and n > 1
      and reader.op not in READS_WHOLE
      and size[id(made_by)] == n
      and all(pullable(s, n) for s in reader.ins)
    )

  def emit(instr: Instr) -> None:
    for s in instr.ins:  # what `follows` found can be made now, first
      if s not in available:
        emit(producer[s])
    emitted.add(id(instr))
    out.append(instr)
    available.update(instr.outs)
    refused.clear()

  stack: list[Instr] = []
  for first in instrs:
    if id(first) in emitted:
      continue
    stack.append(first)
    while stack:
      instr = stack.pop()
      if id(instr) in emitted:
        continue
      emit(instr)
      if size[id(instr)] is None:
        continue
      # Readers ready now, in their original order (the stack pops the first one first).
      ready = [
        r
        for s in instr.outs
        for r in readers.get(s, ())
        if id(r) not in emitted and follows(r, instr)
      ]
      seen: set[int] = set()
      ready = [r for r in ready if not (id(r) in seen or seen.add(id(r)))]
      # A value with many readers (K losses of one activation, each then reduced) would
      # pull them all into one fusion whose K results live at once; each reader pulled
      # is one more result alive until its own consumer runs.
      stack.extend(reversed(ready[:_MAX_PULLED_READERS]))
  return out


def _iotas_as_broadcasts(slots: list, instrs: list[Instr], results) -> tuple[list, list[Instr]]:
  """Each iota of rank > 1 along dim d (two or more dims above 1) as the broadcast of the
  1-D iota of d's length, made where the iota was as a [1, .., n, .., 1] array: each
  elementwise reader gets a full-rank broadcast of its own just before it, which its
  fusion reads block by block (kernels/fusion.cc), as XLA fuses an iota into its
  consumers' loops. Written out whole, the iotas of a mask were most of its cost:
  jnp.tril of (2000, 2000) f32 wrote and read two int32 iotas of 16 MB, 4.8x XLA:CPU's
  time. Readers of other kinds share one full broadcast made where the iota was; an iota
  that is a result stays."""
  iotas = {
    i.outs[0]: i
    for i in instrs
    if i.op == "iota" and i.outs[0] not in results and sum(n != 1 for n in slots[i.outs[0]][1]) >= 2
  }
  if not iotas:
    return slots, instrs
  slots = list(slots)
  other_readers = {s for i in instrs if i.op not in _ELEMENTWISE for s in i.ins if s in iotas}
  small: dict[int, int] = {}  # iota slot -> its [1, .., n, .., 1] form
  out: list[Instr] = []

  def new_slot(code: int, dims: tuple) -> int:
    slots.append((code, tuple(dims)))
    return len(slots) - 1

  for instr in instrs:
    if instr.op == "iota" and instr.outs[0] in iotas:
      s = instr.outs[0]
      code, dims = slots[s]
      d = instr.attrs["dim"]
      line = new_slot(code, (dims[d],))
      out.append(Instr("iota", [], [line], {"dim": 0}, instr.loc))
      small[s] = new_slot(code, tuple(n if k == d else 1 for k, n in enumerate(dims)))
      out.append(Instr("broadcast_in_dim", [line], [small[s]], {"dims": [d]}, instr.loc))
      if s in other_readers:
        out.append(
          Instr("broadcast_in_dim", [small[s]], [s], {"dims": list(range(len(dims)))}, instr.loc)
        )
      continue
    if instr.op in _ELEMENTWISE and any(s in small for s in instr.ins):
      ins = list(instr.ins)
      for k, s in enumerate(ins):
        if s in small:
          full = new_slot(*slots[s])
          rank = len(slots[s][1])
          out.append(
            Instr("broadcast_in_dim", [small[s]], [full], {"dims": list(range(rank))}, instr.loc)
          )
          ins[k] = full
      instr = Instr(instr.op, ins, instr.outs, instr.attrs, instr.loc)
    out.append(instr)
  return slots, out


def _duplicate_scalar_broadcasts(plan: Plan) -> tuple[list, list[Instr]]:
  """Each elementwise reader of a broadcast of a one-element value gets a copy of the
  broadcast of its own, just before it, as XLA duplicates cheap producers into each
  fusion that reads them. CSE merges the broadcasts of one constant to one shape (the
  learning rate of every equally shaped leaf of an optimizer update); shared, the first
  fusion wrote the broadcast out in full for the next one to read. A copy inside each
  fusion is never written (fusion.cc runs it once per thread). A broadcast with one
  reader moves next to it the same way: made where JAX made it, it joined an earlier
  fusion, which wrote it out for its reader across a kernel that ends the run
  (jax.random.normal: erf_inv's 22 coefficients, 4 MiB each, written by the hash's
  fusion and read across its bitcast_convert; 22 -> 8.5 ms for 2^20 floats). Other
  readers keep the original, which stays only where one of them reads it."""
  readers: dict[int, int] = {}
  scalar_broadcasts: dict[int, Instr] = {}
  for instr in plan.instrs:
    for s in instr.ins:
      readers[s] = readers.get(s, 0) + 1
    if (
      instr.op == "broadcast_in_dim"
      and len(instr.outs) == 1
      and _elements(plan.slots, instr.ins[0]) == 1
      and _elements(plan.slots, instr.outs[0]) > 1
    ):
      scalar_broadcasts[instr.outs[0]] = instr
  shared = {s for s in scalar_broadcasts if readers.get(s, 0) >= 1 and s not in plan.results}
  if not shared:
    return plan.slots, plan.instrs
  slots = list(plan.slots)
  out: list[Instr] = []
  for instr in plan.instrs:
    if instr.op in _ELEMENTWISE and any(s in shared for s in instr.ins):
      ins = list(instr.ins)
      for k, s in enumerate(ins):
        if s in shared:
          b = scalar_broadcasts[s]
          slots.append(slots[s])
          out.append(Instr(b.op, list(b.ins), [len(slots) - 1], b.attrs, b.loc))
          ins[k] = len(slots) - 1
      instr = Instr(instr.op, ins, instr.outs, instr.attrs, instr.loc)
    out.append(instr)
  # The originals nothing reads any more go.
  read = {s for i in out for s in i.ins} | set(plan.results)
  return slots, [i for i in out if not (i.outs and i.outs[0] in shared and i.outs[0] not in read)]


def _new_slot(slots: list, code: int, dims) -> int:
  """Appends a slot of `code` and `dims` to `slots`; its index."""
  slots.append((code, tuple(dims)))
  return len(slots) - 1


def _scalar_constant(slots, producer: dict, slot: int) -> np.ndarray | None:
  """The one element of `slot` if a `constant` instruction makes it (shape (1,)); else None."""
  maker = producer.get(slot)
  if maker is None or maker.op != "constant" or math.prod(slots[slot][1]) != 1:
    return None
  return np.frombuffer(maker.attrs["data"], dtypes.by_code(slots[slot][0]).numpy)[:1]


def _arg_reductions_as_row_folds(
  slots: list, instrs: list[Instr], results: list[int]
) -> list[Instr]:
  """argmin/argmax of the last dim of a fusible value, whose values result nothing reads
  (jnp.argmin/argmax), as two row reductions a row fusion holds with the value's producers,
  as XLA's reduction fusion takes an argmin: the distance matrix of a k-means step is then
  never written and read back. `slots` grows by the new values.

  For x of rows of C elements (index operand the iota along them, init (identity, 0)):

      m = reduce(x, identity, minimum)          # maximum for argmax; NaN-propagating
      index = reduce(select(x == m | x != x, iota, C), C, minimum)

  is the argmin kernel's result (kernels/reduce/reduce_general.cc, the sequential fold of
  jnp.argmin's body): the smallest index at the extremum, and if the row holds a NaN, m
  is NaN and the first NaN's index. With init (identity, 0) a row of identities gives 0
  either way. The values result (m) differs from the fold's only in the sign of a zero,
  so it must be unread. Any other argmin keeps its own kernel, which folds in one pass.
  """
  producer = {o: i for i in instrs for o in i.outs}
  read = {s for i in instrs for s in i.ins} | set(results)

  new_slot = functools.partial(_new_slot, slots)
  out: list[Instr] = []
  for instr in instrs:
    if instr.op not in ("argmin", "argmax") or len(instr.ins) != 4 or len(instr.outs) != 2:
      out.append(instr)
      continue
    x, index, init_x, init_index = instr.ins
    code, xdims = slots[x]
    icode = slots[index][0]
    rank, c = len(xdims), xdims[-1] if xdims else 0
    numpy = dtypes.by_code(code).numpy
    kind = numpy.kind
    if kind == "f":
      identity = np.inf if instr.op == "argmin" else -np.inf
    elif kind in "iu":
      info = np.iinfo(numpy)
      identity = info.max if instr.op == "argmin" else info.min
    else:
      identity = None
    iota = producer.get(index)
    index_dims = instr.attrs.get("index_dims")
    small = index_dims == [rank - 1] and slots[index][1] == (c,)
    init, init_i = (
      _scalar_constant(slots, producer, init_x),
      _scalar_constant(slots, producer, init_index),
    )
    maker = producer.get(x)
    if (
      identity is None
      or (kind == "f" and numpy.itemsize < 4)  # f16/bf16 arrive widened (legalize.py)
      or list(instr.attrs["dims"]) != [rank - 1]
      or not 2 <= c <= _MAX_ROW
      or math.prod(xdims) // c < 2
      or instr.outs[0] in read
      or iota is None
      or iota.op != "iota"
      or not (small or (index_dims is None and iota.attrs["dim"] == rank - 1))
      or init is None
      or init_i is None
      or not (init[0] == identity and init_i[0] == 0)
      or c > np.iinfo(dtypes.by_code(icode).numpy).max
      or maker is None
      or _fusible_elements(slots, maker) is None
    ):
      out.append(instr)
      continue
    keep = list(xdims[:-1])
    loc, pred = instr.loc, dtypes.by_name("pred").code
    compare_type = {"f": "FLOAT", "i": "SIGNED", "u": "UNSIGNED"}[kind]
    body = "minimum" if instr.op == "argmin" else "maximum"
    m, m_full, match = new_slot(code, keep), new_slot(code, xdims), new_slot(pred, xdims)
    out += [
      Instr("reduce", [x, init_x], [m], {"dims": [rank - 1], "body": body}, loc),
      Instr("broadcast_in_dim", [m], [m_full], {"dims": list(range(rank - 1))}, loc),
      Instr(
        "compare", [x, m_full], [match], {"direction": "EQ", "compare_type": compare_type}, loc
      ),
    ]
    if kind == "f":  # m is NaN exactly when the row holds one: then match the NaNs.
      nan, either = new_slot(pred, xdims), new_slot(pred, xdims)
      out += [
        Instr("compare", [x, x], [nan], {"direction": "NE", "compare_type": "FLOAT"}, loc),
        Instr("or", [match, nan], [either], {}, loc),
      ]
      match = either
    columns = index
    if small:
      columns = new_slot(icode, xdims)
      out.append(Instr("broadcast_in_dim", [index], [columns], {"dims": [rank - 1]}, loc))
    past, past_full, chosen = new_slot(icode, ()), new_slot(icode, xdims), new_slot(icode, xdims)
    data = np.array([c], dtypes.by_code(icode).numpy).tobytes()
    out += [
      Instr("constant", [], [past], {"data": data}, loc),
      Instr("broadcast_in_dim", [past], [past_full], {"dims": []}, loc),
      Instr("select", [match, columns, past_full], [chosen], {}, loc),
      Instr(
        "reduce", [chosen, past], [instr.outs[1]], {"dims": [rank - 1], "body": "minimum"}, loc
      ),
    ]
  return out


# Full reductions (every dim, to one element) of at least this many elements become row
# reductions: below it the value a producer writes stays in cache for the reduce kernel,
# and the second reduce costs what the fusion saves (sums of 8K f32 measured even).
_FULL_MIN_ELEMENTS = 16384
# Of any 1- or 2-byte dtype: the fusion and the second reduce cost more than the value's
# write and read below about a million (an int8 max of 48K: 9 -> 17 us, of 3^12 10-17%
# slower; from 1M faster).
_FULL_MIN_NARROW = 1 << 20
# The row length of a reshaped chain (`_full_row`): at most this (fusion.cc's blocks of
# one row keep a chain's intermediates in L2; N / C rows spread over the pool) and at
# least _FULL_MIN_ROW (shorter rows leave too many partial results).
_FULL_MAX_ROW = 2048
# Rows of the operand's own trailing dims (no reshape: broadcasts along them, other
# readers and sibling reductions fuse as in any row fusion) may be longer.
_FULL_MAX_DIMS_ROW = 4096
_FULL_MIN_ROW = 256


def _full_row(n: int) -> int:
  """The row length of a full reduction of n elements: the longest divisor of n in
  [_FULL_MIN_ROW, min(_FULL_MAX_ROW, n // 2)], a multiple of 8 where one is (rows start on
  whole vectors: f64 rows of 1875 cost 1.15x the unfused pair, rows of 2000 less); 0 if
  none."""
  lengths = [d for d in range(min(_FULL_MAX_ROW, n // 2), _FULL_MIN_ROW - 1, -1) if n % d == 0]
  return next((d for d in lengths if d % 8 == 0), lengths[0] if lengths else 0)


def _identity(body: str, numpy: np.dtype) -> list:
  """The values v with `v op x == x` for every x of the reduce body `body` on `numpy`."""
  kind = numpy.kind
  if body in ("add", "or"):
    return [0]
  if body == "multiply":
    return [1]
  if body == "and":  # every bit set
    return [True] if kind == "b" else [np.iinfo(numpy).max if kind == "u" else -1]
  if kind == "f":
    return [-np.inf] if body == "maximum" else [np.inf]
  if kind in "iu":
    info = np.iinfo(numpy)
    return [info.min] if body == "maximum" else [info.max]
  return [True] if body == "minimum" else [False]


def _full_reductions_in_rows(slots: list, instrs: list[Instr], results: list[int]) -> list[Instr]:
  """Full reductions of a value a fusible instruction makes, as a row reduction that
  joins the producer's row fusion and a reduction of the rows' results, as XLA:CPU's
  reduction fusion takes `jnp.sum(g * g)`: the value is never written and read back.
  `slots` grows by the new values.

  For `s = reduce(x, init)` over every dim of x's N elements, init the body's identity:

  * where x's trailing dims hold [_FULL_MIN_ROW, _FULL_MAX_DIMS_ROW] elements and its
    leading ones at least two, `p = reduce(x, init)` over the trailing dims, then
    `s = reduce(p, init)`: x and its producers stay as they are;
  * else, for x made by an elementwise chain (scalar broadcasts included) whose values
    nothing else reads, with C the row length `_full_row` picks (B = N / C >= 2 rows):

        x'[B, C] = the chain, on its operands reshaped to [B, C] (aliases, no copy)
        p[B] = reduce(x', init) over dim 1     # a row fusion with the chain
        s = reduce(p, init)                    # B partial results

  The sum is blocked (each row folded as the reduce kernel folds a run, then the rows'
  results), as accurate as the unfused kernel's blocks of 32K (kernels/reduce/reduce.cc);
  the bits can differ from it in the last places, and a max or min of zeros in the sign
  of the zero. A chain operand made by a fusible instruction outside the chain keeps the
  program as it was: reshaped, it would be written out instead of fused. A trailing-dims
  row reduction that `fuse` does not put beside its producer (more than _LOOKAHEAD
  instructions after another reader of it) runs as two reduce kernels.
  """
  producer = {o: i for i in instrs for o in i.outs}
  readers: dict[int, list[Instr]] = {}
  for instr in instrs:
    for s in set(instr.ins):
      readers.setdefault(s, []).append(instr)
  kept = set(results)
  position = {id(instr): k for k, instr in enumerate(instrs)}
  new_slot = functools.partial(_new_slot, slots)

  def scalar_broadcast(instr: Instr) -> bool:
    return instr.op == "broadcast_in_dim" and _elements(slots, instr.ins[0]) == 1

  def chain_of(reduce: Instr, n: int) -> list[Instr] | None:
    """The chain ending at the reduce's operand, in no order; None if there is none.
    Values are taken latest made first, so every reader of one inside the chain (x in
    `select(x != x, 0, x)`: jnp.nansum) has joined before its readers are checked."""
    chain = {id(reduce): reduce}
    todo, seen = [(-position[id(reduce)], reduce.ins[0])], set()
    while todo:
      _, s = heapq.heappop(todo)
      maker = producer.get(s)
      if s in seen or maker is None or _fusible_elements(slots, maker) is None:
        continue  # Taken already, or a leaf: reshaped where the chain reads it.
      seen.add(s)
      if not (maker.op in _ELEMENTWISE or scalar_broadcast(maker)) or _elements(slots, s) != n:
        return None
      if s in kept or any(id(r) not in chain for r in readers[s]):
        return None
      chain[id(maker)] = maker
      for t in maker.ins:
        if _elements(slots, t) == n and t in producer:
          heapq.heappush(todo, (-position[id(producer[t])], t))
    del chain[id(reduce)]
    return list(chain.values()) or None

  rewrites: dict[int, list[Instr]] = {}  # id(instr) -> what replaces it
  for instr in instrs:
    if instr.op != "reduce" or len(instr.ins) != 2 or instr.attrs.get("body") not in _ROW_REDUCERS:
      continue
    x, init = instr.ins
    code, xdims = slots[x]
    n = math.prod(xdims)
    if sorted(instr.attrs["dims"]) != list(range(len(xdims))) or n < (
      _FULL_MIN_ELEMENTS if dtypes.by_code(code).numpy.itemsize >= 4 else _FULL_MIN_NARROW
    ):
      continue
    # init joins every row's fold and then the partials' fold: only an identity keeps
    # the result (a sum's init 5 would count B + 1 times).
    value = _scalar_constant(slots, producer, init)
    identities = _identity(instr.attrs["body"], np.dtype(dtypes.by_code(code).numpy))
    if value is None or value.size != 1 or not any(value[0] == v for v in identities):
      continue
    made_by = producer.get(x)
    if made_by is None or _fusible_elements(slots, made_by) is None:
      continue
    k = next(
      (
        k
        for k in range(1, len(xdims))
        if _FULL_MIN_ROW <= math.prod(xdims[k:]) <= _FULL_MAX_DIMS_ROW and math.prod(xdims[:k]) >= 2
      ),
      None,
    )
    if k is not None:  # Rows of x's own trailing dims: x and its producers stay as they are.
      partial = new_slot(code, xdims[:k])
      rank = len(xdims)
      rewrites[id(instr)] = [
        Instr(
          "reduce", [x, init], [partial], {**instr.attrs, "dims": list(range(k, rank))}, instr.loc
        ),
        Instr(
          "reduce",
          [partial, init],
          list(instr.outs),
          {**instr.attrs, "dims": list(range(k))},
          instr.loc,
        ),
      ]
      continue
    c = _full_row(n)
    chain = chain_of(instr, n) if c else None
    if chain is None or any(id(i) in rewrites for i in chain):
      continue
    chain.sort(key=lambda i: position[id(i)])  # Leaves reshaped before their first reader.
    b = n // c
    renamed: dict[int, int] = {}
    for member in chain:
      renamed[member.outs[0]] = new_slot(slots[member.outs[0]][0], (b, c))
    done_leaves: set[int] = set()
    for member in chain:
      new_ins, before = [], []
      for s in member.ins:
        if s in renamed:
          new_ins.append(renamed[s])
        elif _elements(slots, s) == n:  # A leaf: a reshape aliases it, no copy.
          if s not in done_leaves:
            renamed[s] = new_slot(slots[s][0], (b, c))
            before.append(Instr("reshape", [s], [renamed[s]], {}, member.loc))
            done_leaves.add(s)
          new_ins.append(renamed[s])
        elif member.op == "broadcast_in_dim" and slots[s][1]:  # dims [] needs rank 0
          scalar = new_slot(slots[s][0], ())
          before.append(Instr("reshape", [s], [scalar], {}, member.loc))
          new_ins.append(scalar)
        else:
          new_ins.append(s)
      attrs = {**member.attrs, "dims": []} if member.op == "broadcast_in_dim" else member.attrs
      rewrites[id(member)] = before + [
        Instr(member.op, new_ins, [renamed[member.outs[0]]], attrs, member.loc)
      ]
    partial = new_slot(code, (b,))
    rewrites[id(instr)] = [
      Instr("reduce", [renamed[x], init], [partial], {**instr.attrs, "dims": [1]}, instr.loc),
      Instr("reduce", [partial, init], list(instr.outs), {**instr.attrs, "dims": [0]}, instr.loc),
    ]
  if not rewrites:
    return instrs
  return [new for instr in instrs for new in rewrites.get(id(instr), [instr])]


def _fuse_regions(instr: Instr) -> Instr:
  if instr.op not in ("while", "case"):
    return instr
  attrs = {
    k: fuse_plan(v, MIN_REGION_ELEMENTS) if isinstance(v, Plan) else v
    for k, v in instr.attrs.items()
  }
  return Instr(instr.op, instr.ins, instr.outs, attrs, instr.loc)


class _Run:
  """The run being grown: its instructions, what they define, and its shape.
  `one_row`: ids of the reductions of a single row that may join (_one_row_reductions)."""

  def __init__(self, one_row: frozenset[int] = frozenset()) -> None:
    self.one_row = one_row
    self.instrs: list[Instr] = []
    self.defined: set[int] = set()
    self.per_row: set[int] = set()  # Slots with one element per row (row fusions).
    self.elements = -1  # N
    self.row = 1  # C; 1 until a row reduction joins.

  def add(self, slots, instr: Instr, elements: int, row: int) -> None:
    self.instrs.append(instr)
    self.defined.update(instr.outs)
    self.elements, self.row = elements, row
    if row > 1 and _elements(slots, instr.outs[0]) == elements // row:
      self.per_row.update(instr.outs)

  def clear(self) -> None:
    self.__init__(self.one_row)


def fuse(
  slots: list[tuple[int, tuple[int, ...]]],
  instrs: list[Instr],
  results: list[int],
  min_elements: int = 0,
) -> list[Instr]:
  """Returns `instrs` with each fusible run of two or more instructions (of at least
  `min_elements` elements) replaced.

  An instruction that interrupts a run without reading anything the run defines (the
  per-row statistics of a layer norm, computed between two of its full-size ops) moves
  before the run, so the run goes on; the moved instructions are fused among themselves.
  """
  out: list[Instr] = []
  run = _Run(_one_row_reductions(slots, instrs))
  moved: list[Instr] = []  # Met during the run, independent of it: run before it.
  taken: set[int] = set()  # Indices of later instructions already pulled into a run.

  def flush(next_index: int) -> None:
    rest = [x for k, x in enumerate(instrs[next_index:], next_index) if k not in taken]
    if moved:  # What the run and everything after it read is still needed after them.
      later = results + [s for i in run.instrs + rest for s in i.ins]
      moved[:] = fuse(slots, moved, later, min_elements)
    if run.elements >= min_elements and (len(run.instrs) >= 2 or _alone_but_parallel(run)):
      out.extend(moved)
      fused = _fusion(slots, run, rest, results)
      if fused is not None:  # None: nothing reads what the run computes (dead code).
        out.append(fused)
    elif len(run.instrs) >= 2:  # A run under min_elements: the run's instructions may
      out.extend(moved + run.instrs)  # read what moved, never the other way round.
    else:  # Nothing moved past a single instruction: keep the original order.
      out.extend(run.instrs + moved)
    run.clear()
    moved.clear()

  for i, instr in enumerate(instrs):
    if i in taken:
      continue
    shape = _joins(slots, run, instr)
    if run.instrs and shape is not None:
      run.add(slots, instr, *shape)
      continue
    n = _fusible_elements(slots, instr)
    # A bigger fusible instruction ends a run rather than moving: big runs matter more.
    if run.instrs and not run.defined.intersection(instr.ins) and (n is None or n < run.elements):
      moved.append(instr)
      continue
    if run.instrs and run.defined.intersection(instr.ins):
      _pull_sibling_reductions(slots, run, instrs, i, taken, moved)
    flush(i)
    shape = _joins(slots, run, instr)
    if shape is None:
      out.append(instr)
    else:
      run.add(slots, instr, *shape)
  flush(len(instrs))
  return out


# How far past the instruction that ends a run a sibling reduction is looked for.
_LOOKAHEAD = 16


def _pull_sibling_reductions(
  slots, run: _Run, instrs: list[Instr], i: int, taken: set[int], moved: list[Instr]
) -> None:
  """Pulls into `run` the reductions of its values that come after instrs[i] (the first
  instruction that reads a run value but cannot join), when nothing between defines their
  operands: XLA's multi-output fusion of a producer with a reduction of its result. With
  `k = exp(...)` read by a dot and by `k.sum(-1)`, the sum becomes part of the fusion
  that makes k, and k is not read again from memory for it. A constant between (the
  reduction's init value) moves before the run with it. Indices pulled go into `taken`."""
  blocking: set[int] = set()  # Slots defined after the run ends, by what stays in place.
  constants: dict[int, int] = {}  # Slot -> index of the constant instruction defining it.
  for k in range(i, min(len(instrs), i + _LOOKAHEAD)):
    if k in taken:
      continue
    x = instrs[k]
    if k > i and x.op == "reduce" and run.defined.intersection(x.ins):
      needs = [s for s in x.ins if s in blocking]
      if all(s in constants for s in needs) and _joins(slots, run, x) is not None:
        for s in needs:
          c = constants.pop(s)
          taken.add(c)
          moved.append(instrs[c])
          blocking.discard(s)
        run.add(slots, x, *_joins(slots, run, x))
        taken.add(k)
        continue
    if x.op == "constant" and not x.ins and k > i:
      constants.update((s, k) for s in x.outs)
    blocking.update(x.outs)


# Elements from which a lone elementwise kernel is worth a fusion of one: unfused it runs
# on one thread, fused its blocks spread over the pool (runtime/thread_pool.h's grain).
_PARALLEL_ELEMENTS = 64 * 1024


def _alone_but_parallel(run: _Run) -> bool:
  """Whether a run of one instruction still becomes a fusion.

  A composite (idioms.py) always does; any elementwise kernel does from
  _PARALLEL_ELEMENTS on (`jnp.exp` of 4M f32: 1.22 ms on one thread, XLA:CPU 0.90 ms on two).
  """
  if len(run.instrs) != 1 or run.instrs[0].op not in _ELEMENTWISE:
    return False
  return run.instrs[0].op in COMPOSITES or run.elements >= _PARALLEL_ELEMENTS


# Reduce bodies with a row fold in C++ (reduce.h), and the longest row a fusion holds: a
# block is at least one row, and its f32 intermediates (128 KB each) should stay in L2;
# and a row folds in one run, which the unfused reduce kernel does up to its block of 32K
# elements (reduce.cc kBlock; longer runs cascade blocks), so the bits stay the same. A
# vocabulary of 32000 (logsumexp, cross-entropy of a language model) is one row fusion:
# two passes over the logits, the exponentials never written.
_ROW_REDUCERS = frozenset(["add", "multiply", "maximum", "minimum", "and", "or"])
_MAX_ROW = 32768


def _joins(slots, run: _Run, instr: Instr) -> tuple[int, int] | None:
  """The run's (N, C) with `instr` in it, or None if `instr` cannot join `run`."""
  n = _fusible_elements(slots, instr)
  if n is not None and (not run.instrs or n == run.elements):
    # Full size. A broadcast of a per-row slot must fill rows (fusion.cc writes those
    # from the block's own rows); a slice or concatenate reads whole operands, never
    # values the run computes block by block.
    if instr.ins and instr.ins[0] in run.per_row and not _fills_rows(slots, instr, run.row):
      return None
    if instr.op in READS_WHOLE and run.defined.intersection(instr.ins):
      return None
    return n, run.row
  reduced = _row_reduce(slots, instr)
  if reduced is not None and reduced[0] == reduced[1] and id(instr) not in run.one_row:
    reduced = None
  if reduced is not None:
    n, row = reduced
    if not run.instrs or (n == run.elements and run.row in (1, row)):
      return n, row
    return None
  if (
    run.row == 1
    or len(instr.outs) != 1
    or _elements(slots, instr.outs[0]) != run.elements // run.row
  ):
    return None
  # Per row.
  ins_per_row = all(s in run.per_row or _elements(slots, s) == 1 for s in instr.ins)
  if instr.op in _ELEMENTWISE and ins_per_row:
    return run.elements, run.row
  # A reshape copies a per-row value (fusion.cc); in a fusion of one row a scalar operand
  # has the one element a per-row value has, but is not one.
  if (
    instr.op in ("broadcast_in_dim", "reshape")
    and ins_per_row
    and (instr.ins[0] not in run.per_row or _keeps_order(slots, instr))
    and (instr.op != "reshape" or instr.ins[0] in run.per_row)
  ):
    return run.elements, run.row
  return None


def _row_reduce(slots, instr: Instr) -> tuple[int, int] | None:
  """(N, C) for a combiner reduce of its operand's trailing dims (C elements) that a row
  fusion can hold; None otherwise."""
  if (
    instr.op != "reduce"
    or len(instr.ins) != 2
    or len(instr.outs) != 1
    or instr.attrs.get("body") not in _ROW_REDUCERS
    or _elements(slots, instr.ins[1]) != 1
  ):
    return None
  dims_in = slots[instr.ins[0]][1]
  reduced = list(instr.attrs["dims"])
  if not reduced or reduced != list(range(len(dims_in) - len(reduced), len(dims_in))):
    return None
  n, row = math.prod(dims_in), math.prod(dims_in[d] for d in reduced)
  return (n, row) if 2 <= row <= _MAX_ROW else None


def _one_row_reductions(slots, instrs: list[Instr]) -> frozenset[int]:
  """Ids of the row reductions of one row (N = C: a batch-1 layer norm's (1, 512), the
  softmax of a vector) whose result, through one-element values only, reaches an
  instruction of N elements: the statistic is broadcast back over its row, so the
  producer, the reduction and the consumer make one pass as a row fusion of one row,
  instead of a fusion, a reduce kernel, a fusion of scalars and another fusion. A
  reduction whose result only ever feeds scalars (a mean squared error's final sum of the
  rows' partial sums, `jnp.sum(x)` returned) stays a reduce kernel, or becomes two by
  _full_reductions_in_rows."""
  readers: dict[int, list[Instr]] = {}
  for instr in instrs:
    for s in set(instr.ins):
      readers.setdefault(s, []).append(instr)
  found = set()
  for instr in instrs:
    reduced = _row_reduce(slots, instr)
    if reduced is None or reduced[0] != reduced[1]:
      continue
    todo, seen = [instr.outs[0]], set()
    while todo and id(instr) not in found:
      for reader in readers.get(todo.pop(), []):
        made = [_elements(slots, o) for o in reader.outs]
        if reduced[0] in made:
          found.add(id(instr))
        elif made == [1] and reader.outs[0] not in seen:
          seen.add(reader.outs[0])
          todo.append(reader.outs[0])
  return frozenset(found)


def _mapped_dims(slots, instr: Instr) -> list[tuple[int, int]] | None:
  """For a broadcast_in_dim, the (operand size, result dim) pairs of its non-unit operand
  dims; None for other ops."""
  if instr.op != "broadcast_in_dim":
    return None
  in_dims = slots[instr.ins[0]][1]
  return [(size, d) for size, d in zip(in_dims, instr.attrs["dims"]) if size != 1]


def _fills_rows(slots, instr: Instr, row: int) -> bool:
  """Whether a broadcast to N elements gives element i the operand's element i // row: the
  operand's dims are the result's leading dims, in order, and the rest is broadcast."""
  mapped = _mapped_dims(slots, instr)
  if mapped is None:
    return False
  out_dims = slots[instr.outs[0]][1]
  leading = [d for d in range(len(out_dims)) if out_dims[d] != 1]
  k = len(mapped)
  return [d for _, d in mapped] == leading[:k] and math.prod(
    out_dims[d] for d in leading[k:]
  ) == row


def _keeps_order(slots, instr: Instr) -> bool:
  """Whether a reshape or same-size broadcast copies elements in row-major order."""
  mapped = _mapped_dims(slots, instr)
  return mapped is None or [d for _, d in mapped] == sorted(d for _, d in mapped)


def _elements(slots, slot: int) -> int:
  return math.prod(slots[slot][1])


def _fusible_elements(slots, instr: Instr) -> int | None:
  """The element count a fusible instruction produces; None if it cannot be fused."""
  if len(instr.outs) != 1:
    return None
  n = _elements(slots, instr.outs[0])
  if instr.op in READS_WHOLE:
    # Of operands the fusion reads in place (a slice's larger, a concatenate's smaller):
    # fusion.cc writes each block of the result from them, as XLA's loop fusion takes
    # slices and concatenates into their consumers, so the value is never written whole.
    sizes = [_elements(slots, s) for s in instr.ins]
    bigger = instr.op == "slice"
    return n if n > 1 and all(m > n if bigger else m < n for m in sizes) else None
  if instr.op == "broadcast_in_dim":
    # Of a smaller operand (a scalar, a row, a column...): fusion.cc writes each block's
    # slice. Same-size broadcasts are reshapes or transposes, which do not tile.
    return n if _elements(slots, instr.ins[0]) < n or n == 1 else None
  if instr.op not in _ELEMENTWISE or n <= 1:
    return None
  # select's predicate and clamp's bounds may be scalars; everything else is full size.
  if any(_elements(slots, s) not in (1, n) for s in instr.ins):
    return None
  return n


def fusion_elements(body: Plan) -> int:
  """N of a fusion body: its largest slot, leaving out operands that only slices read
  (those may be larger: the fusion reads the slice's elements of them in place)."""
  sliced_only = set(body.params)
  for instr in body.instrs:
    sliced_only.difference_update(instr.ins[1:] if instr.op == "slice" else instr.ins)
  return max(
    (math.prod(dims) for k, (_, dims) in enumerate(body.slots) if k not in sliced_only),
    default=0,
  )


def _fusion(slots, run: _Run, rest: list[Instr], results: list[int]) -> Instr | None:
  """The fusion instruction of `run`; None if no later instruction or result reads any of
  its values (a fusion must have results: kernels/fusion.cc). Dead values reach the plan
  when the compiler drops their only user, e.g. an inspect_array_sharding."""
  group = run.instrs
  defined = [s for instr in group for s in instr.outs]
  read_later = {s for instr in rest for s in instr.ins} | set(results)
  operands: list[int] = []
  for instr in group:
    for s in instr.ins:
      if s not in defined and s not in operands:
        operands.append(s)
  outputs = [s for s in defined if s in read_later]
  if not outputs:
    return None
  body = region(slots, operands, outputs, group)
  names = ", ".join(i.op for i in group)
  kind = "fusion" if run.row == 1 else f"row fusion (rows of {run.row})"
  return Instr(
    "fusion",
    operands,
    outputs,
    {"body": body, "row": run.row},
    f"{kind} of [{names}] ending at {group[-1].loc}",
  )
