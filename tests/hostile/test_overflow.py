"""Shapes whose element count or byte size overflows int64, through the C API of this plugin
and of XLA's CPU plugin (the reference for C API behaviour): both reject every one."""

from __future__ import annotations

import os

import pytest

from conftest import run_child

SCRIPT = """
import ctypes, sys
from pjrt import Api, int64s
from misuse_cases import OVERFLOW_DIMS
api = Api(sys.argv[1] if len(sys.argv) > 1 else None)
client = api.client()
device = api.devices(client)[0]
data = (ctypes.c_char * 64)()
for dims in OVERFLOW_DIMS:
  arr, p = int64s(dims)
  a = api.args("PJRT_Client_BufferFromHostBuffer", client=client, data=ctypes.addressof(data),
               type=11, dims=p, num_dims=len(dims), host_buffer_semantics=0, device=device)
  err = api.error(api.call("PJRT_Client_BufferFromHostBuffer", a))
  print(len(dims), dims[:3], err[0] if err else "ACCEPTED", (err[1] if err else "")[:160])
"""


def xla_cpu_plugin():
  import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

  path = os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "xla_cpu_pjrt.so")
  if not os.path.exists(path):
    pytest.skip("XLA's CPU plugin is not installed")
  return path


@pytest.mark.parametrize("which", ["workshop", "xla_cpu"])
def test_overflowing_dims_are_rejected(which):
  args = ["-c", SCRIPT] + ([xla_cpu_plugin()] if which == "xla_cpu" else [])
  proc = run_child(args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert len(lines) == 6
  for line in lines:
    assert "ACCEPTED" not in line, line
    if which == "workshop":
      assert " 3 " in line, line  # INVALID_ARGUMENT
