"""Every op of the op table on zero-size shapes, on workshop and on JAX's CPU backend.

The cases (zero_size_cases.py) put a zero-size dimension in each position, size-0 and
size-1 reduced, scanned and windowed axes, empty index arrays, zero-size windows and batch
dims; each runs on both backends and the results (shape, dtype, values) must match, or
both backends refuse it. A kernel dividing by a zero extent kills its process (SIGFPE),
so the cases run in a few worker processes (zero_size_cases.py run as a script): a worker
announces each case before running it, and when one dies the parent reports the case it
had announced as a crash, naming the op, shapes and dtypes, and starts a new worker for
the rest of its share.

The sweep runs once per session for the cases pytest selected (`-k` narrows it), in
`WORKERS` processes; each case is its own test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import zero_size_cases as zc  # tests/conformance is on sys.path (rootdir-relative import).
from jax_plugins.workshop.compiler.optable import SPECS

WORKER = Path(zc.__file__)
WORKERS = 2
CASES = zc.all_cases()


def _run_share(ids: list[str], results: dict[str, str], kernels: dict[str, list[str]]) -> None:
  """Runs `ids` in worker processes, one after another when one dies: results[id] is ''
  (same on both backends) or why not; kernels[id] the plan's kernels, where reported."""
  pending = list(ids)
  while pending:
    env = dict(os.environ, JAX_PLATFORMS="workshop,cpu")
    proc = subprocess.Popen(
      [sys.executable, str(WORKER)],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      env=env,
    )
    # All ids at once: the worker reads them as it goes.
    feeder = threading.Thread(target=_feed, args=(proc, list(pending)), daemon=True)
    feeder.start()
    stderr: list[str] = []
    drain = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    drain.start()
    current = None
    for line in proc.stdout:
      event = json.loads(line)
      if "start" in event:
        current = event["start"]
      else:
        results[event["done"]] = event["why"]
        if event.get("kernels"):
          kernels[event["done"]] = event["kernels"]
        pending.remove(event["done"])
        current = None
    code = proc.wait()
    drain.join(timeout=5)
    if current is not None:
      tail = "".join(stderr[-3:]).strip()[-400:]
      results[current] = f"the worker died running it (exit {code}): {tail}"
      pending.remove(current)
    elif pending:  # Died between cases (or at start-up): nothing to blame, stop.
      for case_id in pending:
        results[case_id] = f"worker exited {code} before it: {''.join(stderr[-3:])[-400:]}"
      return


def _feed(proc: subprocess.Popen, ids: list[str]) -> None:
  try:
    for case_id in ids:
      proc.stdin.write(case_id + "\n")
    proc.stdin.close()
  except (BrokenPipeError, OSError):
    pass  # The worker died; the parent reports it.


def run_sweep(ids: list[str], workers: int = WORKERS, kernels=None) -> dict[str, str]:
  """results[id] for every id, run in `workers` processes (interleaved shares); the
  kernels the workers report go into `kernels`."""
  results: dict[str, str] = {}
  kernels = {} if kernels is None else kernels
  threads = [
    threading.Thread(target=_run_share, args=(ids[w::workers], results, kernels))
    for w in range(workers)
  ]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  return results


@pytest.fixture(scope="session")
def sweep(request):
  """The results of the cases this session selected."""
  selected = [
    item.callspec.params["case_id"]
    for item in request.session.items
    if getattr(item, "originalname", None)
    in ("test_zero_size", "test_zero_size_reaches_its_kernel")
    and hasattr(item, "callspec")
  ]
  selected = list(dict.fromkeys(selected))
  kernels: dict[str, list[str]] = {}
  return run_sweep(selected, kernels=kernels), kernels


@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_zero_size(sweep, case_id):
  why = sweep[0].get(case_id, "not run")
  assert not why, f"{case_id}: {why}"


@pytest.mark.parametrize("case_id", sorted(zc.first_case_of_each_op(CASES)))
def test_zero_size_reaches_its_kernel(sweep, case_id):
  """The first case of each op runs the op's kernel on workshop (the sweep covers what
  it names: a rule that rewrote the op away would leave the kernel untested)."""
  if case_id not in sweep[0]:
    pytest.skip("its case was not selected")
  op = case_id.split(":")[0]
  assert op in sweep[1].get(case_id, []), (case_id, sweep[1].get(case_id))


def test_every_op_has_a_generator_or_a_reason():
  """Each op table entry has a sweep generator or an EXCLUDED reason, not both; each
  generator makes at least one case."""
  missing = [n for n in SPECS if n not in zc.GENERATORS and n not in zc.EXCLUDED]
  both = [n for n in SPECS if n in zc.GENERATORS and n in zc.EXCLUDED]
  stale = [n for n in list(zc.GENERATORS) + list(zc.EXCLUDED) if n not in SPECS]
  assert not missing and not both and not stale, (missing, both, stale)
  covered = {c.op for c in CASES}
  assert set(zc.GENERATORS) <= covered, set(zc.GENERATORS) - covered
  assert all(zc.EXCLUDED.values())


def test_every_op_has_a_zero_size_case():
  """Each generator's cases include one with a zero-size operand (what the sweep is
  for; the probes of first_case_of_each_op are extra)."""
  with_zero = {c.op for c in CASES if any(0 in shape for shape, _ in c.operands) or "0" in c.label}
  assert set(zc.GENERATORS) <= with_zero, set(zc.GENERATORS) - with_zero


def test_a_crash_is_reported_as_the_case_that_crashed(tmp_path, monkeypatch):
  """The parent's bookkeeping: a worker killed mid-case fails that case, and the cases
  after it still run in a new worker."""
  fake = tmp_path / "worker.py"
  fake.write_text(
    "import json, os, signal, sys\n"
    "for line in sys.stdin:\n"
    "  i = line.strip()\n"
    "  print(json.dumps({'start': i}), flush=True)\n"
    "  if i == 'b':\n"
    "    os.kill(os.getpid(), signal.SIGFPE)\n"
    "  print(json.dumps({'done': i, 'ok': True, 'why': ''}), flush=True)\n"
  )
  monkeypatch.setattr(sys.modules[__name__], "WORKER", fake)
  results = run_sweep(["a", "b", "c", "d"], workers=1)
  assert results["a"] == results["c"] == results["d"] == ""
  assert results["b"].startswith("the worker died running it (exit -8)"), results["b"]
