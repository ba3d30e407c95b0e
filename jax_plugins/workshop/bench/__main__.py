"""Command line: python -m jax_plugins.workshop.bench [--quick] [--cases PATTERNS] ...

Before JAX or numpy (and with them OpenBLAS) load, the command removes OPENBLAS_CORETYPE
and OPENBLAS_L2_SIZE from its own environment by re-executing itself without them, and
says so: some machines set them for old OpenBLAS builds, and they make the current one
pick slower kernels (about 2x on GEMM). Only this process is affected; tests and CI keep
their environment. --keep-openblas-env skips this.
"""

from __future__ import annotations

import argparse
import os
import sys

_SLOWING_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_UNSET_MARKER = "_WORKSHOP_BENCH_UNSET_ENV"  # what the parent removed, for the child's log


def _reexec_without_slowing_env(argv: list[str]) -> None:
  found = {k: os.environ[k] for k in _SLOWING_ENV if k in os.environ}
  if not found or "--keep-openblas-env" in argv:
    return
  assert "numpy" not in sys.modules and "jax" not in sys.modules, "re-exec must come first"
  env = {k: v for k, v in os.environ.items() if k not in found}
  env[_UNSET_MARKER] = ";".join(f"{k}={v}" for k, v in found.items())
  sys.stdout.flush()
  os.execve(sys.executable, [sys.executable, "-m", "jax_plugins.workshop.bench", *argv], env)


def _parse(argv: list[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    prog="python -m jax_plugins.workshop.bench",
    description="Benchmark the workshop PJRT backend against JAX's CPU backend.",
  )
  p.add_argument(
    "--quick",
    action="store_true",
    help="short size sweeps and fewer repetitions (times: docs/developing.md, 'How long things take')",
  )
  p.add_argument(
    "--cases",
    default=None,
    help="comma-separated case names, families or shell patterns, e.g. 'matmul,sum_*,model'",
  )
  p.add_argument(
    "--out",
    default="auto",
    help="results CSV (a .json side file is written beside it); default "
    "bench_results/bench-<date>.csv",
  )
  p.add_argument("--reps", type=int, default=None, help="repetitions per backend and size")
  p.add_argument(
    "--budget",
    type=float,
    default=None,
    help="seconds per backend and size; slow calls get fewer repetitions",
  )
  p.add_argument("--no-progress", action="store_true", help="no progress bar")
  p.add_argument("--list", action="store_true", help="list the cases and exit")
  p.add_argument(
    "--keep-openblas-env",
    action="store_true",
    help="do not unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE",
  )
  return p.parse_args(argv)


def main(argv: list[str]) -> int:
  _reexec_without_slowing_env(argv)
  args = _parse(argv)
  unset = dict(
    item.split("=", 1) for item in filter(None, os.environ.pop(_UNSET_MARKER, "").split(";"))
  )
  if unset:
    print(
      "note: unset "
      + ", ".join(f"{k} (was {v!r})" for k, v in unset.items())
      + " for this benchmark process: they select slower kernels in current OpenBLAS"
    )
  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # The sharded cases compare 4 workshop devices with 4 CPU-backend devices.
    os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

  import dataclasses

  from . import registry, runner, timing

  patterns = [p.strip() for p in args.cases.split(",")] if args.cases else None
  try:
    cases = registry.select(patterns)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.list:
    for c in cases:
      sizes = " | ".join(c.label(s) for s in c.sizes)
      missing = c.missing()
      needs = f" (needs {', '.join(missing)})" if missing else ""
      print(
        f"{c.name:<18} {c.family:<15} {c.doc.splitlines()[0] if c.doc else ''}{needs}\n"
        f"{'':<34} sizes: {sizes}"
      )
    return 0
  settings = timing.QUICK if args.quick else timing.FULL
  overrides = {k: v for k, v in [("reps", args.reps), ("budget_s", args.budget)] if v}
  if args.reps:
    overrides["min_reps"] = min(settings.min_reps, args.reps)
  settings = dataclasses.replace(settings, **overrides)
  runner.run_suite(
    patterns,
    quick=args.quick,
    settings=settings,
    out=None if args.out in ("", "none") else args.out,
    progress=not args.no_progress,
    unset_env=unset,
  )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
