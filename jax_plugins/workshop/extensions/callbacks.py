"""Host callbacks on `workshop`: jax.pure_callback, io_callback, jax.debug.callback/print.

JAX lowers these through `jax._src.callback.emit_python_callback`, which refuses every
platform but cpu/cuda/rocm/tpu, and registers `debug_callback`/`debug_print` (and
checkify's runtime `check`) lowerings only for those platforms. `install()` (from
`initialize()`) registers those primitives' lowerings for `workshop`: each is JAX's own
rule (so effects, tokens and shardings are handled as on the CPU backend) run while
`emit_python_callback` is redirected to `_emit_workshop_callback`, which emits

    stablehlo.custom_call @workshop_python_callback(token?, operands...)
        {mhlo.backend_config = {callback_id = N : ui64}, has_side_effect = ...}

The compiler (compiler/rules/callback.py) turns it into a `host_callback` instruction and
the executor (plugin_src/kernels/callback.cc) calls `lookup(N)` once when the plan is
prepared and the returned HostCallback on every run, with the GIL.

`jax.debug.inspect_array_sharding` (and `visualize_array_sharding` inside jit) is a
callback the compiler calls, not the program: JAX's rule emits `custom_call
@InspectSharding` whose backend_config is a key from `xla_client.
encode_inspect_sharding_callback`, and XLA's SPMD partitioner calls it with the sharding
it chose. While JAX's rule lowers for workshop, that encoder is ours (`_inspectors`, ids
again), and the compiler queues the sharding Shardy gave the operand
(compiler/spmd/partition.py; replicated, or manual in a shard_map body, otherwise) in
custom_calls.py, whose delivery calls them once the program compiled.

Lifetime: `_live` maps ids to HostCallbacks weakly; the lowering's keepalive and
host_callbacks lists (held by JAX's Lowered/Compiled objects and jaxlib's executable) and
the compiled plan (a strong reference, dropped under the GIL when the executable is
destroyed) keep each one alive. So nothing leaks when executables go away, and an
executable never calls a freed object.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from .. import custom_calls
from ..custom_calls import CALLBACK_TARGET, INSPECT_PREFIX, PARTITIONED_CALLBACK_TARGET

_ids = itertools.count(1)
_lock = threading.Lock()
_live: weakref.WeakValueDictionary[int, HostCallback] = weakref.WeakValueDictionary()
# The name of the user's function whose lowering is running (set by the rule wrappers).
_naming = threading.local()


class HostCallback:
  """What one lowered callback site calls: bytes in, checked bytes out.

  Attributes:
    id: the key the custom call carries.
    name: the user's function, for error messages.
  """

  def __init__(self, fn, name: str, operand_avals: Sequence, result_avals: Sequence):
    self._fn = fn
    self.name = name
    self._operands = [(np.dtype(a.dtype), tuple(a.shape)) for a in operand_avals]
    self._results = [(np.dtype(a.dtype), tuple(a.shape)) for a in result_avals]
    with _lock:
      self.id = next(_ids)
      _live[self.id] = self

  def __call__(
    self, views: list[memoryview], shapes: Sequence[tuple[int, ...]] | None = None
  ) -> list[np.ndarray]:
    """Runs the callback on operand bytes; returns each result's bytes (uint8, C order).

    `shapes`: the operands' shapes in the running program (the executor passes them); a
    partitioned callback in a sharded jit gets its shards, not the global shapes JAX
    lowered it with. Default: the lowered shapes.

    Raises:
      RuntimeError: wrong number of results, or a result of the wrong shape or dtype
        (after JAX's canonicalization, as on the CPU backend).
      Whatever the user's function raises.
    """
    from jax._src import dtypes

    if len(views) != len(self._operands):
      raise RuntimeError(
        f"callback {self.name} got {len(views)} operands, expected {len(self._operands)}"
      )
    # Copies: the executor frees the operand buffers after the call, and the callback may
    # keep its arguments (io_callback appending them to a list).
    if shapes is None:
      shapes = [shape for _, shape in self._operands]
    args = [
      np.frombuffer(v, dtype).reshape(shape).copy()
      for v, (dtype, _), shape in zip(views, self._operands, shapes)
    ]
    outs = self._fn(*args)
    outs = () if outs is None else tuple(outs)
    if len(outs) != len(self._results):
      raise RuntimeError(
        f"callback {self.name} returned {len(outs)} results, expected {len(self._results)}"
      )
    checked = []
    for i, (out, (dtype, shape)) in enumerate(zip(outs, self._results)):
      out = dtypes.canonicalize_value(np.asarray(out))
      if out.shape != shape:
        raise RuntimeError(
          f"callback {self.name}: incorrect output shape for return value "
          f"#{i}: expected {shape}, actual {out.shape}"
        )
      if out.dtype != dtype:
        raise RuntimeError(
          f"callback {self.name}: incorrect output dtype for return value "
          f"#{i}: expected {dtype}, actual {out.dtype}"
        )
      # Raw bytes: the buffer protocol can't describe ml_dtypes' bfloat16 and friends.
      checked.append(np.ascontiguousarray(out).reshape(-1).view(np.uint8))
    return checked


def lookup(callback_id: int) -> HostCallback:
  """The live HostCallback with `callback_id` (called by the executor's prepare).

  Raises:
    KeyError: no such callback in this process (a serialized executable from another
      process, or one whose Python callbacks were all freed).
  """
  callback = _live.get(callback_id)
  if callback is None:
    raise KeyError(
      f"callback {callback_id} is not alive in this process; executables "
      "with host callbacks can be loaded only while the program that "
      "lowered them exists"
    )
  return callback


def _callable_name(fn) -> str:
  # JAX wraps the user's function (_FlatCallback, functools.partial, ...): unwrap it.
  for _ in range(8):
    inner = getattr(fn, "callback_func", None) or getattr(fn, "func", None)
    if inner is None:
      break
    fn = inner
  return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _emit_workshop_callback(
  ctx,
  callback,
  token,
  operands,
  operand_avals,
  result_avals,
  *,
  has_side_effect,
  returns_token=True,
  partitioned=False,
  sharding=None,
):
  """`emit_python_callback` for `workshop` (same signature and results)."""
  del returns_token  # Every device runs its own program's callback.
  if partitioned and result_avals:
    raise ValueError("Partitioned callback not supported with return values.")
  from jax._src import config, core, ffi
  from jax._src.interpreters import mlir
  from jax._src.sharding_impls import SdyArray, SdyArrayList

  name = getattr(_naming, "name", None) or _callable_name(callback)
  host_callback = HostCallback(callback, name, operand_avals, result_avals)
  ctx.module_context.add_keepalive(host_callback)
  # As on the CPU backend: JAX then never writes the executable to the persistent
  # compilation cache (another process could not resolve the callback id), and jaxlib
  # keeps the callback with the executable.
  ctx.module_context.add_host_callback(host_callback)
  if token:
    operands = [token, *operands]
    if (
      config.use_shardy_partitioner.value
      and isinstance(sharding, SdyArrayList)
      and len(ctx.avals_out) > 0
    ):
      # As the CPU lowering: a sharding per result, the token's first.
      sharding = SdyArrayList(
        (
          SdyArray(
            mesh_shape=(),
            dim_shardings=(),
            logical_device_ids=sharding.shardings[0].logical_device_ids,
          ),
          *sharding.shardings,
        )
      )
    ctx = dataclasses.replace(
      ctx,
      avals_in=[core.abstract_token, *ctx.avals_in],
      avals_out=[core.abstract_token, *ctx.avals_out],
    )
  if partitioned:
    # Not pinned to one device (the MAXIMAL sharding JAX passes): the partitioner keeps
    # the operands' shardings and every device runs it on its shards.
    sharding = None
  op = ffi.build_ffi_lowering_function(
    PARTITIONED_CALLBACK_TARGET if partitioned else CALLBACK_TARGET, has_side_effect=has_side_effect
  )(ctx, *operands, callback_id=np.uint64(host_callback.id))
  if sharding is not None:
    mlir.set_sharding(ctx.module_context, op, sharding)
  results = list(op.results)
  if token:
    token, *results = results
  return results, token, host_callback


def _named_rule(rule, describe):
  """`rule` run with emit_python_callback going to workshop and the callback named."""

  def lower(ctx, *args, **params):
    previous = getattr(_naming, "name", None)
    _naming.name = describe(params)
    try:
      return rule(ctx, *args, **params)
    finally:
      _naming.name = previous

  return lower


# key id -> JAX's `_hlo_sharding_callback(hlo_sharding)` (JAX's keepalive holds it).
_inspectors: weakref.WeakValueDictionary[int, object] = weakref.WeakValueDictionary()
_lowering_for_workshop = threading.local()


def _encode_inspector(fn) -> str:
  with _lock:
    key = next(_ids)
    _inspectors[key] = fn
  return f"{INSPECT_PREFIX}{key}"


def _deliver_inspections(items: list[custom_calls.Inspection]) -> None:
  """Calls each answered inspector with an xla_client.HloSharding, as XLA's partitioner
  does (custom_calls.deliver_inspections, once the program compiled).

  Raises:
    Whatever the user's callback raises (the compile fails, as on XLA:CPU).
  """
  from jax._src.lib import xla_client
  from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

  for key, mesh_axes, dims, manual in items:
    fn = _inspectors.get(key)
    if fn is None:
      continue  # Its Lowered object is gone: nobody can observe the answer.
    if manual:
      hlo = xla_client.HloSharding.manual()
    elif dims is None or not any(dims):
      hlo = xla_client.HloSharding.replicate()
    else:
      mesh = AbstractMesh(tuple(n for _, n in mesh_axes), tuple(a for a, _ in mesh_axes))
      spec = PartitionSpec(*[None if not d else d[0] if len(d) == 1 else d for d in dims])
      hlo = NamedSharding(mesh, spec)._to_xla_hlo_sharding(len(dims))  # pylint: disable=protected-access
    fn(hlo)


_installed = False


def install(platform: str) -> None:
  """Registers the callback lowerings for `platform`. Idempotent."""
  global _installed
  if _installed:
    return
  from jax._src import callback as callback_lib
  from jax._src import checkify
  from jax._src import debugging
  from jax._src.interpreters import mlir
  from jax.interpreters import mlir as public_mlir

  original = callback_lib.emit_python_callback

  def emit_python_callback(ctx, *args, **kwargs):
    if tuple(ctx.module_context.platforms) == (platform,):
      return _emit_workshop_callback(ctx, *args, **kwargs)
    return original(ctx, *args, **kwargs)

  # Both callback.py and debugging.py look the function up on the module at call time;
  # rules elsewhere (jax.experimental.sparse's spsolve, users' own) use the public alias.
  callback_lib.emit_python_callback = emit_python_callback
  public_mlir.emit_python_callback = emit_python_callback

  from jax._src.lib import xla_client

  original_encode = xla_client.encode_inspect_sharding_callback

  def encode_inspect_sharding_callback(fn):
    if getattr(_lowering_for_workshop, "active", False):
      return _encode_inspector(fn)
    return original_encode(fn)

  # debugging.py looks it up on the module at call time.
  xla_client.encode_inspect_sharding_callback = encode_inspect_sharding_callback
  custom_calls.set_inspection_delivery(_deliver_inspections)

  def inspect_sharding_lowering(ctx, *args, **params):
    previous = getattr(_lowering_for_workshop, "active", False)
    _lowering_for_workshop.active = True
    try:
      return debugging._inspect_sharding_lowering_rule(ctx, *args, **params)  # pylint: disable=protected-access
    finally:
      _lowering_for_workshop.active = previous

  mlir.register_lowering(
    debugging.inspect_sharding_p, inspect_sharding_lowering, platform=platform, cacheable=False
  )

  by_callback = lambda params: _callable_name(params["callback"])
  rules = [
    (callback_lib.pure_callback_p, callback_lib.pure_callback_lowering, by_callback),
    (callback_lib.io_callback_p, callback_lib.io_callback_lowering, by_callback),
    (debugging.debug_callback_p, debugging.debug_callback_lowering, by_callback),
    (
      debugging.debug_print_p,
      debugging.debug_print_lowering_rule,
      lambda params: f"jax.debug.print({params['fmt']!r})",
    ),
    # checkify.check inside jit with jax_experimental_unsafe_xla_runtime_errors.
    (checkify.check_p, checkify.check_lowering_rule, lambda params: "checkify.check"),
  ]
  for primitive, rule, describe in rules:
    # Not cacheable: every lowering must register its own HostCallback.
    mlir.register_lowering(
      primitive, _named_rule(rule, describe), platform=platform, cacheable=False
    )
  # A callback still queued or running when the interpreter finalizes is ended by CPython
  # when it next takes the GIL, inside pybind11's GIL guard, which aborts the process:
  # finish every queued program first (registered after JAX's own exit handlers, so it
  # runs before them, while the backend still exists).
  atexit.register(_drain_effects)
  _installed = True


# How long exiting waits for programs with host callbacks queued before it (a callback
# that never returns, or daemon threads that queued thousands, must not hold the exit up:
# XLA:CPU runs such programs on the caller's thread and has nothing to wait for), and then
# for callbacks running in Python.
_EXIT_WAIT_SECONDS = 5.0


def _drain_effects() -> None:
  """At exit: JAX's effects barrier, then every program still queued on a workshop device
  (jax.effects_barrier() does not cover them all: pmap's C++ dispatch keeps no runtime
  tokens), waited for with the GIL released (ctypes.CDLL releases it) so their callbacks
  can run."""
  import ctypes

  try:
    import jax

    jax.effects_barrier()
  except Exception:  # pylint: disable=broad-except
    pass  # Exiting anyway; an effect's error was already reported to its caller.
  from .. import library_path

  library = ctypes.CDLL(library_path())
  wait = library.WorkshopWaitForPrograms
  wait.argtypes, wait.restype = [ctypes.c_double], ctypes.c_int64
  wait(_EXIT_WAIT_SECONDS)
  # From now on no plugin thread enters Python (runtime/python_gate.h): a callback of a
  # program launched later (a daemon thread's) fails instead, and Python references held
  # by programs destroyed later are leaked, not released on a thread CPython would end.
  close = library.WorkshopClosePython
  close.argtypes, close.restype = [ctypes.c_double], ctypes.c_int
  close(_EXIT_WAIT_SECONDS)
