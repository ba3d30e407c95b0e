"""Times the commands whose durations docs/developing.md gives ("How long things take").

    python tools/measure_times.py [--steps quick,full,notebook06] [--json out.json]

Runs each step as its own process, one after the other, from the repository root, with
this interpreter (the environment the README's set-up makes):

  quick       python -m jax_plugins.workshop.bench --quick   (results into a temporary folder)
  full        python -m jax_plugins.workshop.bench           (the full sweeps)
  notebook06  jupyter nbconvert --execute of notebooks/06_benchmark_against_cpu.ipynb,
              written to a temporary folder (the notebook in notebooks/ is not changed)

and prints, per step, the wall time and the CPU time of the step's processes (user +
system, children included, from getrusage), then the date, the core count (`nproc`: the
CPUs this process may use) and the 1-minute load average before the first step and after
the last. The load average counts every process on the machine: on a shared machine,
wall time grows with it while CPU time does not, so the CPU time says what the command
costs and the wall time what a reader waits under that load. Times are seconds. The
`models` cases run only where their optional libraries are installed (`.[models]`); the
output says whether they were.

Errors: a step that exits non-zero stops the script with its exit code and the end of
its output.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "notebooks/06_benchmark_against_cpu.ipynb"


def _steps(tmp: Path) -> dict[str, tuple[str, list[str]]]:
  bench = [sys.executable, "-m", "jax_plugins.workshop.bench", "--no-progress"]
  return {
    "quick": (
      "python -m jax_plugins.workshop.bench --quick",
      [*bench, "--quick", "--out", str(tmp / "quick.csv")],
    ),
    "full": ("python -m jax_plugins.workshop.bench", [*bench, "--out", str(tmp / "full.csv")]),
    "notebook06": (
      f"jupyter nbconvert --execute {NOTEBOOK}",
      [
        sys.executable,
        "-m",
        "jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--ExecutePreprocessor.timeout=1800",
        "--output-dir",
        str(tmp),
        NOTEBOOK,
      ],
    ),
  }


def _children_cpu_s() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def measure(names: list[str]) -> dict:
  """Runs the steps `names`; returns {"machine": {...}, "steps": [{name, command, wall_s, cpu_s}]}."""
  with tempfile.TemporaryDirectory() as tmp:
    steps = _steps(Path(tmp))
    unknown = [n for n in names if n not in steps]
    if unknown:
      raise SystemExit(f"unknown steps {unknown}; known: {', '.join(steps)}")
    machine = {
      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
      "nproc": len(os.sched_getaffinity(0)),
      "loadavg_before": os.getloadavg()[0],
      "models_extra": importlib.util.find_spec("flax") is not None,
    }
    # The notebook's kernel runs this interpreter (a kernelspec "python3" of its own, first
    # on JUPYTER_PATH), not whichever environment's kernelspec Jupyter would find first.
    spec = Path(tmp) / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
      json.dumps(
        {
          "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
          "display_name": "Python 3",
          "language": "python",
        }
      )
    )
    env = dict(
      os.environ,
      JUPYTER_PATH=os.pathsep.join([str(spec.parents[1]), os.environ.get("JUPYTER_PATH", "")]),
    )
    results = []
    for name in names:
      shown, argv = steps[name]
      print(f"running {shown} ...", file=sys.stderr, flush=True)
      cpu0, t0 = _children_cpu_s(), time.perf_counter()
      proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
      wall, cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0
      if proc.returncode:
        sys.stderr.write((proc.stdout + proc.stderr)[-4000:])
        raise SystemExit(proc.returncode)
      results.append({"name": name, "command": shown, "wall_s": wall, "cpu_s": cpu})
      print(f"  {wall:.0f} s wall, {cpu:.0f} s CPU", file=sys.stderr, flush=True)
    machine["loadavg_after"] = os.getloadavg()[0]
  return {"machine": machine, "steps": results}


def report(found: dict) -> str:
  m = found["machine"]
  width = max(len(s["command"]) for s in found["steps"])
  lines = [f"{'command':<{width}} {'wall s':>7} {'CPU s':>7}"]
  lines += [f"{s['command']:<{width}} {s['wall_s']:7.0f} {s['cpu_s']:7.0f}" for s in found["steps"]]
  lines.append(
    f"{m['date']}, nproc {m['nproc']}, load average {m['loadavg_before']:.1f} before, "
    f"{m['loadavg_after']:.1f} after; models cases "
    + ("ran (flax installed)" if m["models_extra"] else "skipped (no flax)")
  )
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--steps", default="quick,full,notebook06", help="comma-separated steps")
  p.add_argument("--json", type=Path, help="also write the results as JSON here")
  args = p.parse_args(argv)
  found = measure([s for s in args.steps.split(",") if s])
  print(report(found))
  if args.json:
    args.json.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
  main()
