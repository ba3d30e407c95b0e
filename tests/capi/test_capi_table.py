"""The PJRT_Api table the plugin exports, checked with ctypes against the installed header.

jaxlib reads the table up to the struct_size and version the plugin declares and calls
several slots without a NULL check, so the table must match the header pjrt_c_api.h from
the xla-cpu-pjrt package (the one the plugin is built against) exactly: size, version and
a function in every slot.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest
from pjrt_header import ApiVersion, Header, header_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PJRT_Error_Code_UNIMPLEMENTED = 12
PJRT_NamedValue_kInt64List = 2
PJRT_NamedValue_kInt64 = 1


@pytest.fixture(scope="module")
def header():
  return Header(header_text())


@pytest.fixture(scope="module")
def api_struct(header):
  """A ctypes mirror of PJRT_Api with one c_void_p per function slot."""
  return type(
    "PJRT_Api",
    (ctypes.Structure,),
    {
      "_fields_": [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("pjrt_api_version", ApiVersion),
        *[(name, ctypes.c_void_p) for name in header.slots],
      ]
    },
  )


@pytest.fixture(scope="module")
def library():
  import jax_plugins.workshop as workshop

  workshop.preload_openblas()
  return ctypes.CDLL(workshop.library_path())


@pytest.fixture(scope="module")
def api(library, api_struct):
  get_api = library.GetPjrtApi
  get_api.restype = ctypes.POINTER(api_struct)
  get_api.argtypes = []
  pointer = get_api()
  assert pointer
  return pointer.contents


def test_header_parse_is_consistent(header):
  # The size macro names the last slot; the version struct has the layout mirrored above.
  assert header.slots[-1] == header.size_last_field
  assert len(header.slots) == len(set(header.slots)) > 100
  assert header.version_fields == [f for f, _ in ApiVersion._fields_]


def test_struct_size_matches_header(api, api_struct, header):
  # PJRT_STRUCT_SIZE(PJRT_Api, last) = offsetof(last) + sizeof(last): with 8-byte slots
  # and no padding that is the size of the mirror.
  last = getattr(api_struct, header.size_last_field)
  assert api.struct_size == last.offset + last.size == ctypes.sizeof(api_struct)


def test_version_matches_header(api, header):
  version = api.pjrt_api_version
  assert version.struct_size == ctypes.sizeof(ApiVersion)
  assert (version.major_version, version.minor_version) == (header.major, header.minor)
  assert header.major == 0


def test_every_slot_is_set(api, header):
  missing = [name for name in header.slots if not getattr(api, name)]
  assert not missing, f"NULL slots in the PJRT_Api table: {missing}"


class NamedValue(ctypes.Structure):
  class _Value(ctypes.Union):
    _fields_ = [
      ("string_value", ctypes.c_char_p),
      ("int64_value", ctypes.c_int64),
      ("int64_array_value", ctypes.POINTER(ctypes.c_int64)),
      ("float_value", ctypes.c_float),
      ("bool_value", ctypes.c_bool),
    ]

  _anonymous_ = ("value",)
  _fields_ = [
    ("struct_size", ctypes.c_size_t),
    ("extension_start", ctypes.c_void_p),
    ("name", ctypes.c_char_p),
    ("name_size", ctypes.c_size_t),
    ("type", ctypes.c_int),
    ("value", _Value),
    ("value_size", ctypes.c_size_t),
  ]


class PluginAttributesArgs(ctypes.Structure):
  _fields_ = [
    ("struct_size", ctypes.c_size_t),
    ("extension_start", ctypes.c_void_p),
    ("attributes", ctypes.POINTER(NamedValue)),
    ("num_attributes", ctypes.c_size_t),
  ]


def test_plugin_attributes(api):
  from jaxlib.mlir.dialects import stablehlo

  fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(PluginAttributesArgs))(
    api.PJRT_Plugin_Attributes
  )
  args = PluginAttributesArgs(struct_size=ctypes.sizeof(PluginAttributesArgs))
  assert fn(ctypes.byref(args)) is None  # no error
  attrs = {}
  for i in range(args.num_attributes):
    nv = args.attributes[i]
    name = ctypes.string_at(nv.name, nv.name_size).decode()
    if nv.type == PJRT_NamedValue_kInt64List:
      attrs[name] = [nv.int64_array_value[j] for j in range(nv.value_size)]
    elif nv.type == PJRT_NamedValue_kInt64:
      attrs[name] = nv.int64_value
    else:
      attrs[name] = nv.type
  as_list = lambda v: [int(p) for p in v.split(".")]  # noqa: E731
  assert attrs["stablehlo_current_version"] == as_list(stablehlo.get_current_version())
  assert attrs["stablehlo_minimum_version"] == as_list(stablehlo.get_minimum_version())
  assert isinstance(attrs["xla_version"], int)


def test_stub_returns_unimplemented_naming_itself(header):
  # Runs in a child process: if the slot stops being a stub that ignores its arguments,
  # calling it with zeroed arguments must not take the test session down.
  index = {name: i for i, name in enumerate(header.slots)}
  script = textwrap.dedent(f"""
      import ctypes
      import jax_plugins.workshop as workshop
      workshop.preload_openblas()
      lib = ctypes.CDLL(workshop.library_path())
      lib.GetPjrtApi.restype = ctypes.POINTER(ctypes.c_void_p)
      table = lib.GetPjrtApi()
      slot = lambda i: table[5 + i]  # struct_size, extension_start, 3 words of version
      call = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
      args = (ctypes.c_uint64 * 16)(128)  # struct_size first, the rest zero
      error = call(slot({index['PJRT_CopyToDeviceStream_TotalBytes']}))(ctypes.addressof(args))
      assert error, "the stub returned no error"
      code_args = (ctypes.c_uint64 * 4)(32, 0, error, 0)
      call(slot({index['PJRT_Error_GetCode']}))(ctypes.addressof(code_args))
      message_args = (ctypes.c_uint64 * 5)(40, 0, error, 0, 0)
      call(slot({index['PJRT_Error_Message']}))(ctypes.addressof(message_args))
      message = ctypes.string_at(message_args[3], message_args[4]).decode()
      destroy_args = (ctypes.c_uint64 * 3)(24, 0, error)
      call(slot({index['PJRT_Error_Destroy']}))(ctypes.addressof(destroy_args))
      print(ctypes.c_int32(code_args[3] & 0xffffffff).value)
      print(message)
      """)
  env = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
  )
  proc = subprocess.run(
    [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
  )
  assert proc.returncode == 0, proc.stderr
  code, message = proc.stdout.split("\n", 1)
  assert int(code) == PJRT_Error_Code_UNIMPLEMENTED
  assert "PJRT_CopyToDeviceStream_TotalBytes" in message
