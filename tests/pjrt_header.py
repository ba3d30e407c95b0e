"""What the tests need from pjrt_c_api.h (the installed xla-cpu-pjrt package's header, the one
the plugin is built against): its text, parsed slots and version, and PJRT_Api_Version as a
ctypes struct (tests/capi/test_capi_table.py, tests/new_device/test_new_device.py).
"""

from __future__ import annotations

import ctypes
import os
import re


def header_text() -> str:
  import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

  path = os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "include", "pjrt_c_api.h")
  with open(path) as f:
    return f.read()


class Header:
  """What the tests need from pjrt_c_api.h, parsed from its text."""

  def __init__(self, text: str):
    self.major = int(re.search(r"#define PJRT_API_MAJOR (\d+)", text).group(1))
    self.minor = int(re.search(r"#define PJRT_API_MINOR (\d+)", text).group(1))
    body = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", text, re.S).group(1)
    # The function slots, in order, after struct_size, extension_start, pjrt_api_version.
    self.slots = re.findall(r"_PJRT_API_STRUCT_FIELD\((\w+)\);", body)
    self.size_last_field = re.search(
      r"PJRT_Api_STRUCT_SIZE\s*=\s*PJRT_STRUCT_SIZE\(PJRT_Api,\s*(\w+)\)", text
    ).group(1)
    version = re.search(r"struct PJRT_Api_Version \{(.*?)\};", text, re.S).group(1)
    self.version_fields = re.findall(r"(\w+);", version)


class ApiVersion(ctypes.Structure):
  _fields_ = [
    ("struct_size", ctypes.c_size_t),
    ("extension_start", ctypes.c_void_p),
    ("major_version", ctypes.c_int),
    ("minor_version", ctypes.c_int),
  ]
