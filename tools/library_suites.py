"""Run a JAX library's own test suite on workshop and on JAX's CPU backend, and compare.

The suites are not part of the installed wheels, and this tool fetches nothing: give it a
directory holding the suite (its tests and the pytest configuration they expect). The
`extract` command writes one from a local git mirror at the tag of the installed version:

    python tools/library_suites.py extract --git-dir /path/to/equinox.git --tag v0.13.8 \\
        --dest /tmp/suites/equinox tests pyproject.toml
    python tools/library_suites.py extract --git-dir /path/to/optax.git --tag v0.2.8 \\
        --dest /tmp/suites/optax optax pyproject.toml

`run` runs pytest twice in that directory with the same selection: once with workshop as
the default backend (JAX_PLATFORMS=workshop,cpu) and once on the CPU backend alone
(JAX_PLATFORMS=cpu), each writing a JUnit XML report into --out, then prints what
`compare` prints:

    python tools/library_suites.py run --suite /tmp/suites/equinox --out /tmp/eqx-whole \\
        --timeout 300 -- tests
    python tools/library_suites.py run --suite /tmp/suites/equinox --out /tmp/eqx-while \\
        -- tests/test_while_loop.py -k checkpointed
    python tools/library_suites.py compare --out /tmp/eqx-whole

The report: per backend the counts of passed / failed / errors / skipped, the tests that
pass on cpu and fail (or error) on workshop, those the suite skips on workshop (its own
checks of jax.default_backend(): equinox's test_noinline, test_sharding), and the tests more than --slower (3) times
slower on workshop than on cpu whose workshop time also exceeds --floor seconds (JUnit
times of call plus set-up; shorter tests are dominated by compile times and noise).
The whole equinox and optax suites take about an hour on a 2-core machine: not for CI.

Exit status of `run` and `compare`: 0 when no test passes on cpu and fails on workshop,
1 otherwise, 2 for a usage error (a missing report).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

BACKENDS = {"workshop": "workshop,cpu", "cpu": "cpu"}


def extract(git_dir: str, tag: str, dest: str, paths: list[str]) -> None:
  """Writes `paths` of `tag` in the git repository `git_dir` (a local clone or mirror)
  under `dest` (created), with `git archive`. Raises CalledProcessError if git fails."""
  Path(dest).mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryFile() as archive:
    subprocess.run(
      ["git", f"--git-dir={git_dir}", "archive", "--format=tar", tag, *paths],
      stdout=archive,
      check=True,
    )
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
      tar.extractall(dest, filter="data")


def run_backend(suite: str, out: Path, backend: str, timeout: float, pytest_args: list[str]) -> int:
  """pytest in `suite` with JAX_PLATFORMS for `backend`; the JUnit report goes to
  out/<backend>.xml, the console output to out/<backend>.log. Returns pytest's exit code."""
  env = dict(os.environ, JAX_PLATFORMS=BACKENDS[backend])
  cmd = [
    sys.executable,
    "-m",
    "pytest",
    "-p",
    "no:cacheprovider",
    "-q",
    "-rN",
    f"--junitxml={out / f'{backend}.xml'}",
    "-o",
    "junit_duration_report=total",
    *([f"--timeout={timeout:g}"] if timeout > 0 else []),
    *pytest_args,
  ]
  with open(out / f"{backend}.log", "w") as log:
    print(f"[{backend}] {' '.join(cmd)}  (in {suite})", file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=suite, env=env, stdout=log, stderr=subprocess.STDOUT).returncode


def read_report(path: Path) -> dict[str, tuple[str, float]]:
  """{test id: (outcome, seconds)} from a JUnit XML report; outcome is one of passed,
  failed, error, skipped."""
  results = {}
  for case in ET.parse(path).getroot().iter("testcase"):
    name = f"{case.get('classname', '')}::{case.get('name', '')}"
    outcome = "passed"
    for child in case:
      if child.tag in ("failure", "error", "skipped"):
        outcome = {"failure": "failed"}.get(child.tag, child.tag)
        break
    results[name] = (outcome, float(case.get("time") or 0.0))
  return results


def compare(out: Path, slower: float, floor: float) -> int:
  """Prints the comparison of out/workshop.xml with out/cpu.xml; returns the number of
  tests that pass on cpu and fail or error on workshop."""
  reports = {}
  for backend in BACKENDS:
    path = out / f"{backend}.xml"
    if not path.exists():
      raise FileNotFoundError(f"no report {path}: run the suite first")
    reports[backend] = read_report(path)
  for backend, report in reports.items():
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    for outcome, _ in report.values():
      counts[outcome] += 1
    total = sum(r[1] for r in report.values())
    print(
      f"{backend:9s} {len(report)} tests: {counts['passed']} passed, {counts['failed']} failed,"
      f" {counts['error']} errors, {counts['skipped']} skipped ({total:.0f} s)"
    )
  ws, cpu = reports["workshop"], reports["cpu"]
  passed_on_cpu = [t for t, (o, _) in cpu.items() if o == "passed"]
  regressions = sorted(
    t for t in passed_on_cpu if ws.get(t, ("missing",))[0] in ("failed", "error")
  )
  print(f"\npass on cpu, fail on workshop: {len(regressions)}")
  for t in regressions:
    print(f"  {ws[t][0]:7s} {t}")
  # A suite may skip tests itself on a backend other than "cpu" (jax.default_backend()
  # checks, module-level skips, which leave no test case in the report): not failures.
  skipped = sorted(t for t in passed_on_cpu if ws.get(t, ("missing",))[0] in ("skipped", "missing"))
  print(f"\npass on cpu, skipped on workshop (the suite's own skips): {len(skipped)}")
  for t in skipped:
    print(f"  {ws.get(t, ('missing',))[0]:7s} {t}")
  fixed = sorted(
    t for t, (o, _) in ws.items() if o == "passed" and cpu.get(t, ("",))[0] in ("failed", "error")
  )
  if fixed:
    print(f"\npass on workshop, not on cpu: {len(fixed)}")
    for t in fixed:
      print(f"  {cpu[t][0]:7s} {t}")
  slow = sorted(
    (
      (ws[t][1] / max(c, 1e-3), t, ws[t][1], c)
      for t, (o, c) in cpu.items()
      if t in ws and ws[t][1] > slower * c and ws[t][1] > floor
    ),
    reverse=True,
  )
  print(f"\nmore than {slower:g}x slower on workshop (and over {floor:g} s there): {len(slow)}")
  for ratio, t, w, c in slow:
    print(f"  {ratio:6.1f}x  {w:7.2f} s vs {c:7.2f} s  {t}")
  return len(regressions)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  sub = parser.add_subparsers(dest="command", required=True)
  ex = sub.add_parser("extract", help="write a suite from a local git mirror")
  ex.add_argument("--git-dir", required=True)
  ex.add_argument("--tag", required=True)
  ex.add_argument("--dest", required=True)
  ex.add_argument("paths", nargs="+")
  for name in ("run", "compare"):
    p = sub.add_parser(name)
    p.add_argument("--out", required=True, help="directory of the reports")
    p.add_argument("--slower", type=float, default=3.0, help="report tests this many times slower")
    p.add_argument("--floor", type=float, default=1.0, help="ignore tests under this many seconds")
    if name == "run":
      p.add_argument("--suite", required=True, help="directory to run pytest in")
      p.add_argument("--timeout", type=float, default=300, help="per test, seconds (0: none)")
      p.add_argument("--backends", default="workshop,cpu", help="which runs to do")
      p.add_argument("pytest_args", nargs="*", help="after --: pytest's selection and options")
  args = parser.parse_args(argv)
  if args.command == "extract":
    extract(args.git_dir, args.tag, args.dest, args.paths)
    return 0
  out = Path(args.out).resolve()
  if args.command == "run":
    out.mkdir(parents=True, exist_ok=True)
    for backend in args.backends.split(","):
      code = run_backend(args.suite, out, backend, args.timeout, args.pytest_args)
      print(f"[{backend}] pytest exit code {code}", file=sys.stderr)
  try:
    return 1 if compare(out, args.slower, args.floor) else 0
  except FileNotFoundError as e:
    print(e, file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
