"""Library idioms that run as one composite kernel instead of op by op.

JAX lowers `jax.nn.gelu` (tanh form) to nine elementwise ops. Inside a fusion block each op
is one pass over L1 (load, compute, store), where a compiled backend keeps the chain in
registers; a plugin without a code generator gets that for a hot idiom by recognising the
op sequence and running one kernel written for it (ONNX Runtime's FastGelu fusion is the
same idea). The composite computes the same operations in the same order, each rounded to
the same dtype, so its result has the bits of the op-by-op plan.

  gelu_tanh(x, c1, c2, one, half)
      = x * (half * (one + tanh(c2 * (x + c1 * (x * x * x)))))    (kernels/elementwise/gelu.cc)

for f32 `x` and one-element f32 `c1, c2, one, half` (0.044715, sqrt(2/pi), 1, 0.5 in JAX's
lowering; the kernel takes whatever values the program broadcasts). A match needs every
intermediate to be read only by the next op of the idiom and not be a program result.

Adding an idiom: a matcher here that returns the instructions it replaces and the
composite instruction, a kernel registered under the composite's name, and a test that
the plan holds the composite and matches JAX's CPU backend.

Gathers by several index arrays (`x[i, j]`, `img[y, x]`, `logp[jnp.arange(n), labels]`):
JAX concatenates the arrays, each reshaped to [..., 1], into one [..., K] indices operand.
`fold_index_concatenates` gives the gather the K arrays instead (attribute `index_parts`),
so the concatenate (and the reshapes) never run: XLA:CPU's gather fusion reads the
components where they are too. The kernel reads component k from operand 1 + k
(gather_scatter.cc IndexSource); the same starts, so the same result.
"""

from __future__ import annotations

import collections

from .plan import Instr, Plan, free_lists

GELU_TANH = "gelu_tanh"
# Composite kernels that are elementwise in their first operand (the others are scalars):
# fusion.py takes them into runs like any elementwise kernel.
COMPOSITES = frozenset([GELU_TANH])

_F32 = 11  # PJRT_Buffer_Type_F32 (dtypes.py)


def replace_idioms(plan: Plan) -> Plan:
  """`plan` with each recognised idiom replaced by its composite instruction."""
  instrs = list(plan.instrs)
  users: dict[int, list[int]] = collections.defaultdict(list)
  producer: dict[int, int] = {}
  for i, instr in enumerate(instrs):
    for s in instr.ins:
      users[s].append(i)
    for s in instr.outs:
      producer[s] = i
  results = set(plan.results)
  removed: set[int] = set()
  replaced: dict[int, Instr] = {}
  broadcasts: set[int] = set()  # Producers of the scalar broadcasts the matches read.
  for i in range(len(instrs)):
    match = _match_gelu_tanh(plan, instrs, i, users, producer, results)
    if match is None or removed & match[0]:
      continue
    gone, scalar_broadcasts, composite = match
    removed |= gone
    broadcasts |= scalar_broadcasts
    replaced[i] = composite
  if not replaced:
    return plan
  # A scalar broadcast goes too once nothing left reads it: CSE may have shared one between
  # several matches, with other instructions, or with `x` itself (gelu of a constant).
  needed = {s for composite in replaced.values() for s in composite.ins}
  for k in broadcasts:
    s = instrs[k].outs[0]
    if s not in results and s not in needed and all(u in removed for u in users[s]):
      removed.add(k)
  out = [
    replaced.get(i, instr) for i, instr in enumerate(instrs) if i in replaced or i not in removed
  ]
  return Plan(plan.slots, plan.params, plan.results, out, free_lists(out, plan.results))


class _NoMatch(Exception):
  """A step of a matcher did not find what the idiom needs."""


def _need(value):
  if value is None:
    raise _NoMatch
  return value


def _match_gelu_tanh(plan, instrs, last, users, producer, results):
  """(indices replaced, indices of the scalar broadcasts read, gelu_tanh instruction) if
  instrs[last] ends JAX's tanh gelu, else None.

  Walks up from the final multiply, one op of
  x * (half * (one + tanh(c2 * (x + c1 * (x * x * x))))) per step; every op matched is
  commutative, so either operand order is accepted.
  """

  def only_use(slot, user):  # slot's producer, if `user` is its one reader.
    if slot in results or users[slot] != [user] or slot not in producer:
      return None
    return producer[slot]

  def scalar(slot):  # The one-element slot broadcast into `slot`, or None.
    k = producer.get(slot)
    if k is None or instrs[k].op != "broadcast_in_dim":
      return None
    src = instrs[k].ins[0]
    return src if _elements(plan, src) == 1 else None

  def other(k, op, known):  # instrs[k] = op(known, y): y's producer, if k is y's one reader.
    ins = instrs[k].ins
    if instrs[k].op != op or len(ins) != 2 or known not in ins:
      return None
    return only_use(ins[1] if ins[0] == known else ins[0], k)

  def scaled(k, op, inner):  # instrs[k] = op(broadcast(s), y), y made by `inner`: (s, y's producer)
    ins = instrs[k].ins
    if instrs[k].op != op or len(ins) != 2:
      return None
    for a, b in (ins, ins[::-1]):
      s, k_in = scalar(a), only_use(b, k)
      if s is not None and k_in is not None and instrs[k_in].op == inner:
        return s, k_in
    return None

  if not instrs[last].outs or _dtype(plan, instrs[last].outs[0]) != _F32:
    return None
  for x in dict.fromkeys(instrs[last].ins):
    try:
      k_half = _need(other(last, "multiply", x))  # x * h
      half_s, k_one = _need(scaled(k_half, "multiply", "add"))  # h = half * p
      one_s, k_tanh = _need(scaled(k_one, "add", "tanh"))  # p = one + t
      k_c2 = _need(only_use(instrs[k_tanh].ins[0], k_tanh))  # t = tanh(u)
      c2_s, k_v = _need(scaled(k_c2, "multiply", "add"))  # u = c2 * v
      k_w = _need(other(k_v, "add", x))  # v = x + w
      c1_s, k_cube = _need(scaled(k_w, "multiply", "multiply"))  # w = c1 * cube
      k_sq = _need(other(k_cube, "multiply", x))  # cube = sq * x
    except _NoMatch:
      continue
    if instrs[k_sq].op != "multiply" or instrs[k_sq].ins != [x, x]:  # sq = x * x
      continue
    scalars = [c1_s, c2_s, one_s, half_s]
    if any(_dtype(plan, s) != _F32 for s in [x, *scalars]):
      return None
    gone = {last, k_half, k_one, k_tanh, k_c2, k_v, k_w, k_cube, k_sq}
    # The producers of the scalar operands of the ops that scale and shift.
    broadcasts = {
      producer[s]
      for k in (k_w, k_c2, k_one, k_half)
      for s in instrs[k].ins
      if scalar(s) is not None
    }
    composite = Instr(GELU_TANH, [x, *scalars], list(instrs[last].outs), {}, instrs[last].loc)
    return gone, broadcasts, composite
  return None


def _elements(plan: Plan, slot: int) -> int:
  n = 1
  for d in plan.slots[slot][1]:
    n *= d
  return n


def _dtype(plan: Plan, slot: int) -> int:
  return plan.slots[slot][0]


def fold_index_concatenates(plan: Plan) -> Plan:
  """`plan` with each top-level gather whose indices are a concatenate of K >= 2 index
  arrays along the index vector dim (the last, one element each) reading the K arrays
  (reshapes looked through) as operands 1..K, with `index_parts` K; the concatenate and
  reshapes go when nothing else reads them. Interpreted and generated loop bodies are left
  as they are (their generated code calls kernels with the operands they had)."""
  instrs = list(plan.instrs)
  producer = {s: i for i, instr in enumerate(instrs) for s in instr.outs}
  changed = False
  for g, instr in enumerate(instrs):
    if instr.op != "gather" or len(instr.ins) != 2 or "index_parts" in instr.attrs:
      continue
    k = producer.get(instr.ins[1])
    if k is None or instrs[k].op != "concatenate":
      continue
    concat = instrs[k]
    dims = plan.slots[instr.ins[1]][1]
    parts = len(concat.ins)
    if (
      parts < 2
      or not dims
      or concat.attrs.get("dim") != len(dims) - 1
      or dims[-1] != parts
      or instr.attrs.get("index_vector_stride") != 1
      or len(instr.attrs.get("start_strides", ())) != parts
      or any(plan.slots[p][1][-1:] != (1,) for p in concat.ins)
      or any(s % parts for s in instr.attrs["batch_index_strides"])
    ):
      continue
    attrs = dict(instr.attrs)
    attrs["batch_index_strides"] = [s // parts for s in attrs["batch_index_strides"]]
    attrs["index_vector_stride"] = 0
    attrs["index_parts"] = parts
    sources = [_reshaped_from(plan, instrs, producer, p) for p in concat.ins]
    if len({plan.slots[p][1] for p in sources}) != 1:  # The kernel takes parts of one shape.
      sources = list(concat.ins)
    ins = [instr.ins[0], *sources]
    instrs[g] = Instr(instr.op, ins, instr.outs, attrs, instr.loc)
    changed = True
  if not changed:
    return plan
  # What the folds left unread: the concatenates and the reshapes into them.
  results = set(plan.results)
  while True:
    read = {s for instr in instrs for s in instr.ins}
    dead = [
      i
      for i, instr in enumerate(instrs)
      if instr.op in ("concatenate", "broadcast_in_dim")
      and not any(s in read or s in results for s in instr.outs)
    ]
    if not dead:
      break
    instrs = [instr for i, instr in enumerate(instrs) if i not in set(dead)]
  return Plan(plan.slots, plan.params, plan.results, instrs, free_lists(instrs, plan.results))


def _reshaped_from(plan: Plan, instrs: list[Instr], producer: dict[int, int], slot: int) -> int:
  """The slot `slot` is a reshape of (a broadcast_in_dim that only adds unit dims, so the
  elements keep their order), else `slot` itself."""
  k = producer.get(slot)
  if k is None or instrs[k].op != "broadcast_in_dim":
    return slot
  src = instrs[k].ins[0]
  dims = instrs[k].attrs.get("dims", [])
  if (
    _elements(plan, src) != _elements(plan, slot)
    or _dtype(plan, src) != _dtype(plan, slot)
    or list(dims) != sorted(set(dims))
    or len(dims) != len(plan.slots[src][1])
  ):
    return slot
  return src
