"""Lowers a module's public @main into a Plan, one registered rule per op name.

Rules live in `rules/`, one file per op family, and register themselves like JAX's
lowering rules:

    @register("stablehlo.add", "stablehlo.subtract")
    def _binary(ctx: Lowering, op: ir.Operation) -> None:
      ctx.emit(op)

A rule either emits kernels (`Lowering.emit`) or, for structural ops (func.call,
sdy.manual_computation), lowers a region inline and binds the op's results to the slots
the region returns. Every SSA value maps to a slot; aliasing ops (call arguments and
results, manual_computation boundaries) map several values to one slot.

Ops whose regions run a data-dependent number of times (while, case, reduce and sort
bodies) lower each region into a separate sub-Plan with `Lowering.lower_regions`; the
kernel runs it with RunPlan (see docs/plan.md, "Regions and sub-plans").

`stablehlo.custom_call` has one rule (rules/control_flow.py), which dispatches on the call
target through `CUSTOM_CALLS`; the custom-call families (rules/callback.py, ffi.py,
lapack.py, linalg.py, approx_top_k.py) add their targets there:

    CUSTOM_CALLS["ApproxTopK"] = _approx_top_k
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

from jaxlib.mlir import ir

from . import dtypes, errors, legalize, locations
from .options import Options
from .plan import Instr, Plan, free_lists
from .spmd.sharding import Meshes, is_replicated, same_sharding

Rule = Callable[["Lowering", ir.Operation], None]
_RULES: dict[str, Rule] = {}

# Terminators end a region rather than compute anything: their operands are the region's
# results, which the enclosing op's rule (or lower_main) binds.
_TERMINATORS = ("func.return", "sdy.return", "stablehlo.return")


def register(*op_names: str) -> Callable[[Rule], Rule]:
  """Decorator registering `rule` as the lowering of each op in `op_names`."""

  def wrap(rule: Rule) -> Rule:
    for name in op_names:
      assert name not in _RULES, f"duplicate lowering rule for {name}"
      _RULES[name] = rule
    return rule

  return wrap


# custom_call targets the plugin implements: target name -> lowering rule.
CUSTOM_CALLS: dict[str, Rule] = {}
# Consulted for targets not in CUSTOM_CALLS (user FFI targets, rules/ffi.py): each returns
# a rule for the target, or None.
CUSTOM_CALL_FALLBACKS: list[Callable[[str], Rule | None]] = []
# What an unsupported target's error adds (e.g. rules/ffi.py: how to register a handler).
UNKNOWN_TARGET_HINTS: list[Callable[[str, ir.Operation], str]] = []


class Lowering:
  """The state of lowering one program: slots, the value -> slot map and the kernels.

  Attributes:
    options: replica/partition counts (collectives need them).
    meshes: the module's sdy meshes.
    funcs: the module's functions by symbol name.
    slots, instrs: the plan being built.
  """

  def __init__(
    self,
    module: ir.Module | None,
    options: Options,
    *,
    parent: Lowering | None = None,
    captures: _Captures | None = None,
  ):
    self.options = options
    self.slots: list[tuple[int, tuple[int, ...]]] = []
    self.instrs: list[Instr] = []
    if parent is None:
      self.meshes = Meshes(module)
      self.funcs: dict[str, ir.Operation] = {
        op.attributes["sym_name"].value: op.operation
        for op in module.body.operations
        if op.operation.name == "func.func"
      }
    else:
      self.meshes, self.funcs = parent.meshes, parent.funcs
    # Set in the lowering of a region into a sub-plan: values defined outside the region
    # are looked up in `_parent` and become extra parameters (`_captures`).
    self._parent = parent
    self._captures = captures
    self._capture_slot: dict[ir.Value, int] = {}
    self._slot_of: dict[ir.Value, int] = {}
    # Slots holding a shard of a value that is not replicated, outside any manual
    # computation: only a manual_computation (or main's return) may consume them.
    self._sharding_of: dict[int, ir.Attribute] = {}
    self._manual_depth = parent._manual_depth if parent else 0
    # (callee, call site location) of the calls being inlined, outermost first.
    self._call_stack: list[tuple[str, str]] = list(parent._call_stack) if parent else []
    # Messages of the ops no rule could lower: lowering goes on past them, so that one
    # error lists every unsupported op of the program (legalize.raise_errors).
    self.errors: list[str] = parent.errors if parent else []

  # Values and slots.

  def slot(self, value: ir.Value) -> int:
    """The slot holding `value`; in a region's sub-plan, captures outer values on demand."""
    s = self._slot_of.get(value)
    if s is not None:
      return s
    if self._parent is None:
      raise KeyError(f"value {value.get_name()} is used before it is defined")
    # Defined outside the region (possibly several regions out: the parent captures it
    # in turn). It becomes a parameter of this sub-plan.
    outer = self._parent.slot(value)
    self.slots.append(self._parent.slots[outer])
    s = len(self.slots) - 1
    self.set_sharding(s, self._parent.sharding(outer))
    self._captures.add(value, outer)
    self._capture_slot[value] = s
    self.bind(value, s)
    return s

  def bind(self, value: ir.Value, slot: int) -> None:
    """Makes `value` another name for an existing slot."""
    self._slot_of[value] = slot

  def new_slot(
    self, op: ir.Operation, t: ir.Type, dims: Sequence[int] | None = None, *, role: str = "result"
  ) -> int:
    """Allocates a slot for `op`'s `role` value of type `t` (`dims` overrides its shape).

    Raises:
      NotImplementedError: `t` is not a statically shaped tensor of a representable dtype.
    """
    if str(t) == "!stablehlo.token":
      # No data: an empty pred array, which is what JAX passes for main's token
      # parameters (rules/callback.py).
      self.slots.append((dtypes.by_name("pred").code, (0,)))
      return len(self.slots) - 1
    if not isinstance(t, ir.RankedTensorType):
      raise errors.unsupported(op, f"unsupported type {t} of {role}")
    if not t.has_static_shape:
      raise errors.unsupported(op, f"unsupported dynamic shape {t} of {role}")
    dtype = dtypes.lookup(t.element_type)
    if dtype is None:
      raise errors.unsupported(op, f"unsupported element type {t.element_type} of {role}")
    self.slots.append((dtype.code, tuple(t.shape if dims is None else dims)))
    return len(self.slots) - 1

  def dims(self, slot: int) -> tuple[int, ...]:
    return self.slots[slot][1]

  # Sharding outside manual computations.

  def sharding(self, slot: int) -> ir.Attribute | None:
    """The (non-replicated) sdy sharding of `slot` outside manual code; None if replicated."""
    return self._sharding_of.get(slot)

  def set_sharding(self, slot: int, sharding: ir.Attribute | None) -> None:
    """Records that `slot` holds a shard under `sharding` (None or replicated: whole)."""
    sharding = self.meshes.effective(sharding)
    if is_replicated(sharding):
      self._sharding_of.pop(slot, None)
    else:
      self._sharding_of[slot] = sharding

  @contextlib.contextmanager
  def manual(self) -> Iterator[None]:
    """Scope of a manual_computation body, where every value is device-local."""
    self._manual_depth += 1
    try:
      yield
    finally:
      self._manual_depth -= 1

  # Emitting.

  def emit(
    self,
    op: ir.Operation,
    attrs: dict | None = None,
    *,
    operands: Sequence[ir.Value] | None = None,
    results: Sequence[ir.Value] | None = None,
    extra_ins: Sequence[int] = (),
    kernel: str | None = None,
  ) -> None:
    """Appends the kernel named after `op` reading `operands` and defining `results`.

    Operands and results default to all of the op's. `extra_ins` are slots appended to the
    operands (a region's captured values); `kernel` overrides the kernel name (a
    specialised kernel for a recognised pattern, e.g. argmax).

    Raises:
      NotImplementedError: an operand is a shard of a non-replicated value outside a
        manual computation (that would need automatic SPMD partitioning), or a result
        type is not representable.
    """
    ins = self.operand_slots(op, operands, extra_ins)
    outs = self.result_slots(op, results)
    self.emit_kernel(op, kernel or op.name.removeprefix("stablehlo."), ins, outs, attrs)

  def operand_slots(
    self,
    op: ir.Operation,
    operands: Sequence[ir.Value] | None = None,
    extra_ins: Sequence[int] = (),
  ) -> list[int]:
    """The slots of `operands` (default: all of `op`'s) plus `extra_ins`, as kernel inputs.

    Raises:
      NotImplementedError: an operand is a shard of a non-replicated value outside a
        manual computation.
    """
    operands = op.operands if operands is None else operands
    ins = [self.slot(v) for v in operands] + list(extra_ins)
    if self._manual_depth == 0:
      for i, s in enumerate(ins):
        if s in self._sharding_of:
          raise errors.needs_partitioning(op, f"operand {i} is sharded as {self._sharding_of[s]}")
    return ins

  def result_slots(self, op: ir.Operation, results: Sequence[ir.Value] | None = None) -> list[int]:
    """New slots bound to `results` (default: all of `op`'s)."""
    outs = []
    for i, r in enumerate(op.results if results is None else results):
      outs.append(self.new_slot(op, r.type, role=f"result {i}"))
      self.bind(r, outs[-1])
    return outs

  def temp_slot(self, dtype: dtypes.DType, dims: Sequence[int]) -> int:
    """A slot for an intermediate value no SSA value names (e.g. f16 math done in f32)."""
    self.slots.append((dtype.code, tuple(dims)))
    return len(self.slots) - 1

  def emit_kernel(
    self,
    op: ir.Operation,
    kernel: str,
    ins: Sequence[int],
    outs: Sequence[int],
    attrs: dict | None = None,
  ) -> None:
    """Appends `kernel` on explicit slots, located at `op`: for rules that expand one op
    into several kernels.

    Raises:
      NeedsPartitioning: an input is a shard of a non-replicated value outside a manual
        computation, as in `operand_slots` (a guard for rules that take their operands'
        slots with `slot`: a general-body reduce_window's scan sliced a shard as if it
        were the whole value).
    """
    if self._manual_depth == 0:
      for s in ins:
        if s in self._sharding_of:
          raise errors.needs_partitioning(
            op, f"{kernel} reads a value sharded as {self._sharding_of[s]}"
          )
    self.instrs.append(Instr(kernel, list(ins), list(outs), attrs or {}, self._loc(op)))

  def _loc(self, op: ir.Operation) -> str:
    # Ops in a callee often carry just a name; the call sites locate them in user code.
    sites = "".join(_called_from(site) for _, site in reversed(self._call_stack))
    return locations.describe(op.location) + sites

  # Regions.

  def lower_block(self, block: ir.Block, arg_slots: Sequence[int]) -> list[int]:
    """Lowers a block inline with its arguments bound to `arg_slots`.

    Returns:
      The slots of the values the block's terminator returns.
    """
    for arg, s in zip(block.arguments, arg_slots, strict=True):
      self.bind(arg, s)
    *body, terminator = [op.operation for op in block.operations]
    for op in body:
      self._lower_op(op)
    if terminator.name not in _TERMINATORS:
      raise errors.unsupported(terminator, "unsupported region terminator")
    return [self.slot(v) for v in terminator.operands]

  def lower_regions(
    self, op: ir.Operation, regions: Sequence[ir.Region]
  ) -> tuple[list[Plan], list[int]]:
    """Lowers each of `op`'s `regions` into a separate Plan, for a kernel to run.

    Each sub-plan has its own slots; its parameters are the region's block arguments
    followed by the values the regions capture from enclosing scopes, the same captures in
    the same order for every region (a region ignores those it doesn't use). Functions,
    meshes and options are shared with this lowering.

    Returns:
      The plans, and the slots (in this lowering) of the captured values: the kernel's
      extra operands.

    Raises:
      NotImplementedError, ValueError: as for any op in the regions.
    """
    captures = _Captures()
    children = []
    for region in regions:
      child = Lowering(None, self.options, parent=self, captures=captures)
      block = region.blocks[0]
      args = [
        child.new_slot(op, arg.type, role=f"region argument {i}")
        for i, arg in enumerate(block.arguments)
      ]
      results = child.lower_block(block, args)
      children.append((child, args, results))
    plans = []
    for child, args, results in children:
      params = args + [child._capture_param(v) for v in captures.values]
      plans.append(
        Plan(child.slots, params, results, child.instrs, free_lists(child.instrs, results))
      )
    return plans, captures.outer_slots

  def _capture_param(self, value: ir.Value) -> int:
    """The parameter slot of captured `value`; allocated if this region never used it."""
    s = self._capture_slot.get(value)
    if s is None:
      self.slots.append(self._parent.slots[self._parent.slot(value)])
      s = self._capture_slot[value] = len(self.slots) - 1
    return s

  def lower_call(self, op: ir.Operation, callee: str, arg_slots: Sequence[int]) -> list[int]:
    """Inlines function `callee` applied to `arg_slots`; returns its result slots.

    Raises:
      ValueError: `callee` doesn't exist.
      NotImplementedError: `callee` is recursive.
    """
    if callee not in self.funcs:
      raise errors.malformed(op, f"call to undefined function @{callee}")
    if callee in (name for name, _ in self._call_stack):
      raise errors.unsupported(op, f"unsupported recursive call to @{callee}")
    site = locations.describe(op.location)
    self._call_stack.append((callee, site))
    try:
      return self.lower_block(self.funcs[callee].regions[0].blocks[0], arg_slots)
    except (ValueError, NotImplementedError, errors.InternalLoweringError) as e:
      # As in _loc: point errors in the callee at user code too.
      raise type(e)(f"{e}{_called_from(site)}") from e
    finally:
      self._call_stack.pop()

  def _lower_op(self, op: ir.Operation) -> None:
    rule = _RULES.get(op.name)
    try:
      if rule is None:
        raise errors.unsupported(op)
      rule(self, op)
    except errors.NeedsPartitioning:
      raise  # Not an unsupported op: compile_program partitions the program and retries.
    except NotImplementedError as e:
      self.errors.append(
        str(e).removeprefix("workshop: ")
        + "".join(_called_from(site) for _, site in reversed(self._call_stack))
      )
      self._bind_placeholders(op)
    except (ValueError, errors.InternalLoweringError):
      raise
    except Exception as e:  # A rule bug; say which op triggered it.
      raise errors.InternalLoweringError(
        f"workshop: internal error lowering {errors.describe_op(op)}: {type(e).__name__}: {e}"
      ) from e

  def _bind_placeholders(self, op: ir.Operation) -> None:
    """Gives the results of an op that failed to lower slots, so lowering can go on."""
    for r in op.results:
      if r not in self._slot_of:
        try:
          self.new_slot(op, r.type)
        except NotImplementedError:  # Unrepresentable: any slot will do, none runs.
          self.temp_slot(dtypes.by_name("f32"), ())
        self.bind(r, len(self.slots) - 1)


# PJRT_Buffer_Type_TOKEN: the type of main's token results (a slot of no elements).
TOKEN_CODE = 23


def _token_results(plan: Plan, ftype: ir.FunctionType) -> Plan:
  """`plan` with each token result of main (an empty pred slot inside the plan) bitcast
  into a slot of type TOKEN and no dims, so its buffer reports PJRT_Buffer_Type_TOKEN as
  XLA:CPU's token buffers do (jaxlib refuses to read one as an array). After legalize:
  the op table has no token type. Token parameters stay empty pred slots: the executor
  accepts a token buffer for them."""
  results = list(plan.results)
  slots, instrs = list(plan.slots), list(plan.instrs)
  for i, t in enumerate(ftype.results):
    if str(t) == "!stablehlo.token":
      slots.append((TOKEN_CODE, ()))
      instrs.append(
        Instr("bitcast_convert", [results[i]], [len(slots) - 1], {}, f"token result {i}")
      )
      results[i] = len(slots) - 1
  if results == plan.results:
    return plan
  return Plan(slots, plan.params, results, instrs, free_lists(instrs, results))


def lower_main(
  module: ir.Module, options: Options, *, partitioned: bool = False
) -> tuple[Plan, list[tuple[int, int]]]:
  """Lowers the module's public @main into a per-partition Plan.

  Parameters and results get their local (shard) shape under their `sdy.sharding`;
  `partitioned`: the module is already per-device code (partition.py), types are local.

  Returns:
    The plan and the (parameter, result) donations from `tf.aliasing_output`.

  Raises:
    ValueError: no @main, or malformed ops.
    NotImplementedError: unsupported ops, dtypes or shardings: one error listing all.
  """
  ctx = Lowering(module, options)
  main = ctx.funcs.get("main")
  if main is None:
    raise ValueError("workshop: the module has no @main function")
  ftype = ir.FunctionType(main.attributes["function_type"].value)
  arg_attrs = _per_value_attrs(main, "arg_attrs", len(ftype.inputs))
  res_attrs = _per_value_attrs(main, "res_attrs", len(ftype.results))

  params = []
  for i, (t, attrs) in enumerate(zip(ftype.inputs, arg_attrs)):
    if partitioned:
      params.append(ctx.new_slot(main, t, role=f"parameter {i}"))
      continue
    sharding = _get(attrs, "sdy.sharding")
    local_dims = (
      ctx.meshes.local_dims(sharding, tuple(t.shape))
      if isinstance(t, ir.RankedTensorType)
      else None
    )
    try:
      params.append(ctx.new_slot(main, t, local_dims, role=f"parameter {i}"))
    except NotImplementedError as e:  # Listed with the body's errors.
      ctx.errors.append(str(e).removeprefix("workshop: "))
      params.append(ctx.temp_slot(dtypes.by_name("f32"), ()))
    ctx.set_sharding(params[-1], sharding)
  if partitioned:
    # Everything is device-local, as in a manual computation's body.
    with ctx.manual():
      results = ctx.lower_block(main.regions[0].blocks[0], params)
  else:
    results = ctx.lower_block(main.regions[0].blocks[0], params)
  plan = Plan(ctx.slots, params, results, ctx.instrs, free_lists(ctx.instrs, results))
  plan = legalize.legalize(plan, ctx.errors)
  legalize.raise_errors(ctx.errors)  # before the checks below, which assume a whole plan
  plan = _token_results(plan, ftype)

  for i, (s, attrs) in enumerate(zip(results, res_attrs)):
    if partitioned:
      break
    # The shard each device holds must already be the one the result is declared to
    # have: changing it would need communication the plan doesn't express.
    declared, held = ctx.meshes.effective(_get(attrs, "sdy.sharding")), ctx.sharding(s)
    if not same_sharding(declared, held):
      raise errors.needs_partitioning(
        main, f"result {i} is declared {declared} but computed as {held}"
      )

  donations = [
    (p, _get(attrs, "tf.aliasing_output").value)
    for p, attrs in enumerate(arg_attrs)
    if _get(attrs, "tf.aliasing_output") is not None
  ]
  donations += _buffer_donors(ctx, arg_attrs, res_attrs, params, results, donations)
  return plan, donations


def _buffer_donors(
  ctx: Lowering,
  arg_attrs: list,
  res_attrs: list,
  params: list[int],
  results: list[int],
  fixed: list[tuple[int, int]],
) -> list[tuple[int, int]]:
  """Donations for parameters marked `jax.buffer_donor` (JAX's form when shardings are
  involved: it marks only parameters some result can reuse and leaves the pairing to the
  compiler). Each takes the first result not yet paired with the same dtype, local shape,
  sharding and memory, else one with the same dtype and local size (XLA:CPU reuses a
  donated f32[2,4] shard for an f32[8,1] one); a donor nothing fits stays the caller's,
  as on XLA:CPU."""
  taken = {r for _, r in fixed}
  donated = {p for p, _ in fixed}
  out = []

  def key(attrs, slot):
    memory = _get(attrs, "mhlo.memory_kind")
    return (
      ctx.slots[slot],
      str(ctx.meshes.effective(_get(attrs, "sdy.sharding"))),
      str(memory) if memory is not None else None,
    )

  for p, attrs in enumerate(arg_attrs):
    donor = _get(attrs, "jax.buffer_donor")
    if p in donated or donor is None or not ir.BoolAttr(donor).value:
      continue
    free = [r for r in range(len(results)) if r not in taken]
    same = [r for r in free if key(res_attrs[r], results[r]) == key(attrs, params[p])]
    dtype, dims = ctx.slots[params[p]]
    size = [
      r
      for r in free
      if ctx.slots[results[r]][0] == dtype
      and math.prod(ctx.slots[results[r]][1]) == math.prod(dims)
    ]
    if same or size:
      r = (same or size)[0]
      taken.add(r)
      out.append((p, r))
  return out


class _Captures:
  """The outer values a group of sibling regions capture, in first-use order."""

  def __init__(self):
    self.values: list[ir.Value] = []
    self.outer_slots: list[int] = []
    self._seen: set[ir.Value] = set()

  def add(self, value: ir.Value, outer_slot: int) -> None:
    if value not in self._seen:
      self._seen.add(value)
      self.values.append(value)
      self.outer_slots.append(outer_slot)


def _called_from(site: str) -> str:
  return "" if site == "unknown" else f"; called from {site}"


def _per_value_attrs(func: ir.Operation, name: str, n: int) -> list[ir.DictAttr | None]:
  """The function's per-argument (or per-result) attribute dicts; None where absent."""
  if name not in func.attributes:
    return [None] * n
  return list(ir.ArrayAttr(func.attributes[name]))


def _get(attrs: ir.DictAttr | None, key: str) -> ir.Attribute | None:
  return attrs[key] if attrs is not None and key in attrs else None
