"""Smoke tests of the benchmark harness (jax_plugins.workshop.bench); no timing assertions.

They check that a tiny case runs on both backends and lands in a well-formed CSV with its
JSON side file, that an op the plugin lacks is reported as `unsupported` rather than
ending the suite, and that the command line drops the OpenBLAS overrides only for itself.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_plugins.workshop import bench
from jax_plugins.workshop.bench import machine, registry, runner

ROOT = Path(__file__).resolve().parents[2]
# One repetition of one call: the tests check structure, not speed.
TINY = bench.Settings(reps=2, min_reps=2, min_rep_s=0.0, budget_s=0.0, warmup=1)


def test_tiny_case_runs_on_both_backends_and_writes_csv(tmp_path):
  out = tmp_path / "r.csv"
  suite = bench.run_suite(
    ["tiny_call"], quick=True, settings=TINY, out=out, progress=False, log=None, references=False
  )
  rows = bench.read_csv(out)
  assert out.read_text().splitlines()[0].split(",") == bench.COLUMNS
  assert [(r["case"], r["backend"], r["status"]) for r in rows] == [
    ("tiny_call", "workshop", "ok"),
    ("tiny_call", "cpu", "ok"),
  ]
  for r in rows:
    assert r["agree"] is True and r["max_rel_err"] == 0  # x + 1 is exact
    assert r["reps"] == 2 and 0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"]
    assert r["compile_ms"] > 0 and r["flops"] == 4 and r["bytes"] == 32
  assert rows[0]["ratio"] == pytest.approx(rows[0]["median_ms"] / rows[1]["median_ms"], rel=1e-4)
  side = json.loads(out.with_suffix(".json").read_text())
  assert side["columns"] == bench.COLUMNS
  assert {"cpu_model", "cpu_count", "versions", "openblas"} <= side["machine"].keys()
  assert side["summary"]["unsupported"] == [] and side["summary"]["errors"] == []
  assert "tiny_call" in bench.summary_text(suite)


def test_unsupported_op_is_reported_not_raised():
  # The op table gives convolution no kernel for pred (notebook 03's example: a binary
  # dilation), so compiling fails with UNIMPLEMENTED on workshop only.
  case = registry.Case(
    name="bool_dilation",
    family="test",
    sizes=(8,),
    quick_sizes=(8,),
    build=lambda n, rng: (
      (lambda x: jax.lax.conv(x > 0, jnp.ones((1, 1, 3, 3), bool), (1, 1), "SAME")),
      (np.ones((1, 1, n, n), np.float32),),
    ),
    flops=lambda n: 0,
    bytes=lambda n: 8 * n,
    label=str,
    tol=0.0,
    doc="",
  )
  ours, cpu = runner.run_point(case, 8, TINY)
  assert ours["status"] == "unsupported" and "UNIMPLEMENTED" in ours["message"]
  assert cpu["status"] == "ok" and cpu["median_ms"] > 0
  assert ours["ratio"] is None and ours["agree"] is None


def test_max_rel_err():
  ref = {"a": np.array([1.0, -4.0], np.float32), "b": np.array([np.nan, np.inf])}
  close = {"a": np.array([1.0, -4.002], np.float32), "b": np.array([np.nan, np.inf])}
  assert runner.max_rel_err(close, ref) == pytest.approx(0.002 / 4, rel=1e-3)
  moved_nan = {"a": ref["a"], "b": np.array([0.0, np.inf])}
  assert runner.max_rel_err(moved_nan, ref) == float("inf")
  assert runner.max_rel_err([ref["a"]], ref) == float("inf")  # different structure


def test_case_selection():
  names = [c.name for c in registry.select(["sum_*", "model"])]
  assert names == [
    "sum_axis0",
    "sum_axis1",
    "sum_axis2",
    "sum_all",
    "mlp_train_step",
    "mlp_train_step_dp4",
    "cnn_train_step_dp4",
    "transformer_block",
  ]
  with pytest.raises(ValueError, match="no benchmark case matches"):
    registry.select(["no_such_case"])


def test_sharded_case_runs_on_four_devices_of_both_backends():
  [case] = registry.select(["mlp_train_step_dp4"])
  ours, cpu = runner.run_point(case, 128, TINY)
  assert ours["status"] == cpu["status"] == "ok", (ours["message"], cpu["message"])
  assert ours["agree"] is True


def test_command_unsets_openblas_overrides_for_itself_only():
  env = dict(os.environ, OPENBLAS_CORETYPE="Haswell", PYTHONPATH=str(ROOT))
  result = subprocess.run(
    [sys.executable, "-m", "jax_plugins.workshop.bench", "--list", "--cases", "tiny_call"],
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
    check=True,
  )
  assert "unset OPENBLAS_CORETYPE (was 'Haswell')" in result.stdout
  assert result.stdout.splitlines()[1].startswith("tiny_call")


def test_data_movement_cases_lower_to_the_op_they_are_named_for():
  # A case meant to time one kind of copy must not turn into another (e.g. a slice that
  # jnp lowers to a gather): its jaxpr lowers to exactly one data-movement op of that kind.
  from jax_plugins.workshop.bench import cases

  assert cases.DATA_MOVEMENT_OPS
  for name, op in cases.DATA_MOVEMENT_OPS.items():
    [case] = registry.select([name])
    fn, args = case.build(8, np.random.default_rng(0))
    text = jax.jit(fn).lower(*args).as_text()
    moves = re.findall(
      r"stablehlo\.(broadcast_in_dim|slice|reverse|pad|concatenate|"
      r"dynamic_update_slice|gather|transpose)\b",
      text,
    )
    assert moves == [op], (name, moves)


def test_case_missing_its_library_is_skipped_not_built():
  import dataclasses

  [case] = registry.select(["linen_mlp_step"])
  absent = dataclasses.replace(
    case, requires=("no_such_module_for_the_bench",), build=lambda n, rng: pytest.fail("built")
  )
  assert absent.missing() == ["no_such_module_for_the_bench"]
  rows = runner.run_point(absent, 64, TINY)
  assert [r["status"] for r in rows] == ["skipped", "skipped"]
  assert "needs no_such_module_for_the_bench" in rows[0]["message"]
  suite = bench.Suite(rows=rows, machine={}, references={}, settings={})
  assert suite.summary()["skipped"] and suite.summary()["errors"] == []
  assert "skipped" in bench.point_line(rows)


def test_builder_raising_skip_is_skipped():
  def build(n, rng):
    raise registry.Skip("the model class does not import here")

  case = registry.Case(
    name="skips",
    family="test",
    sizes=(1,),
    quick_sizes=(1,),
    build=build,
    flops=lambda n: 0,
    bytes=lambda n: 0,
    label=str,
    tol=0.0,
    doc="",
  )
  rows = runner.run_point(case, 1, TINY)
  assert [(r["status"], r["message"]) for r in rows] == [
    ("skipped", "the model class does not import here")
  ] * 2


def test_x64_case_runs_in_float64_on_both_backends():
  [case] = registry.select(["dot_f64"])
  assert case.x64
  ours, cpu = runner.run_point(case, 256, TINY)
  assert ours["status"] == cpu["status"] == "ok", (ours["message"], cpu["message"])
  assert ours["agree"] is True and ours["max_rel_err"] < 1e-12
  assert not jax.config.jax_enable_x64  # only inside the case


def test_max_rel_err_compares_both_parts_of_complex_results():
  ref = np.array([1 + 1j, 2 - 2j], np.complex64)
  assert runner.max_rel_err(ref, ref) == 0
  assert runner.max_rel_err(ref.real + 1j * ref.imag * 1.5, ref) == pytest.approx(0.5)


def test_list_says_which_library_a_case_needs():
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  result = subprocess.run(
    [sys.executable, "-m", "jax_plugins.workshop.bench", "--list", "--cases", "models,library ops"],
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
    check=True,
  )
  names = [
    line.split()[0]
    for line in result.stdout.splitlines()
    if line and not line.startswith(" ") and not line.startswith("note")
  ]
  assert {"nnx_cnn_step", "gpt2_step", "fft", "dot_int8", "top_k"} <= set(names)
  for c in registry.select(["models"]):
    line = next(l for l in result.stdout.splitlines() if l.startswith(c.name + " "))
    assert ("(needs " in line) == bool(c.missing()), line


def test_log_none_is_silent_with_a_progress_bar(capsys):
  # Notebook 06 prints the point lines itself after the run; the runner must not as well.
  bench.run_suite(
    ["tiny_call"], quick=True, settings=TINY, out=None, progress=True, log=None, references=False
  )
  assert "tiny_call" not in capsys.readouterr().out


def test_best_references_keeps_each_higher_ceiling():
  # Load from other processes only lowers a measured ceiling: of two measurements, the
  # higher of each ceiling is the better estimate; the rest comes from the first.
  first = {
    "copy_gbps": 10.0,
    "cache_copy_gbps": 90.0,
    "peak_gflops": 80.0,
    "numpy_gemm_gflops": 80.0,
    "fresh_copy_ms": 9.0,
    "gemm_size": 2048,
  }
  second = {
    "copy_gbps": 12.0,
    "cache_copy_gbps": 70.0,
    "peak_gflops": 150.0,
    "numpy_gemm_gflops": 150.0,
    "fresh_copy_ms": 7.0,
    "gemm_size": 512,
  }
  best = machine.best_references(first, second)
  assert (
    best["copy_gbps"],
    best["cache_copy_gbps"],
    best["peak_gflops"],
    best["numpy_gemm_gflops"],
  ) == (12.0, 90.0, 150.0, 150.0)
  assert best["fresh_copy_ms"] == 9.0 and best["measurements"] == 2
  assert best["gemm_size"] == 512  # the size of the higher peak


def test_measured_references_are_ceilings_of_this_machine():
  refs = machine.measure_references(quick=True)
  # A copy within L2 is faster than one out of DRAM, and an f32 GEMM on any CPU of this
  # decade runs above 1 GFLOP/s; the peak is the best of the libraries measured.
  assert refs["cache_copy_gbps"] > refs["copy_gbps"] > 0
  assert refs["peak_gflops"] == max(v for k, v in refs.items() if k.endswith("_gemm_gflops"))
  assert refs["peak_gflops"] > 1 and refs["gemm_size"] in (512, 1024)
  assert refs["cache_copy_bytes"] * 4 == machine.l2_cache_bytes()
