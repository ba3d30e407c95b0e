"""sort: the comparators JAX emits get a typed kernel, any other a sorting network.

Family `sort`: plugin_src/kernels/sort.cc.

jnp.sort/argsort and lax.sort(num_keys=k) emit a lexicographic comparator over the first k
operands. For floats each key is first canonicalized (-0.0 -> 0.0, every NaN -> one
positive NaN) and compared with LT TOTALORDER, so -0.0 ties with 0.0 and NaNs sort last;
integers compare with LT SIGNED/UNSIGNED:

  less_0  or  (eq_0 and (less_1 or (eq_1 and ...)))     less_k = LT(canon(lhs_k), canon(rhs_k))

`sort` (plugin_src/kernels/sort.cc) implements exactly these: a stable sort of index
permutations on order-preserving integer keys, then a gather of every operand. Any other
comparator runs as a lane plan in `sort_general`, a bitonic sorting network whose
compare-exchange steps each evaluate the comparator once (twice when stable) for all pairs.
"""

from __future__ import annotations

import dataclasses

from jaxlib.mlir import ir

from .. import errors, lanes, patterns as pt
from ..lowering import Lowering, register
from .elementwise import default_compare_type


@dataclasses.dataclass(frozen=True)
class _Key:
  operand: int
  descending: bool  # compares rhs < lhs (GT)
  canonicalize: bool  # -0.0 -> 0.0 and NaN -> +NaN before comparing
  compare_type: str


def _canonical(x: pt.Tree) -> pt.Tree:
  """The tree jnp.sort builds to canonicalize float x before comparing it."""
  zero = pt.op("select", pt.compare("EQ", "FLOAT", x, ("const", 0.0)), ("const", 0.0), x)
  return pt.op("select", pt.compare("NE", "FLOAT", x, x), ("const", "nan"), zero)


def _operand(t: pt.Tree) -> tuple[int, bool] | None:
  """(block argument, canonicalized) for `arg` or `_canonical(arg)`; None otherwise."""
  if t[0] == "arg":
    return t[1], False
  if t[0] == "select" and len(t) == 4 and t[3][0] == "select" and len(t[3]) == 4:
    x = t[3][3]
    if x[0] == "arg" and t == _canonical(x):
      return x[1], True
  return None


def _less(t: pt.Tree) -> _Key | None:
  """The key of `LT(f(lhs_k), f(rhs_k))` (ascending) or with lhs/rhs swapped."""
  if t[0] != "compare" or t[1] != "LT":
    return None
  a, b = _operand(t[3]), _operand(t[4])
  if a is None or b is None or a[1] != b[1] or a[0] // 2 != b[0] // 2 or a[0] == b[0]:
    return None
  return _Key(a[0] // 2, descending=a[0] % 2 == 1, canonicalize=a[1], compare_type=t[2])


def _equal(key: _Key) -> pt.Tree:
  f = _canonical if key.canonicalize else (lambda x: x)
  lhs, rhs = pt.arg(2 * key.operand), pt.arg(2 * key.operand + 1)
  return pt.compare("EQ", key.compare_type, f(lhs), f(rhs))


def _lexicographic(t: pt.Tree) -> list[_Key] | None:
  """The keys of `less_0 or (eq_0 and <lexicographic rest>)`, or of a lone `less_0`."""
  if (key := _less(t)) is not None:
    return [key]
  if t[0] != "or" or len(t) != 3:
    return None
  for first, rest in ((t[1], t[2]), (t[2], t[1])):
    key = _less(first)
    if key is None or rest[0] != "and" or len(rest) != 3:
      continue
    for eq, tail in ((rest[1], rest[2]), (rest[2], rest[1])):
      if eq == _equal(key) and (keys := _lexicographic(tail)) is not None:
        return [key, *keys]
  return None


def _match_comparator(op: ir.Operation) -> list[_Key] | None:
  """The keys of a comparator the `sort` kernel implements exactly; None otherwise.

  Float keys must compare TOTALORDER (FLOAT is not a strict weak order with NaNs: that
  comparator goes to the general path), integer keys with their dtype's signedness.
  """
  block = op.regions[0].blocks[0]
  got = pt.returned(block)
  if got is None or len(got) != 1 or (keys := _lexicographic(got[0])) is None:
    return None
  for key in keys:
    t = op.operands[key.operand].type
    is_float = default_compare_type(t) == "FLOAT"
    expected = "TOTALORDER" if is_float else default_compare_type(t)
    if key.compare_type != expected or (key.canonicalize and not is_float):
      return None
  return keys


@register("stablehlo.sort")
def _sort(ctx: Lowering, op: ir.Operation) -> None:
  """ins: operands (same shape) [, captured scalars for sort_general].

  Attrs: dim; `sort`: keys = [[operand, descending, canonicalize], ...] (most significant
  first); `sort_general`: comparator (a lane plan over (lhs_0, rhs_0, lhs_1, ...)),
  is_stable.
  """
  rank = ir.RankedTensorType(op.operands[0].type).rank
  dim = op.attributes["dimension"].value
  dim = dim + rank if dim < 0 else dim
  if not 0 <= dim < max(rank, 1):
    raise errors.malformed(op, f"sort dimension {dim} out of range for rank {rank}")
  keys = _match_comparator(op)
  if keys is not None:
    ctx.emit(
      op, {"dim": dim, "keys": [[k.operand, int(k.descending), int(k.canonicalize)] for k in keys]}
    )
    return
  [comparator], captures = ctx.lower_regions(op, op.regions)
  is_stable = "is_stable" in op.attributes and ir.BoolAttr(op.attributes["is_stable"]).value
  ctx.emit(
    op,
    {
      "dim": dim,
      "comparator": lanes.to_lanes(op, comparator, len(captures)),
      "is_stable": int(is_stable),
    },
    extra_ins=captures,
    kernel="sort_general",
  )
