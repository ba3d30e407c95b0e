"""The C API misuse corpus (misuse_cases.py), each case in its own process: expected an
error from the plugin for every wrong call, never a signal."""

from __future__ import annotations

import pytest

from conftest import plugin_args, run_child
from misuse_cases import CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_misuse_case(name):
  proc = run_child(["misuse_cases.py", name, *plugin_args()])
  assert proc.returncode >= 0, f"{name} died of signal {-proc.returncode}:\n{proc.stderr[-3000:]}"
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().endswith(f"ok {name}")


def test_corpus_size():
  # The corpus is the unit of the report; keep it from shrinking unnoticed.
  assert len(CASES) >= 20
