"""The custom calls the plugin's extensions put in programs and its compiler lowers.

The extensions (extensions/) make JAX emit custom calls for host callbacks, user FFI
targets and `jax.debug.inspect_array_sharding`; the compiler (compiler/rules/callback.py,
rules/ffi.py, spmd/partition.py, compile.py) lowers or answers them. What both sides must
agree on lives here: the target names, the FFI targets the user registered, and the
queue of inspect_array_sharding answers. Both packages import this module; it imports
neither (the extensions are installed when JAX starts, and importing the compiler loads
MLIR, so they must not import it then).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

# A host callback (jax.pure_callback, io_callback, jax.debug.callback/print).
CALLBACK_TARGET = "workshop_python_callback"
# jax.debug.callback(..., partitioned=True): each device calls it on its own shards, in a
# sharded jit too (XLA:CPU's xla_ffi_partitioned_python_cpu_callback); no results.
PARTITIONED_CALLBACK_TARGET = "workshop_partitioned_python_callback"
INSPECT_TARGET = "InspectSharding"  # JAX's custom call for inspect_array_sharding
# The start of the backend_config of an InspectSharding call lowered for workshop.
INSPECT_PREFIX = "workshop_inspect:"

_lock = threading.Lock()
_ffi_targets: dict[str, object] = {}  # name -> the registered capsule (kept alive)


def add_ffi_target(name: str, capsule: object) -> None:
  """Records that `name` is a user FFI target the plugin can call (extensions/ffi.py),
  keeping `capsule` alive for the life of the process, as XLA keeps registered handlers."""
  with _lock:
    _ffi_targets[name] = capsule


def is_ffi_target(name: str) -> bool:
  """Whether the user registered `name` for workshop (jax.ffi.register_ffi_target)."""
  with _lock:
    return name in _ffi_targets


# One inspection answer: (inspector id, mesh axes (name, size), per dim the axis names or
# None for replicated, manual).
Inspection = tuple[int, tuple[tuple[str, int], ...], tuple[tuple[str, ...], ...] | None, bool]
_pending = threading.local()
_deliver: Callable[[list[Inspection]], None] | None = None


def inspection(
  key: str,
  mesh_axes: Sequence[tuple[str, int]],
  dims: Sequence[Sequence[str]] | None,
  manual: bool = False,
) -> None:
  """Queues the answer for the inspect_array_sharding call `key` (the custom call's
  backend_config): the operand is manual (a shard_map body), replicated (`dims` None) or
  sharded along `dims` (per dimension, the mesh axis names in order) over a mesh with
  `mesh_axes` (name, size). Delivered by `deliver_inspections` once compiling succeeds, so
  a retried compile (partitioning after a direct lowering failed) answers once.

  Raises:
    ValueError: `key` is not one of ours (the rule ran for another platform).
  """
  if not key.startswith(INSPECT_PREFIX):
    raise ValueError(f"workshop: InspectSharding key {key!r} was not made for workshop")
  if not hasattr(_pending, "items"):
    _pending.items = []
  _pending.items.append(
    (
      int(key[len(INSPECT_PREFIX) :]),
      tuple(mesh_axes),
      None if dims is None else tuple(map(tuple, dims)),
      manual,
    )
  )


def discard_inspections() -> None:
  """Forgets queued answers (a compile attempt that will be retried or failed)."""
  _pending.items = []


def set_inspection_delivery(deliver: Callable[[list[Inspection]], None]) -> None:
  """`deliver(answers)` calls the user's inspectors (extensions/callbacks.py installs it)."""
  global _deliver
  _deliver = deliver


def deliver_inspections() -> None:
  """Hands the queued answers to the delivery extensions/callbacks.py installed (none
  without it: then no InspectSharding call was made for workshop).

  Raises:
    Whatever the user's callback raises (the compile fails, as on XLA:CPU).
  """
  items, _pending.items = getattr(_pending, "items", []), []
  if _deliver is not None:
    _deliver(items)
