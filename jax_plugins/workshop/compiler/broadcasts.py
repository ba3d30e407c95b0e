"""Reductions of broadcasts, computed without building the broadcast.

`jnp.broadcast_to(s, (2**16, 2**16 + 1)).sum()` lowers to broadcast_in_dim then reduce:
run as written, the plan allocates the 17 GB broadcast. XLA:CPU fuses the broadcast into
the reduction and never builds it; here the plan is rewritten (before CSE and fusion,
after legalize) so that the reduction reads the broadcast's small source instead:

  reduce(broadcast_in_dim(src, map), init, dims D, body)
    max/min/and/or: body(init, broadcast(reduce(src over the mapped dims of D)))
    add:            init + k * broadcast(reduce(src over the mapped dims of D, 0))

with k the number of elements of the dims of D that the broadcast adds. A sum of k equal
terms is k times the term: exact for integers (modular, as the repeated addition wraps)
and at least as accurate for floats as any order of the k additions XLA may choose. Other
bodies (multiply, general bodies) are left as they are.

The operand may reach the reduce through elementwise ops (convert, compare, select, ...)
whose operands are all broadcasts or scalars: f(broadcast(a, m1), broadcast(b, m2)) is
broadcast(f(a', b'), m1 | m2) with a', b' broadcast only to the union of the mapped
dims, so `(broadcast_to(v, big) > 0).astype(int).sum()` also stays small; a reshape that
only inserts or removes size-1 dims (keepdims: var, std, tile, repeat) keeps the form.
An iota of rank > 1 is the broadcast of a 1-D iota along its dim. argmax/argmin along a
dim the broadcast maps (index operand: the iota along it) is the source's, broadcast.
The rewrite is made only where the source is smaller than the broadcast; dead
instructions it leaves are dropped. Any other argmax/argmin along one dim, whose index
operand is the iota along it, reads that dim's 1-D iota instead (attribute `index_dims`).
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .optable import ELEMENTWISE, PURE, SPECS
from .plan import Instr, Plan, free_lists

_IDEMPOTENT = {"maximum", "minimum", "and", "or"}


def reduce_broadcasts(plan: Plan) -> Plan:
  """`plan` with every reduce (and argmax/argmin) of a possibly elementwise-transformed
  broadcast or iota computed from the broadcast's source; the plan itself if none."""
  if not any(i.op in ("reduce", "argmax", "argmin") for i in plan.instrs):
    return plan
  return _Rewriter(plan).run()


class _Rewriter:
  def __init__(self, plan: Plan):
    self.plan = plan
    self.slots = list(plan.slots)
    self.producer = {out: instr for instr in plan.instrs for out in instr.outs}
    self.forms: dict[int, tuple[int, list[int]] | None] = {}
    self.instrs: list[Instr] = []
    self.changed = False

  def run(self) -> Plan:
    for instr in self.plan.instrs:
      if instr.op == "reduce" and self._rewrite_reduce(instr):
        continue
      if instr.op in ("argmax", "argmin") and (
        self._rewrite_argmax(instr) or self._small_index(instr)
      ):
        continue
      self.instrs.append(instr)
    if not self.changed:
      return self.plan
    instrs = _drop_dead(self.instrs, self.plan.results)
    return Plan(
      self.slots, self.plan.params, self.plan.results, instrs, free_lists(instrs, self.plan.results)
    )

  # -- building blocks -----------------------------------------------------------------

  def _slot(self, code: int, dims) -> int:
    self.slots.append((code, tuple(int(d) for d in dims)))
    return len(self.slots) - 1

  def _emit(self, op, ins, code, dims, attrs, loc) -> int:
    out = self._slot(code, dims)
    self.instrs.append(Instr(op, list(ins), [out], attrs, loc))
    return out

  def _constant(self, code: int, value, loc: str) -> int:
    data = np.array(value).astype(dtypes.by_code(code).numpy).tobytes()
    return self._emit("constant", [], code, (), {"data": data}, loc)

  def _broadcast(self, src: int, positions: list[int], dims, loc: str, out: int | None = None):
    """broadcast_in_dim(src) to `dims`; src itself when that changes nothing."""
    code, src_dims = self.slots[src]
    if out is None and tuple(src_dims) == tuple(dims) and positions == list(range(len(dims))):
      return src
    attrs = {"dims": list(positions)}
    if out is None:
      return self._emit("broadcast_in_dim", [src], code, dims, attrs, loc)
    self.instrs.append(Instr("broadcast_in_dim", [src], [out], attrs, loc))
    return out

  # -- broadcast forms -----------------------------------------------------------------

  def _form(self, s: int) -> tuple[int, list[int]] | None:
    """(src, map) with value(s) == broadcast_in_dim(src, dims=map), or None."""
    if s not in self.forms:
      self.forms[s] = None  # (no cycles in a plan; this just guards re-entry)
      self.forms[s] = self._find_form(s)
    return self.forms[s]

  def _find_form(self, s: int):
    instr = self.producer.get(s)
    if instr is None or len(instr.outs) != 1:
      return None
    dims = self.slots[s][1]
    if instr.op == "broadcast_in_dim":
      src, m = instr.ins[0], list(instr.attrs["dims"])
      inner = self._form(src)
      if inner is not None:
        src, m = inner[0], [m[j] for j in inner[1]]
      # A size-1 source dim on a larger result dim is broadcast, not mapped: the source
      # loses it (a reshape), so that a reduce over that dim counts its elements
      # (jnp.broadcast_to(a[:, None], (2, 64)).sum(-1) is 64 * a, not a).
      code, src_dims = self.slots[src]
      keep = [j for j in range(len(m)) if src_dims[j] != 1 or dims[m[j]] == 1]
      if len(keep) != len(m):
        src = self._emit("reshape", [src], code, [src_dims[j] for j in keep], {}, instr.loc)
        m = [m[j] for j in keep]
      return src, m
    if instr.op == "reshape":
      return self._reshape_form(instr.ins[0], dims, instr.loc)
    if instr.op == "iota" and len(dims) > 1:
      d = instr.attrs["dim"]
      code = self.slots[s][0]
      return self._emit("iota", [], code, (dims[d],), {"dim": 0}, instr.loc), [d]
    if instr.op in ELEMENTWISE and instr.ins and len(dims) > 0:
      forms = []
      for o in instr.ins:
        if self.slots[o][1] == ():
          forms.append((o, []))
          continue
        f = self._form(o)
        if f is None:
          return None
        forms.append(f)
      union = sorted(set().union(*(m for _, m in forms)))
      small = [dims[d] for d in union]
      if math.prod(small) > math.prod(dims):
        return None  # (equal: a keepdims value, [1, n] from [n], still composes)
      ins = []
      for src, m in forms:
        ins.append(self._broadcast(src, [union.index(d) for d in m], small, instr.loc))
      out = self._emit(instr.op, ins, self.slots[s][0], small, dict(instr.attrs), instr.loc)
      return out, union
    return None

  def _reshape_form(self, src: int, dims, loc: str):
    """The form of a reshape that only inserts or removes size-1 dims (keepdims)."""
    code, src_dims = self.slots[src]
    if [d for d in src_dims if d != 1] != [d for d in dims if d != 1]:
      return None
    # Non-unit dims of the source, in order, land on the non-unit dims of the result.
    lands = dict(
      zip([i for i, d in enumerate(src_dims) if d != 1], [i for i, d in enumerate(dims) if d != 1])
    )
    inner = self._form(src)
    base, m = inner if inner is not None else (src, list(range(len(src_dims))))
    base_dims = self.slots[base][1]
    keep = [j for j in range(len(m)) if src_dims[m[j]] != 1]  # the rest have size 1
    if len(keep) != len(m):
      base = self._emit("reshape", [base], code, [base_dims[j] for j in keep], {}, loc)
    return base, [lands[m[j]] for j in keep]

  # -- argmax ---------------------------------------------------------------------------

  def _rewrite_argmax(self, instr: Instr) -> bool:
    """argmax/argmin along a dim the broadcast maps from its source: the source's
    argmax, broadcast (the index operand must be the iota along that dim)."""
    dims = list(instr.attrs["dims"])
    if len(instr.ins) != 4 or len(instr.outs) != 2 or len(dims) != 1:
      return False
    x, index, init_x, init_index = instr.ins
    maker = self.producer.get(index)
    if maker is None or maker.op != "iota" or maker.attrs["dim"] != dims[0]:
      return False
    form = self._form(x)
    if form is None or dims[0] not in form[1]:
      return False
    src, m = form
    xdims = self.slots[x][1]
    src_dims = self.slots[src][1]
    if math.prod(src_dims) >= math.prod(xdims):
      return False
    j = m.index(dims[0])
    loc = instr.loc
    iota = self._emit("iota", [], self.slots[index][0], src_dims, {"dim": j}, loc)
    rest = [src_dims[i] for i in range(len(src_dims)) if i != j]
    outs = [self._slot(self.slots[o][0], rest) for o in instr.outs]
    self.instrs.append(Instr(instr.op, [src, iota, init_x, init_index], outs, {"dims": [j]}, loc))
    kept = [d for d in range(len(xdims)) if d != dims[0]]
    positions = [kept.index(m[i]) for i in range(len(m)) if i != j]
    for small, out in zip(outs, instr.outs):
      self._broadcast(small, positions, self.slots[out][1], loc, out=out)
    self.changed = True
    return True

  def _small_index(self, instr: Instr) -> bool:
    """argmax/argmin whose index operand is the iota along its one reduced dim: the index
    operand becomes that dim's 1-D iota, mapped onto the operand's dims by the attribute
    `index_dims` (as broadcast_in_dim's `dims`), so the full-size iota is neither built nor
    read (20000x64 int32: 5 MB each way for a k-means assignment)."""
    dims = list(instr.attrs["dims"])
    if len(instr.ins) != 4 or len(dims) != 1 or "index_dims" in instr.attrs:
      return False
    x, index, init_x, init_index = instr.ins
    maker = self.producer.get(index)
    xdims = self.slots[x][1]
    if maker is None or maker.op != "iota" or maker.attrs["dim"] != dims[0] or len(xdims) < 2:
      return False
    iota = self._emit("iota", [], self.slots[index][0], (xdims[dims[0]],), {"dim": 0}, instr.loc)
    attrs = {**instr.attrs, "index_dims": [dims[0]]}
    self.instrs.append(Instr(instr.op, [x, iota, init_x, init_index], instr.outs, attrs, instr.loc))
    self.changed = True
    return True

  # -- the reduce ------------------------------------------------------------------------

  def _rewrite_reduce(self, instr: Instr) -> bool:
    body = instr.attrs.get("body")
    if len(instr.ins) != 2 or len(instr.outs) != 1 or body not in _IDEMPOTENT | {"add"}:
      return False
    x, init = instr.ins
    code, xdims = self.slots[x]
    name = dtypes.by_code(code).name
    if body == "add" and (name == "pred" or name not in SPECS["multiply"].kernel):
      return False
    if name not in SPECS[body].kernel:
      return False
    form = self._form(x)  # what it emits and the rewrite does not use is dropped as dead
    if form is None:
      return False
    src, m = form
    reduced = list(instr.attrs["dims"])
    added = [d for d in reduced if d not in m]
    k = math.prod(xdims[d] for d in added)
    if math.prod(self.slots[src][1]) >= math.prod(xdims) or k == 0:
      return False  # no smaller source (the forms found are kept: cheap, CSE'd later)
    loc, out = instr.loc, instr.outs[0]
    rdims = self.slots[out][1]
    kept = [d for d in range(len(xdims)) if d not in reduced]
    src_dims = self.slots[src][1]
    on_src = [j for j, d in enumerate(m) if d in reduced]
    t = src
    if on_src:
      start = self._constant(code, 0, loc) if body == "add" else init
      t_dims = [src_dims[j] for j in range(len(m)) if j not in on_src]
      attrs = {"dims": on_src, "body": body}
      t = self._emit("reduce", [src, start], code, t_dims, attrs, loc)
    positions = [kept.index(m[j]) for j in range(len(m)) if j not in on_src]
    if body in _IDEMPOTENT and on_src:
      self._broadcast(t, positions, rdims, loc, out=out)  # init is folded in already
    else:
      u = self._broadcast(t, positions, rdims, loc)
      if body == "add" and k > 1:
        kc = self._broadcast(self._constant(code, k, loc), [], rdims, loc)
        u = self._emit("multiply", [u, kc], code, rdims, {}, loc)
      init_b = self._broadcast(init, [], rdims, loc)
      self.instrs.append(Instr(body, [u, init_b], [out], {}, loc))
    self.changed = True
    return True


def _drop_dead(instrs: list[Instr], results: list[int]) -> list[Instr]:
  """`instrs` without pure ones whose results nothing reads."""
  live = set(results)
  kept = []
  for instr in reversed(instrs):
    if instr.op in PURE and not any(o in live for o in instr.outs):
      continue
    live.update(instr.ins)
    kept.append(instr)
  kept.reverse()
  return kept
