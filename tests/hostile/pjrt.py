"""A ctypes view of a PJRT plugin's C API, built from the installed pjrt_c_api.h.

Every Args struct of the header becomes a ctypes.Structure (pointers as c_void_p, enums as
c_int), so tests can call any slot with arguments that are wrong on purpose. Used only by
the hostile suite, always inside a child process: a crash must not take pytest down.
"""

from __future__ import annotations

import ctypes
import os
import re

INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12

_SCALARS = {
  "size_t": ctypes.c_size_t,
  "int": ctypes.c_int,
  "bool": ctypes.c_bool,
  "int64_t": ctypes.c_int64,
  "int32_t": ctypes.c_int32,
  "uint64_t": ctypes.c_uint64,
  "intptr_t": ctypes.c_ssize_t,
  "uintptr_t": ctypes.c_size_t,
  "float": ctypes.c_float,
}


def header_text() -> str:
  import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

  path = os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "include", "pjrt_c_api.h")
  with open(path) as f:
    return f.read()


def _ctype(decl: str):
  decl = decl.replace("const ", "").strip()
  if "*" in decl or "(" in decl:
    return ctypes.c_void_p
  words = decl.split()
  base = " ".join(words[:-1])
  if base in _SCALARS:
    return _SCALARS[base]
  if base.startswith("PJRT_") and base.endswith("Callback"):
    return ctypes.c_void_p  # function pointer typedefs
  if base == "PJRT_Buffer_MemoryLayout":
    return ctypes.c_uint64 * 12  # embedded by value (Buffer_GetMemoryLayout); opaque here
  return ctypes.c_int  # enums


def _field_name(decl: str) -> str:
  m = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
  if m:
    return m.group(1)
  return decl.replace("*", " ").split()[-1]


class Header:
  def __init__(self, text: str | None = None):
    text = text or header_text()
    body = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", text, re.S).group(1)
    self.slots = re.findall(r"_PJRT_API_STRUCT_FIELD\((\w+)\);", body)
    self.args = {}
    for m in re.finditer(r"struct (PJRT_\w+_Args) \{(.*?)\};", text, re.S):
      fields = []
      for decl in re.sub(r"//[^\n]*", "", m.group(2)).split(";"):
        decl = " ".join(decl.split())
        if decl:
          fields.append((_field_name(decl), _ctype(decl)))
      self.args[m.group(1)] = type(m.group(1), (ctypes.Structure,), {"_fields_": fields})


class Api:
  """The plugin's table plus helpers to call slots and read errors."""

  def __init__(self, path: str | None = None, header: Header | None = None):
    if path is None:
      import jax_plugins.workshop as workshop

      workshop.preload_openblas()
      path = workshop.library_path()
    self.lib = ctypes.CDLL(path)
    self.lib.GetPjrtApi.restype = ctypes.POINTER(ctypes.c_void_p)
    self.table = self.lib.GetPjrtApi()
    self.header = header or Header()
    self.index = {name: i for i, name in enumerate(self.header.slots)}

  def slot(self, name: str) -> int:
    return self.table[5 + self.index[name]]  # struct_size, extension_start, 3 version words

  def args(self, name: str, **fields):
    cls = self.header.args[f"{name}_Args"]
    a = cls(**fields)
    if "struct_size" not in fields:
      a.struct_size = ctypes.sizeof(cls)
    return a

  def raw(self, name: str, pointer) -> int | None:
    """Calls slot `name` with an arbitrary pointer (None: NULL); returns the PJRT_Error*."""
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(self.slot(name))
    return fn(pointer)

  def call(self, name: str, args) -> int | None:
    return self.raw(name, ctypes.addressof(args))

  def error(self, error: int | None, destroy: bool = True):
    """(code, message) of a PJRT_Error*, or None for no error."""
    if not error:
      return None
    code = self.args("PJRT_Error_GetCode", error=error)
    assert not self.call("PJRT_Error_GetCode", code)
    message = self.args("PJRT_Error_Message", error=error)
    self.call("PJRT_Error_Message", message)
    text = ctypes.string_at(message.message, message.message_size).decode()
    if destroy:
      self.call("PJRT_Error_Destroy", self.args("PJRT_Error_Destroy", error=error))
    return code.code, text

  def ok(self, name: str, args):
    err = self.error(self.call(name, args))
    assert err is None, f"{name}: {err}"
    return args

  def expect(self, name: str, args, code: int, *fragments: str):
    err = self.error(self.call(name, args))
    assert err is not None, f"{name} accepted what it should reject"
    assert err[0] == code, f"{name}: code {err[0]} ({err[1]}), expected {code}"
    for fragment in fragments:
      assert fragment in err[1], f"{name}: {fragment!r} not in {err[1]!r}"
    return err[1]

  # ---- Common objects.
  def client(self):
    return self.ok("PJRT_Client_Create", self.args("PJRT_Client_Create")).client

  def devices(self, client):
    a = self.ok("PJRT_Client_Devices", self.args("PJRT_Client_Devices", client=client))
    arr = ctypes.cast(a.devices, ctypes.POINTER(ctypes.c_void_p))
    return [arr[i] for i in range(a.num_devices)]

  def default_memory(self, device):
    return self.ok(
      "PJRT_Device_DefaultMemory", self.args("PJRT_Device_DefaultMemory", device=device)
    ).memory

  def buffer(self, client, values, dims, type_code=11):
    data = (ctypes.c_float * len(values))(*values)
    dims_arr = (ctypes.c_int64 * len(dims))(*dims)
    a = self.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=ctypes.addressof(data),
      type=type_code,
      dims=ctypes.addressof(dims_arr),
      num_dims=len(dims),
      host_buffer_semantics=0,
      device=self.devices(client)[0],
    )
    self.ok("PJRT_Client_BufferFromHostBuffer", a)
    self.call("PJRT_Event_Destroy", self.args("PJRT_Event_Destroy", event=a.done_with_host_buffer))
    return a.buffer


def int64s(values):
  arr = (ctypes.c_int64 * max(1, len(values)))(*values)
  return arr, ctypes.addressof(arr)
