"""Runs benchmark cases on the workshop and cpu backends of one process.

For each case and size: build the arguments (seeded by case and size), place them on each
backend's first device, compile with `jax.jit(f).lower(*args).compile()` (timed: that is
the backend's compile time, tracing excluded), make one first call (its outputs are
compared between backends), then time both backends interleaved (timing.py).

A compile or run failure on one backend does not stop the suite: UNIMPLEMENTED becomes
status `unsupported` (the plugin does not support an op yet), anything else `error`, and
the other backend is still timed. A case whose optional library is missing (its
`requires`), or whose builder raises registry.Skip, is `skipped` on both backends.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import statistics
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from . import machine, report, timing
from .registry import Case, Skip, select
from .report import BACKENDS, Suite


def _status_of(e: Exception) -> tuple[str, str]:
  text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  if isinstance(e, jax.errors.JaxRuntimeError) and text.startswith("UNIMPLEMENTED"):
    return "unsupported", text
  return "error", f"{type(e).__name__}: {text}"


def _compile(fn: Callable, args: tuple, samples: int) -> tuple[Any, float]:
  """The compiled executable and the median compile time (s) over `samples` compiles.

  Each sample jits a fresh wrapper, so JAX's caches (keyed by function identity) cannot
  hand back an executable compiled earlier, for this backend or the other one.
  """
  times = []
  compiled = None
  for _ in range(samples):
    lowered = jax.jit(lambda *a: fn(*a)).lower(*args)
    t0 = time.perf_counter()
    compiled = lowered.compile()
    times.append(time.perf_counter() - t0)
  return compiled, statistics.median(times)


def max_rel_err(ours, ref) -> float:
  """max |ours - ref| / max |ref| over each output leaf, the worst leaf; inf on a shape,
  dtype or NaN-position mismatch. Equal infinities count as equal. A complex leaf is
  compared on its real and imaginary parts together (as one real array of pairs)."""
  a_leaves, a_tree = jax.tree.flatten(ours)
  b_leaves, b_tree = jax.tree.flatten(ref)
  if a_tree != b_tree:
    return float("inf")
  worst = 0.0
  for a, b in zip(a_leaves, b_leaves):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
      return float("inf")
    if np.iscomplexobj(b):
      a, b = a.astype(np.complex128), b.astype(np.complex128)
      a, b = np.stack([a.real, a.imag]), np.stack([b.real, b.imag])
    a, b = a.astype(np.float64), b.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
      return float("inf")
    finite = np.isfinite(b)
    if not np.array_equal(a[~finite & ~np.isnan(b)], b[~finite & ~np.isnan(b)]):
      return float("inf")
    if not finite.any():
      continue
    diff = float(np.max(np.abs(a[finite] - b[finite])))
    scale = float(np.max(np.abs(b[finite])))
    worst = max(worst, diff / scale if scale > 0 else diff)
  return worst


def _row(case: Case, size: int, backend: str, flops: float, nbytes: float) -> dict:
  return {
    "case": case.name,
    "family": case.family,
    "size": size,
    "label": case.label(size),
    "backend": backend,
    "status": "ok",
    "flops": flops,
    "bytes": nbytes,
    "tol": case.tol,
    "ratio": None,
    "max_rel_err": None,
    "agree": None,
    "message": None,
  }


def run_point(case: Case, size: int, settings: timing.Settings) -> list[dict]:
  """Measures one case at one size on both backends; returns one CSV row per backend.

  A case with `x64` runs entirely (build, placement, compile, calls) with 64-bit types on.
  """
  with jax.enable_x64(True) if case.x64 else contextlib.nullcontext():
    return _run_point(case, size, settings)


def _skipped(case: Case, size: int, reason: str) -> list[dict]:
  rows = [_row(case, size, b, float(case.flops(size)), float(case.bytes(size))) for b in BACKENDS]
  for row in rows:
    row.update(status="skipped", message=reason)
  return rows


def _run_point(case: Case, size: int, settings: timing.Settings) -> list[dict]:
  missing = case.missing()
  if missing:
    return _skipped(case, size, f"needs {', '.join(missing)} (pip install -e '.[models]')")
  rng = np.random.default_rng(zlib.crc32(f"{case.name}:{size}".encode()))
  try:
    fn, args = case.build(size, rng)
  except Skip as e:
    return _skipped(case, size, str(e))
  flops, nbytes = float(case.flops(size)), float(case.bytes(size))
  rows, calls, outputs = {}, {}, {}
  for backend in BACKENDS:
    row = rows[backend] = _row(case, size, backend, flops, nbytes)
    try:
      devices = jax.devices(backend)
      if len(devices) < case.devices:
        raise RuntimeError(
          f"{case.name} needs {case.devices} {backend} devices, the "
          f"process has {len(devices)} (XLA_FLAGS="
          f"--xla_force_host_platform_device_count={case.devices})"
        )
      placed = (
        case.place(args, devices[: case.devices])
        if case.place
        else jax.device_put(args, devices[0])
      )
      compiled, compile_s = _compile(fn, placed, case.compile_samples)
      row["compile_ms"] = compile_s * 1e3
      first_s, out = timing.call_once(lambda c=compiled, p=placed: c(*p))
      row["first_call_ms"] = first_s * 1e3
      outputs[backend] = jax.tree.map(np.asarray, case.compare(out) if case.compare else out)
      calls[backend] = lambda c=compiled, p=placed: c(*p)
    except Exception as e:  # noqa: BLE001  (one failing case must not end the suite)
      row["status"], row["message"] = _status_of(e)
  gc.collect()
  for backend, st in timing.time_interleaved(calls, settings).items():
    rows[backend].update(
      median_ms=st.median * 1e3,
      p25_ms=st.p25 * 1e3,
      p75_ms=st.p75 * 1e3,
      min_ms=st.min * 1e3,
      max_ms=st.max * 1e3,
      reps=st.reps,
      calls_per_rep=st.number,
      gflops=flops / st.median / 1e9 if flops else None,
      gbps=nbytes / st.median / 1e9 if nbytes else None,
    )
  if len(calls) == len(BACKENDS):
    ratio = rows["workshop"]["median_ms"] / rows["cpu"]["median_ms"]
    err = max_rel_err(outputs["workshop"], outputs["cpu"])
    for row in rows.values():
      row.update(ratio=ratio, max_rel_err=err, agree=bool(err <= case.tol))
  return [rows[b] for b in BACKENDS]


def default_csv_path(quick: bool) -> Path:
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  return Path("bench_results") / f"bench-{stamp}{'-quick' if quick else ''}.csv"


def run_suite(
  cases: Iterable[str] | None = None,
  *,
  quick: bool = False,
  settings: timing.Settings | None = None,
  out: str | Path | None = "auto",
  progress: bool = True,
  log: Callable[[str], None] | None = print,
  references: bool = True,
  unset_env: dict[str, str] | None = None,
) -> Suite:
  """Runs the selected cases (name or family patterns; all by default) on both backends.

  Args:
    quick: the short sweeps (`Case.quick_sizes`) and timing.QUICK settings.
    settings: overrides the timing settings.
    out: CSV path; "auto": bench_results/bench-<date>.csv in the working directory;
      None: write nothing.
    progress: a tqdm bar over the case x size points (on stderr).
    log: where the per-point lines and the summary go (None: silent).
    references: measure copy bandwidths and peak GEMM for the roofline, before and after
      the cases, keeping the higher of each (a few seconds).
    unset_env: environment variables the caller removed for this run, recorded.

  Raises:
    RuntimeError: the process lacks one of the two backends (JAX_PLATFORMS must include
      both, e.g. "workshop,cpu", before JAX initializes).
    ValueError: a case pattern matches nothing.
  """
  from tqdm import tqdm

  chosen = select(cases)
  settings = settings or (timing.QUICK if quick else timing.FULL)
  for backend in BACKENDS:
    try:
      jax.devices(backend)
    except RuntimeError as e:
      raise RuntimeError(
        f"the benchmark needs the '{backend}' backend; start the process "
        f"with JAX_PLATFORMS=workshop,cpu ({e})"
      ) from e
  start = time.perf_counter()
  suite = Suite(
    rows=[],
    machine=machine.describe(unset_env),
    references={},
    settings={"quick": quick, **vars(settings), "cases": [c.name for c in chosen]},
  )
  if references:
    suite.references = machine.measure_references(quick)
  points = [(c, s) for c in chosen for s in c.sweep(quick)]
  bar = tqdm(points, disable=not progress, unit="point", desc="bench", dynamic_ncols=True)
  write = None if log is None else tqdm.write if progress else log
  for case, size in bar:
    bar.set_postfix_str(f"{case.name} {case.label(size)}"[:40])
    rows = run_point(case, size, settings)
    suite.rows += rows
    if write:
      write(report.point_line(rows))
  bar.close()
  if references:
    suite.references = machine.best_references(suite.references, machine.measure_references(quick))
  suite.machine["loadavg_at_end"] = list(os.getloadavg())
  suite.elapsed_s = time.perf_counter() - start
  if out is not None:
    report.write(suite, default_csv_path(quick) if out == "auto" else Path(out))
  if log:
    log(report.summary_text(suite))
  return suite
