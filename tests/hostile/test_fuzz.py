"""The serialized-executable fuzzer (fuzz_serialized.py), run from here in child processes.

A child that dies (signal) or goes quiet for HANG_SECONDS is charged to the mutation it
announced last ("try k"), and a new child resumes after it. Seeded: WORKSHOP_FUZZ_SEED
picks another seed, WORKSHOP_FUZZ_COUNT another count (the default, 3,000 mutations plus
375 resealed ones, is the CI run: about half a minute on the 2-core test machine, more if
a resealed mutation hangs, HANG_SECONDS each).
"""

from __future__ import annotations

import collections
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import HERE, child_env, run_child

HANG_SECONDS = 20  # executions here take milliseconds
SEED = int(os.environ.get("WORKSHOP_FUZZ_SEED", "14"))
COUNT = int(os.environ.get("WORKSHOP_FUZZ_COUNT", "3000"))


def fuzz(count, reseal=False):
  """Runs mutations 0..count-1; returns (Counter of outcomes, {outcome: [k...]})."""
  outcomes = collections.Counter()
  which = collections.defaultdict(list)
  k = 0
  while k < count:
    cmd = [
      sys.executable,
      "fuzz_serialized.py",
      "--seed",
      str(SEED),
      "--first",
      str(k),
      "--count",
      str(count - k),
    ] + (["--reseal"] if reseal else [])
    stderr = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
      cmd, cwd=HERE, env=child_env(), stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    lines = queue.Queue()
    threading.Thread(
      target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)], daemon=True
    ).start()
    current = None
    while True:
      try:
        line = lines.get(timeout=HANG_SECONDS if current is not None else 300)
      except queue.Empty:
        proc.kill()
        proc.wait()
        if current is None:
          raise AssertionError("the fuzzer child did not start")
        outcomes["hang"] += 1
        which["hang"].append(current)
        k = current + 1
        break
      if line is None:
        code = proc.wait()
        stderr.seek(0)
        tail = stderr.read()[-2000:]
        if current is not None:  # died in the middle of a mutation
          outcomes["crash"] += 1
          which["crash"].append((current, code, tail))
          k = current + 1
        else:
          assert code == 0 and k == count, f"fuzzer child exited {code} at {k}: {tail}"
        break
      words = line.split()
      if words[0] == "try":
        current = int(words[1])
      elif words[0] == "done":
        current = None
      else:
        outcomes[words[1]] += 1
        which[words[1]].append(int(words[0]))
        k = int(words[0]) + 1
        current = None
  return outcomes, dict(which)


def test_mutated_executables_are_rejected_or_identical():
  start = time.time()
  outcomes, which = fuzz(COUNT)
  print(f"\nfuzzer seed {SEED}: {dict(outcomes)} in {time.time() - start:.0f} s")
  assert sum(outcomes.values()) == COUNT
  assert outcomes["crash"] == outcomes["hang"] == 0, which
  assert outcomes["different"] == outcomes["error"] == 0, which
  assert outcomes["rejected"] + outcomes["identical"] == COUNT


def test_resealed_mutations_never_crash():
  # The CRC re-computed after each mutation: the plan validator and the kernels face the
  # mutated plan. Different results are legitimate here (a flipped constant is another
  # valid program); a crash is not. Hangs are reported, not failed: a reduce_window whose
  # window 1 became 8193 over a dimension of 3 (all padding, valid StableHLO) did not
  # finish in minutes (seed 3, k=1429; seed 5, k=241); the CRC rejects such a flip.
  count = max(100, COUNT // 8)
  start = time.time()
  outcomes, which = fuzz(count, reseal=True)
  print(
    f"\nresealed fuzzer seed {SEED}: {dict(outcomes)} in {time.time() - start:.0f} s; "
    f"hangs at {which.get('hang', [])}"
  )
  assert sum(outcomes.values()) == count
  assert outcomes["crash"] == 0, which["crash"]


# (Source locations keep the call's line numbers in fuzz_serialized.py, including
# main()'s: an edit there that moves main() across a digit boundary moves every position
# by a byte. The parameter and output layouts of format version 3 added 16 bytes per
# executable plus 8 per parameter or result and 8 per dimension of each.)
# Resealed mutations that once reached a kernel with a plan it could not run: each must now
# be refused when the executable is loaded, in any build, by the check named. Recorded as
# one bit flip (program, blob size, byte position, bit) rather than as the fuzzer's (seed, k),
# because the position a (seed, k) hits moves with anything that changes the blob's length.
#   fuzzer seed 26, k=811: a fusion in softmax_dot whose result slot no longer matched its
#     body's result; the interpreted fusion read past the operand. The plan validator now
#     compares a fusion's operand and result slots with its body's.
#   seed 21, k=123: an add in a scan's while body whose operand slot became smaller than
#     its result (now recorded on the multiply beside it, the loop body being fused); the
#     kernel read past it (heap-buffer-overflow under ASan, a different
#     result without it). The op table's elementwise flag now has the counts compared.
#   seed 25, k=539: a dot_general whose dimension numbers no longer fit its operands; the
#     kernel indexed their dims with them (SEGV). CheckAttributes now checks them.
#   seed 101, k=868 (session 14's review): a reduce whose dims [2, 3] became [2, 2]; the
#     kernel walked the operand keeping 8 times the result's 12 elements (heap corruption,
#     "free(): invalid size"). The validator now wants distinct axes and results of the
#     kept size.
#   (seed 25, k=1867, a max-pool window 1 -> 2^48 + 1 over 3 channels, is a valid program:
#   tests/ops/test_reduce_window.py's test_reduce_window_mostly_padding covers the unbounded walk it hit.)
REJECTED_RESEALED = [
  ("softmax_dot:9095:6272:3", "is not of its body's result type"),
  ("scan:9193:7919:1", "operand 0 has 512 elements for a result of 576"),
  ("softmax_dot:9095:6772:3", "a dimension number is not an axis of its operand"),
  ("transpose_reduce:4026:4018:0", "attribute 'dims' holds 2, not a distinct axis"),
]


@pytest.mark.parametrize("flip,why", REJECTED_RESEALED)
def test_known_bad_resealed_mutation_is_rejected(flip, why):
  # Recorded on blobs without generated code (WORKSHOP_CODEGEN=0): the code's text in a
  # blob differs between environments (the scan's loop held 314 more bytes in CI's fresh
  # venv), which would move the recorded position.
  proc = run_child(["fuzz_serialized.py", "--flip", flip], timeout=300, WORKSHOP_CODEGEN="0")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "flip rejected" in proc.stdout.splitlines(), proc.stdout
  assert why in proc.stderr, proc.stderr[-3000:]
