"""The cells whose output a notebook's text describes, run on crafted results.

A sentence such as "N of M points ran on both backends" is printed by a cell from the run's
results (`jax_plugins/workshop/teach/claims.py`, `bench.report.point_counts`). Here those
cells, taken from the notebooks as they ship, run on results made up for the purpose, whose
counts are known by construction: every point run, some skipped for a missing library,
some unsupported on the workshop, one failed. The expected numbers are written out by
hand, not computed by the code under test. No JAX computation runs: a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from jax_plugins.workshop import bench
from jax_plugins.workshop.bench import report
from jax_plugins.workshop.teach import claims
from jax_plugins.workshop.teach.tracing import Call, Trace

ROOT = Path(__file__).resolve().parents[2]


def _cell(notebook: str, marker: str) -> str:
  """The source of the one code cell of notebooks/<notebook> that contains `marker`."""
  cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
  found = [
    "".join(c["source"])
    for c in cells
    if c["cell_type"] == "code" and marker in "".join(c["source"])
  ]
  assert len(found) == 1, f"{notebook}: {len(found)} code cells contain {marker!r}"
  return found[0]


def _run(source: str, namespace: dict) -> str:
  """Executes a cell's source in `namespace`; returns what it printed."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102
  return out.getvalue()


def _row(case, family, size, backend, status="ok", ratio=1.0, message=None, **extra):
  row = dict.fromkeys(report.COLUMNS)
  row.update(
    case=case,
    family=family,
    size=size,
    label=str(size),
    backend=backend,
    status=status,
    message=message,
    flops=1e6,
    bytes=1e6,
    gflops=1.0,
    median_ms=1.0,
    compile_ms=10.0,
  )
  if status == "ok":
    row.update(ratio=ratio, agree=True, max_rel_err=0.0)
  row.update(extra)
  return row


def _point(case, family, size, workshop="ok", cpu="ok", ratio=1.0, message=None):
  both = workshop == cpu == "ok"
  return [
    _row(case, family, size, "workshop", workshop, ratio if both else None, message),
    _row(case, family, size, "cpu", cpu, ratio if both else None, message if cpu != "ok" else None),
  ]


NEEDS_FLAX = "needs flax, optax (pip install -e '.[models]')"
UNIMPLEMENTED = "UNIMPLEMENTED: workshop: no kernel for stablehlo.fft at model.py:12:3"


def _all_run():
  return [
    *_point("tiny_call", "overhead", 4, ratio=1.1),
    *_point("axpb", "elementwise", 4096, ratio=0.5),
    *_point("axpb", "elementwise", 65536, ratio=0.8),
    *_point("gather", "data movement", 1024, ratio=1.92),
    *_point("scatter_add", "data movement", 1024, ratio=3.28),
    *_point("sum_all", "reduction", 32, ratio=0.5),
  ]


def _with_skipped():
  return [
    *_all_run(),
    *_point("nnx_cnn_step", "models", 32, "skipped", "skipped", message=NEEDS_FLAX),
    *_point("gpt2_step", "models", 4, "skipped", "skipped", message=NEEDS_FLAX),
    *_point("gpt2_step", "models", 8, "skipped", "skipped", message=NEEDS_FLAX),
  ]


def _with_unsupported_and_failed():
  return [
    *_with_skipped(),
    *_point("fft", "library ops", 1024, "unsupported", message=UNIMPLEMENTED),
    *_point("fft", "library ops", 2048, "unsupported", message=UNIMPLEMENTED),
    *_point("argsort", "library ops", 1024, "error", message="RuntimeError: it broke"),
  ]


# (rows, the counts cell's output written out by hand, points in the geometric mean)
SCENARIOS = {
  "all run": (
    _all_run,
    "6 of 6 points ran on both backends\n0 skipped\n0 unsupported on workshop\n0 failed\n",
    5,
  ),
  "skipped": (
    _with_skipped,
    "6 of 9 points ran on both backends\n"
    f"3 skipped (needs flax, optax (pip install -e '.[models]')): nnx_cnn_step, gpt2_step\n"
    "0 unsupported on workshop\n0 failed\n",
    5,
  ),
  "unsupported": (
    _with_unsupported_and_failed,
    "6 of 12 points ran on both backends\n"
    f"3 skipped (needs flax, optax (pip install -e '.[models]')): nnx_cnn_step, gpt2_step\n"
    "2 unsupported on workshop (UNIMPLEMENTED: workshop: no kernel for stablehlo.fft): fft\n"
    "1 failed (RuntimeError: it broke): argsort\n",
    5,
  ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_06_counts_cell_and_summary_agree(scenario, tmp_path):
  make, expected, in_geomean = SCENARIOS[scenario]
  suite = bench.Suite(rows=make(), machine={}, references={}, settings={})
  csv_path = report.write(suite, tmp_path / "results.csv")
  ns = {"bench": bench, "csv_path": csv_path}
  checks = _run(_cell("06_benchmark_against_cpu.ipynb", "rows = bench.read_csv(csv_path)"), ns)
  assert "a row per backend for every point: True" in checks
  assert "results agree wherever both ran: True" in checks
  # The cell the text "how many points ran on both backends" describes, on the rows read back.
  printed = _run(_cell("06_benchmark_against_cpu.ipynb", "point_counts(rows)"), ns)
  assert printed == expected
  # The summary at the end of a run counts the same way, from the same function.
  summary = bench.summary_text(suite)
  assert expected.strip() in summary
  assert f"geometric mean over the {in_geomean} points that ran" in summary
  assert suite.summary()["points"] == in_geomean


def test_06_three_reasons_names_the_slower_memory_bound_points():
  rows = _with_unsupported_and_failed()
  printed = _run(_cell("06_benchmark_against_cpu.ipynb", "claims.three_reasons(rows)"), {"rows": rows, "claims": claims})
  assert "tiny_call 4: ratio 1.10" in printed
  # data movement: gather 1.92 and scatter_add 3.28, geometric mean sqrt(1.92 * 3.28) = 2.51.
  assert (
    "data movement: geometric mean 2.51 over 2 points; the workshop slower at 2: "
    "scatter_add 1024 3.28, gather 1024 1.92" in printed
  )
  assert "reduction: geometric mean 0.50 over 1 points; the workshop slower at 0" in printed
  assert "matmul at its largest size: none ran" in printed


def test_06_roofline_cell_counts_points_between_the_ceilings():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np

  # Ceilings at 1 FLOP per byte: DRAM 10 GFLOP/s, L2 100; the peak is far above.
  ref = {"copy_gbps": 10.0, "cache_copy_gbps": 100.0, "peak_gflops": 1000.0, "gemm_size": 1024}
  rows = [
    *_point("a", "elementwise", 1),  # 1 GFLOP/s: below DRAM's ceiling
    _row("b", "elementwise", 1, "workshop", gflops=50.0),  # between
    _row("b", "elementwise", 1, "cpu", gflops=60.0),  # between
    _row("c", "elementwise", 1, "workshop", gflops=150.0),  # above L2's
    _row("dot_int8", "library ops", 1, "workshop", gflops=5000.0),  # bounded by neither
    *_point("tiny_call", "overhead", 4),  # no roofline
    *_point("nnx_cnn_step", "models", 32, "skipped", "skipped", message=NEEDS_FLAX),
  ]
  ns = {"rows": rows, "ref": ref, "plt": plt, "np": np}
  printed = _run(_cell("06_benchmark_against_cpu.ipynb", "claims.roofline(rows, ref)"), ns)
  plt.close("all")
  lines = printed.splitlines()
  assert lines[0].startswith(
    "2 of the 5 points drawn (one per case, size and backend; the int8 and bf16 dots aside) "
    "sit between the two ceilings"
  )
  assert "b 1 on workshop (50 GFLOP/s), b 1 on cpu (60 GFLOP/s)" in lines[0]
  assert lines[1] == "2 at or below the DRAM ceiling"
  assert lines[2] == "points above their ceiling: c 1 on workshop (150 GFLOP/s)"
  assert ns["roof"].peak_gflops == 1000.0


def _trace(*calls):
  t = Trace()
  t.calls = [Call(i, "PJRT_" + name, "", code, 0.0, 0.0, "MainThread", 0) for i, (name, code) in enumerate(calls)]
  return t


def _traces(memory_stats_code):
  compile_calls = [("Client_Compile", 0), ("Device_MemoryStats", memory_stats_code)]
  if memory_stats_code:
    compile_calls += [("Error_GetCode", 0), ("Error_Message", 0), ("Error_Destroy", 0)]
  names = "init put put_host first_call second_call fetch ready ready_again donation pmap_trace"
  traces = dict.fromkeys(names.split(), _trace())
  traces["init"] = _trace(("Plugin_Initialize", 0), ("Client_Create", 0), ("Layouts_MemoryLayout_Destroy", 0))
  traces["first_call"] = _trace(*compile_calls)
  traces["pmap_trace"] = _trace(*compile_calls, ("LoadedExecutable_Execute", 0))
  return traces


@pytest.mark.parametrize(
  ("code", "expected"),
  [
    (
      0,
      "JAX called 5 of the {n} functions of the PJRT_Api table,\n"
      "and 1 extension functions: ['Layouts_MemoryLayout_Destroy']\n"
      "no call returned an error\n",
    ),
    (
      12,
      "JAX called 8 of the {n} functions of the PJRT_Api table,\n"
      "and 1 extension functions: ['Layouts_MemoryLayout_Destroy']\n"
      "calls that returned an error: Device_MemoryStats (error code 12) x2; jaxlib read and "
      "freed each error, so 3 of the 8 are Error_ functions (Error_Destroy, Error_GetCode, "
      "Error_Message): 5 without them\n",
    ),
  ],
  ids=["solved", "starting point"],
)
def test_05_api_usage_cell_names_the_failed_calls(code, expected):
  functions = claims.pjrt_api_functions()
  assert {"Client_Compile", "Device_MemoryStats", "Error_Destroy"} <= set(functions)
  printed = _run(_cell("05_what_jax_asks.ipynb", "claims.api_usage(traces)"), _traces(code))
  assert printed == expected.format(n=len(functions))
