"""Benchmarks the workshop backend against JAX's CPU backend, side by side.

    python -m jax_plugins.workshop.bench              # the full suite
    python -m jax_plugins.workshop.bench --quick      # short sweeps, fewer repetitions
    python -m jax_plugins.workshop.bench --cases 'matmul,sum_*' --out results.csv
    python -m jax_plugins.workshop.bench --list

From Python (the process must have both backends, JAX_PLATFORMS=workshop,cpu):

    from jax_plugins.workshop import bench
    suite = bench.run_suite(["matmul"], quick=True)
    suite.rows, suite.geomean(), suite.worst()

Every case runs on both backends in the same process, interleaved, and its results are
compared, so the benchmark is also a correctness check. Modules: registry.py (the Case
type and the registry), cases.py (the programs, their FLOP/byte models), timing.py
(interleaved timing), runner.py (compile, run, compare), machine.py (machine description
and roofline references), report.py (CSV, JSON side file, summary).

This package imports JAX lazily: `python -m` imports it before __main__ has had the chance
to adjust the environment.
"""

from __future__ import annotations


def __getattr__(name):
  if name in ("run_suite", "run_point", "max_rel_err"):
    from . import runner

    return getattr(runner, name)
  if name in (
    "Suite",
    "COLUMNS",
    "BACKENDS",
    "read_csv",
    "summary_text",
    "point_line",
    "point_counts",
    "PointCounts",
  ):
    from . import report

    return getattr(report, name)
  if name in ("all_cases", "select", "Case"):
    from . import registry

    return getattr(registry, name)
  if name in ("FULL", "QUICK", "Settings"):
    from . import timing

    return getattr(timing, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
