"""Timing compiled JAX calls on several backends, interleaved.

Each repetition calls every backend in turn, alternating the order, so a slow phase of a
loaded machine (another process, frequency scaling) hits both backends alike instead of
whichever happened to run then. Every call is followed by `block_until_ready`: the time is
the latency of one call including dispatch, not the throughput of a pipelined queue. A
repetition repeats the call `number` times so that it lasts at least `min_rep_s` (timer
resolution and per-repetition noise matter for microsecond calls); the sample is the mean
per call. Python's garbage collector is off while timing, as in `timeit`.

What interleaving cannot remove: thread pools that spin after a call (OpenBLAS's helper
threads, XLA's intra-op pool) keep a core busy into the other backend's next repetition.
On an idle machine with spare cores that costs little; on an oversubscribed one it couples
the two backends' numbers.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Settings:
  reps: int = 11  # repetitions per backend (fewer when a call is slow, see below)
  min_reps: int = 3  # never fewer, however slow the call
  # A repetition lasts at least this long. When the other backend's repetition ends, its
  # idle threads still poll (Eigen's and the plugin's) and ours may have parked: shorter
  # repetitions charge that to the calls (workshop layer norm 64x1024: 120 us per call in
  # 5 ms repetitions, 54 us in 20 ms ones, measured).
  min_rep_s: float = 0.02
  budget_s: float = 1.0  # per backend and size: reps shrink to fit, down to min_reps
  warmup: int = 2  # untimed calls after compiling (first-touch allocations);
  # the last one sets calls per repetition, so not the first


FULL = Settings()
QUICK = Settings(reps=5, min_reps=3, min_rep_s=0.02, budget_s=0.25, warmup=2)


@dataclasses.dataclass(frozen=True)
class Stats:
  """Seconds per call over the repetitions."""

  median: float
  p25: float
  p75: float
  min: float
  max: float
  reps: int
  number: int  # calls per repetition

  @classmethod
  def of(cls, samples: list[float], number: int) -> Stats:
    s = sorted(samples)
    if len(s) >= 2:
      q1, _, q3 = statistics.quantiles(s, n=4, method="inclusive")
    else:
      q1 = q3 = s[0]
    return cls(statistics.median(s), q1, q3, s[0], s[-1], len(s), number)


def call_once(fn: Callable[[], Any]) -> tuple[float, Any]:
  """Seconds for one blocking call, and its result."""
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - t0, out


def time_interleaved(
  calls: Mapping[str, Callable[[], Any]], settings: Settings = FULL
) -> dict[str, Stats]:
  """Times each zero-argument callable (one per backend) and returns its Stats by key.

  Warm-up calls first; the last one estimates the call time, which sets `number` (calls
  per repetition) and, against the budget, the number of repetitions.
  """
  estimate = {}
  for name, fn in calls.items():
    for _ in range(settings.warmup):
      estimate[name], _ = call_once(fn)
  number = {k: max(1, math.ceil(settings.min_rep_s / max(t, 1e-9))) for k, t in estimate.items()}
  per_rep = sum(number[k] * estimate[k] for k in calls)
  reps = max(
    settings.min_reps, min(settings.reps, int(settings.budget_s * len(calls) / max(per_rep, 1e-9)))
  )
  samples: dict[str, list[float]] = {k: [] for k in calls}
  order = list(calls)
  gc_was_enabled = gc.isenabled()
  gc.disable()
  try:
    for r in range(reps):
      for name in order if r % 2 == 0 else reversed(order):
        fn, n = calls[name], number[name]
        t0 = time.perf_counter()
        for _ in range(n):
          jax.block_until_ready(fn())
        samples[name].append((time.perf_counter() - t0) / n)
  finally:
    if gc_was_enabled:
      gc.enable()
  return {k: Stats.of(v, number[k]) for k, v in samples.items()}
