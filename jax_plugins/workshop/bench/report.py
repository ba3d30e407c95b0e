"""Benchmark results: the CSV and its JSON side file, and the summary.

The CSV has one row per case x size x backend (columns: COLUMNS). Times are milliseconds
per call; `ratio` is workshop median / cpu median for that case and size (> 1: workshop
slower), repeated on both rows; `max_rel_err` is max |workshop - cpu| / max |cpu| and
`agree` says whether it is within the case's `tol`. `status` is `ok`, `unsupported` (the
plugin has no lowering or kernel for an op: UNIMPLEMENTED), `skipped` (an optional library
the case needs is missing: `message` says which) or `error` (`message` says why).
The side file `<name>.json` describes the machine, the roofline references, the settings
and the summary.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import statistics
from pathlib import Path

COLUMNS = [
  "case",
  "family",
  "size",
  "label",
  "backend",
  "status",
  "median_ms",
  "p25_ms",
  "p75_ms",
  "min_ms",
  "max_ms",
  "reps",
  "calls_per_rep",
  "first_call_ms",
  "compile_ms",
  "flops",
  "bytes",
  "gflops",
  "gbps",
  "ratio",
  "max_rel_err",
  "tol",
  "agree",
  "message",
]
BACKENDS = ("workshop", "cpu")
OVERHEAD_FAMILY = "overhead"


@dataclasses.dataclass(frozen=True)
class PointCounts:
  """What became of each case x size point of a run (`point_counts`).

  Every point is in exactly one of `ran`, `skipped`, `unsupported` and `failed`, each a
  dict from (case, size) to the point's label (`ran`) or message (the others), in the
  order of the rows. `overhead`: the points of the overhead family (tiny_call) among
  `ran`, which the geometric mean of the ratios leaves out.
  """

  ran: dict
  skipped: dict
  unsupported: dict
  failed: dict
  overhead: tuple = ()

  @property
  def total(self) -> int:
    return len(self.ran) + len(self.skipped) + len(self.unsupported) + len(self.failed)

  @property
  def in_geomean(self) -> int:
    """The points the geometric mean of the ratios is over: ran, overhead excluded."""
    return len(self.ran) - len(self.overhead)

  def text(self) -> str:
    """How many points ran on both backends out of all, then one line per reason for
    each other outcome (its count and cases), or a line saying none was."""
    lines = [f"{len(self.ran)} of {self.total} points ran on both backends"]
    for what, found in [
      ("skipped", self.skipped),
      ("unsupported on workshop", self.unsupported),
      ("failed", self.failed),
    ]:
      by_reason: dict[str, list[str]] = {}
      for (case, _), message in found.items():
        # A message's " at <file:line>" (where the op is in the program) is not the reason.
        reason = (message or "no message").splitlines()[0].split(" at ")[0]
        by_reason.setdefault(reason, []).append(case)
      for reason, cases in by_reason.items():
        lines.append(f"{len(cases)} {what} ({reason}): {', '.join(dict.fromkeys(cases))}")
      if not found:
        lines.append(f"0 {what}")
    return "\n".join(lines)


def point_counts(rows: list[dict]) -> PointCounts:
  """Sorts the points of `rows` (CSV rows, as run or as read back) by what became of them.

  A point ran when both backends' rows say `ok`; it was skipped when either says
  `skipped` (an optional library is missing: both rows carry the reason), unsupported when
  the workshop's says `unsupported`, and failed otherwise (`error`, or a backend's row
  missing). The notebook's counts and `summary_text` both come from here.
  """
  by_point: dict[tuple, dict] = {}
  for r in rows:
    by_point.setdefault((r["case"], r["size"]), {})[r["backend"]] = r
  ran, skipped, unsupported, failed, overhead = {}, {}, {}, {}, []
  for point, by in by_point.items():
    statuses = {b: by[b]["status"] if b in by else "missing" for b in BACKENDS}
    message = next((r["message"] for r in by.values() if r.get("message")), None)
    if all(st == "ok" for st in statuses.values()):
      ran[point] = next(iter(by.values()))["label"]
      if next(iter(by.values()))["family"] == OVERHEAD_FAMILY:
        overhead.append(point)
    elif "skipped" in statuses.values():
      skipped[point] = message
    elif statuses["workshop"] == "unsupported":
      unsupported[point] = by["workshop"]["message"]
    else:
      failed[point] = message or f"rows: {statuses}"
  return PointCounts(ran, skipped, unsupported, failed, tuple(overhead))


@dataclasses.dataclass
class Suite:
  rows: list[dict]
  machine: dict
  references: dict
  settings: dict
  elapsed_s: float = 0.0
  csv_path: Path | None = None

  def counts(self) -> PointCounts:
    return point_counts(self.rows)

  def points(self, include_overhead: bool = False) -> list[tuple[str, int, float]]:
    """(case, size, ratio) for every point that ran on both backends (`point_counts`)."""
    counts = self.counts()
    ratios = {(r["case"], r["size"]): r["ratio"] for r in self.rows}
    return [
      (c, s, float(ratios[(c, s)]))
      for c, s in counts.ran
      if include_overhead or (c, s) not in counts.overhead
    ]

  def geomean(self) -> float | None:
    ratios = [v for _, _, v in self.points()]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None

  def worst(self) -> tuple[str, int, float] | None:
    pts = self.points()
    return max(pts, key=lambda p: p[2]) if pts else None

  def with_status(self, status: str, backend: str = "workshop") -> list[tuple[str, int]]:
    return [
      (r["case"], r["size"]) for r in self.rows if r["backend"] == backend and r["status"] == status
    ]

  def disagreements(self) -> list[tuple[str, int, float]]:
    return [
      (r["case"], r["size"], r["max_rel_err"])
      for r in self.rows
      if r["backend"] == "workshop" and r["agree"] is False
    ]

  def summary(self) -> dict:
    worst = self.worst()
    counts = self.counts()
    return {
      "geomean_ratio": self.geomean(),
      "points": counts.in_geomean,
      "ran": len(counts.ran),
      "total": counts.total,
      "worst": dict(zip(("case", "size", "ratio"), worst)) if worst else None,
      "unsupported": sorted({c for c, _ in self.with_status("unsupported")}),
      "skipped": sorted(
        {
          f"{r['case']} ({r['message']})"
          for r in self.rows
          if r["backend"] == "workshop" and r["status"] == "skipped"
        }
      ),
      "errors": [f"{c}[{s}]" for b in BACKENDS for c, s in self.with_status("error", b)],
      "disagreements": [f"{c}[{s}]" for c, s, _ in self.disagreements()],
    }


def write(suite: Suite, csv_path: Path) -> Path:
  """Writes the CSV and `<stem>.json` beside it; returns the CSV path."""
  csv_path = Path(csv_path)
  csv_path.parent.mkdir(parents=True, exist_ok=True)
  with csv_path.open("w", newline="") as f:
    w = csv.DictWriter(f, COLUMNS)
    w.writeheader()
    for row in suite.rows:
      w.writerow({k: _csv_value(row.get(k)) for k in COLUMNS})
  side = {
    "machine": suite.machine,
    "references": suite.references,
    "settings": suite.settings,
    "elapsed_s": suite.elapsed_s,
    "summary": suite.summary(),
    "columns": COLUMNS,
  }
  csv_path.with_suffix(".json").write_text(json.dumps(side, indent=2, default=str) + "\n")
  suite.csv_path = csv_path
  return csv_path


def _csv_value(v):
  if v is None:
    return ""
  if isinstance(v, float):
    return f"{v:.6g}"
  return v


def read_csv(path: Path) -> list[dict]:
  """The rows of a results CSV, numbers parsed back (empty cells become None)."""

  def parse(k, v):
    if v == "":
      return None
    if k in ("agree",):
      return v == "True"
    if k in ("size", "reps", "calls_per_rep"):
      return int(v)
    if k in ("case", "family", "label", "backend", "status", "message"):
      return v
    return float(v)

  with Path(path).open(newline="") as f:
    return [{k: parse(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def point_line(rows: list[dict]) -> str:
  """One line for a case x size: per backend the median [IQR] and the achieved rate
  (GFLOP/s when the case does at least one FLOP per byte, else GB/s), then the ratio and
  the agreement."""
  by = {r["backend"]: r for r in rows}
  first = rows[0]
  parts = [f"{first['case']:<18} {first['label'][:26]:<26}"]
  for b in BACKENDS:
    r = by[b]
    if r["status"] == "skipped":
      parts.append(f"skipped: {r['message']}")
      break
    if r["status"] != "ok":
      parts.append(f"{b} {r['status']:<36}")
      continue
    if r["family"] == OVERHEAD_FAMILY:
      rate = " " * 15
    elif r["flops"] and r["flops"] >= r["bytes"]:
      rate = f"{r['gflops']:7.2f} GFLOP/s"
    else:
      rate = f"{r['gbps']:7.2f} GB/s   "
    parts.append(f"{b} {_ms(r['median_ms'])} [{_ms(r['p25_ms'], 0)}, {_ms(r['p75_ms'], 0)}] {rate}")
  if first["ratio"] is not None:
    parts.append(f"ratio {first['ratio']:6.2f}")
  w = by["workshop"]
  if w["agree"] is not None:
    parts.append(f"err {w['max_rel_err']:.0e} {'ok' if w['agree'] else 'MISMATCH'}")
  return "  ".join(parts)


def _ms(v: float, width: int = 9) -> str:
  text = f"{v:.3g} ms" if v >= 0.1 else f"{v * 1e3:.3g} us"
  return f"{text:>{width}}"


def summary_text(suite: Suite) -> str:
  """The end-of-run report: ratio per case and size, geometric mean, worst, problems."""
  lines = [
    "",
    "workshop / cpu time ratio (median of interleaved runs; > 1: workshop slower)",
    f"  {'case':<18} {'median':>6}   per size",
  ]
  by_case: dict[str, list[tuple[int, float]]] = {}
  for case, size, ratio in suite.points(include_overhead=True):
    by_case.setdefault(case, []).append((size, ratio))
  labels = {(r["case"], r["size"]): r["label"] for r in suite.rows}
  for case, pts in by_case.items():
    cells = "  ".join(f"{labels[(case, s)]}: {v:.2f}" for s, v in pts)
    median = statistics.median(v for _, v in pts)
    lines.append(f"  {case:<18} {median:6.2f}   {cells}")
  s = suite.summary()
  counts = suite.counts()
  lines += counts.text().splitlines()
  if s["geomean_ratio"] is not None:
    lines.append(
      f"geometric mean over the {counts.in_geomean} points that ran, overhead family "
      f"excluded: {s['geomean_ratio']:.2f}"
    )
    w = s["worst"]
    lines.append(f"worst: {w['case']} [{labels[(w['case'], w['size'])]}] ratio {w['ratio']:.2f}")
  lines += _overhead_lines(suite)
  refs = suite.references
  if refs:
    cache = f", in L2 {refs['cache_copy_gbps']:.0f} GB/s" if "cache_copy_gbps" in refs else ""
    lines.append(
      f"machine: copy {refs['copy_gbps']:.1f} GB/s{cache} (one thread: fresh "
      f"output {refs['fresh_copy_ms']:.1f} ms vs preallocated "
      f"{refs['prealloc_copy_ms']:.1f} ms for 64 MB), peak f32 GEMM "
      f"{refs['peak_gflops']:.0f} GFLOP/s"
    )
  for key, what in [
    ("errors", "ERRORS"),
    ("disagreements", "RESULTS DISAGREE"),
  ]:
    if s[key]:
      lines.append(f"{what}: {', '.join(s[key])}")
  m = suite.machine
  if "loadavg_at_start" in m:
    busy = m["loadavg_at_start"][0] > (m.get("cpus_usable") or 1)
    end = m.get("loadavg_at_end", [float("nan")])[0]
    lines.append(
      f"load average {m['loadavg_at_start'][0]:.1f} at start, {end:.1f} at end, "
      f"on {m.get('cpus_usable')} cores" + (": busy machine, noisy numbers" if busy else "")
    )
  lines.append(
    f"elapsed {suite.elapsed_s:.0f} s"
    + (f"; results in {_shown(suite.csv_path)}" if suite.csv_path else "")
  )
  return "\n".join(lines)


def _shown(path: Path) -> str:
  """`path` relative to the working directory: a report (a notebook's output among them)
  names no machine's folders."""
  return os.path.relpath(path)


def _overhead_lines(suite: Suite) -> list[str]:
  rows = {
    r["backend"]: r for r in suite.rows if r["family"] == OVERHEAD_FAMILY and r["status"] == "ok"
  }
  if not rows:
    return []
  call = ", ".join(f"{b} {rows[b]['median_ms'] * 1e3:.1f} us" for b in BACKENDS if b in rows)
  comp = ", ".join(f"{b} {rows[b]['compile_ms']:.1f} ms" for b in BACKENDS if b in rows)
  return [
    f"per-call overhead (tiny_call, x + 1 on f32[4]): {call}",
    f"compile time of that one-op jit: {comp}",
  ]
