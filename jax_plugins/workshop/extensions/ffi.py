"""User FFI kernels on `workshop`: jax.ffi.register_ffi_target(..., platform="workshop").

JAX hands every FFI target registered for a platform to that platform's custom call
handler (`xla_client.register_custom_call_handler`; targets registered before the handler
exists are replayed when it is installed). Ours passes the handler's `execute` function
pointer to the plugin (`WorkshopFfiRegister`, plugin_src/kernels/ffi.cc) and remembers
the name (custom_calls.py), so that the compiler (compiler/rules/ffi.py) lowers
`custom_call @name` to an `ffi_call` instruction. The capsule is kept there for the life
of the process, as XLA keeps registered handlers.

Supported: typed FFI handlers (api_version=1) with a single execute stage (a bare capsule
or {"execute": capsule}); instantiate/prepare/initialize stages are refused.
"""

from __future__ import annotations

import ctypes
import threading

from .. import custom_calls

_lock = threading.Lock()
_installed = False


def _capsule_pointer(capsule) -> int:
  get_name = ctypes.pythonapi.PyCapsule_GetName
  get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
  get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
  get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
  return get_pointer(capsule, get_name(capsule))


def _register(name, fn, platform, api_version, traits) -> None:
  """The custom call handler JAX calls for each target registered for our platform.

  Raises:
    NotImplementedError: an untyped (api_version 0) target, or handler stages other than
      execute.
    TypeError: `fn` is neither a PyCapsule nor a dict holding one under "execute".
  """
  del platform, traits
  from .. import library_path

  name = name.decode() if isinstance(name, bytes) else str(name)
  if api_version != 1:
    raise NotImplementedError(
      f"workshop: FFI target {name!r} uses custom call API version {api_version}; "
      "only typed XLA FFI handlers (api_version=1) are supported"
    )
  if isinstance(fn, dict):
    if extra := sorted(set(fn) - {"execute"}):
      raise NotImplementedError(
        f"workshop: FFI target {name!r}: handler stages {extra} are not supported (execute only)"
      )
    fn = fn["execute"]
  if type(fn).__name__ != "PyCapsule":
    raise TypeError(f"workshop: FFI target {name!r} must be a PyCapsule, got {type(fn)}")
  lib = ctypes.CDLL(library_path())
  lib.WorkshopFfiRegister.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
  with _lock:
    lib.WorkshopFfiRegister(name.encode(), _capsule_pointer(fn))
    custom_calls.add_ffi_target(name, fn)


def install(platform: str) -> None:
  """Makes jax.ffi.register_ffi_target(..., platform=`platform`) reach the plugin."""
  global _installed
  if _installed:
    return
  from jax._src.lib import xla_client

  xla_client.register_custom_call_handler(platform, _register)
  _installed = True
