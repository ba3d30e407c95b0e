"""What the notebooks' text says about an output, computed from that output.

A notebook that states "N points ran" or "the workshop splits memory-bound ops more
eagerly" states it of a run the reader never sees; on the reader's machine the output says
something else. So the cells whose output a sentence describes print the sentence's facts,
computed here from the run's results, and tests/notebooks/test_claims.py runs those cells
on crafted results (points skipped, unsupported, all run) so that a count cannot drift
from what it counts. The counts of the benchmark's points come from
`bench.report.point_counts`, which the benchmark's own summary uses too.

Inputs are the benchmark's CSV rows (`bench.read_csv`: dicts with the columns of
`bench.report.COLUMNS`; times in ms, rates in GFLOP/s and GB/s) and the tracer's traces
(`teach.tracing.Trace`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from jax_plugins.workshop.bench.report import OVERHEAD_FAMILY, point_counts

# The 8-bit and bfloat16 dots: this CPU's VNNI and BF16 instructions do two to four times
# the multiply-adds of a float32 one, so the float32 peak does not bound them.
NARROW_DOTS = frozenset({"dot_int8", "dot_bf16"})
# The families whose time is memory traffic and its split over threads (notebook 06's
# third reason), and those that end in a library's microkernels.
MEMORY_BOUND_FAMILIES = ("reduction", "data movement")
LIBRARY_FAMILIES = ("matmul", "conv")


def _name(r: dict) -> str:
  return f"{r['case']} {r['label']}"


@dataclasses.dataclass
class Roofline:
  """Every point with arithmetic against the two ceilings of notebook 06's roofline.

  A ceiling at arithmetic intensity `ai` (FLOPs per compulsory byte) is
  min(peak, bandwidth x ai): `cache_gbps` (the L2 caches' copy bandwidth) bounds every
  point, `dram_gbps` a point whose data does not fit in cache. `points`: the `ok` rows
  with FLOPs outside the overhead family; `below_dram`, `between` (above DRAM's ceiling,
  at most L2's: its data stayed in cache) and `above` (above L2's: the ceiling was
  measured low) sort them, the narrow dots (NARROW_DOTS) aside, which no float32 ceiling
  bounds. `peak_gflops` is the higher of the reference GEMMs' rate and the best rate of
  any point (the narrow dots aside); `peak_from` says which.
  """

  points: list
  narrow: list
  peak_gflops: float
  peak_from: str
  dram_gbps: float
  cache_gbps: float
  below_dram: list
  between: list
  above: list

  def text(self) -> str:
    n = len(self.below_dram) + len(self.between) + len(self.above)
    shown = lambda found: ", ".join(  # noqa: E731
      f"{_name(r)} on {r['backend']} ({r['gflops']:.0f} GFLOP/s)" for r in found
    )
    return "\n".join(
      [
        f"{len(self.between)} of the {n} points drawn (one per case, size and backend; the "
        "int8 and bf16 dots aside) sit between the two ceilings (faster than DRAM's "
        "bandwidth allows: their data stayed in cache)"
        + (f": {shown(self.between)}" if self.between else ""),
        f"{len(self.below_dram)} at or below the DRAM ceiling",
        f"points above their ceiling: {shown(self.above) or 'none'}",
      ]
    )


def roofline(rows: list[dict], references: dict) -> Roofline:
  """Sorts `rows` against the roofline of `references` (the suite's: `peak_gflops`,
  `gemm_size`, `copy_gbps`, `cache_copy_gbps`). See `Roofline`."""
  points = [
    r for r in rows if r["status"] == "ok" and r["flops"] and r["family"] != OVERHEAD_FAMILY
  ]
  bounded = [r for r in points if r["case"] not in NARROW_DOTS]
  narrow = [r for r in points if r["case"] in NARROW_DOTS]
  dram, cache = references["copy_gbps"], references["cache_copy_gbps"]
  best = max(bounded, key=lambda r: r["gflops"], default=None)
  peak = references["peak_gflops"]
  peak_from = f"reference GEMM {references.get('gemm_size')}³"
  if best is not None and best["gflops"] > peak:
    peak = best["gflops"]
    peak_from = (
      f"{_name(best)} on {best['backend']}; reference GEMMs {references['peak_gflops']:.0f}"
    )
  below, between, above = [], [], []
  for r in bounded:
    ai = r["flops"] / r["bytes"]
    if r["gflops"] > min(peak, cache * ai):
      above.append(r)
    elif r["gflops"] > min(peak, dram * ai):
      between.append(r)
    else:
      below.append(r)
  return Roofline(points, narrow, peak, peak_from, dram, cache, below, between, above)


def _geomean(values: list[float]) -> float:
  return math.exp(sum(map(math.log, values)) / len(values))


def three_reasons(rows: list[dict]) -> str:
  """The numbers of this run behind notebook 06's "three biggest reasons", one block each.

  Per call (reason 1): tiny_call's ratio (workshop / cpu time) and the compile times
  (workshop / cpu, median over the points that ran; how many compiled faster on workshop).
  Per op (reason 2) has no number here: the plans printed above show the fusions.
  Per byte (reason 3): the ratios of the library families (LIBRARY_FAMILIES) at each case's
     largest size, and for the memory-bound families (MEMORY_BOUND_FAMILIES) the
     geometric mean of the ratios and every point where the workshop was slower (ratio
     > 1), slowest first. A family none of whose points ran says so.
  """
  counts = point_counts(rows)
  ran = {
    (r["case"], r["size"]): r
    for r in rows
    if (r["case"], r["size"]) in counts.ran and r["backend"] == "workshop"
  }
  cpu = {
    (r["case"], r["size"]): r
    for r in rows
    if (r["case"], r["size"]) in counts.ran and r["backend"] == "cpu"
  }
  lines = ["per call (reason 1):"]
  tiny = [r for p, r in ran.items() if r["family"] == OVERHEAD_FAMILY]
  lines += [f"   {_name(r)}: ratio {r['ratio']:.2f}" for r in tiny] or ["   tiny_call did not run"]
  compiles = [
    ran[p]["compile_ms"] / cpu[p]["compile_ms"]
    for p in ran
    if ran[p]["compile_ms"] and cpu[p]["compile_ms"]
  ]
  if compiles:
    compiles.sort()
    median = compiles[len(compiles) // 2]
    faster = sum(c < 1 for c in compiles)
    lines.append(
      f"   compile time workshop / cpu: median {median:.2f} over {len(compiles)} points; "
      f"the workshop compiled faster at {faster} of them"
    )
  lines.append("per byte (reason 3):")
  for family in LIBRARY_FAMILIES:
    largest: dict[str, dict] = {}
    for r in ran.values():
      if r["family"] == family and r["size"] >= largest.get(r["case"], r)["size"]:
        largest[r["case"]] = r
    shown = ", ".join(f"{_name(r)} {r['ratio']:.2f}" for r in largest.values())
    lines.append(f"   {family} at its largest size: {shown or 'none ran'}")
  for family in MEMORY_BOUND_FAMILIES:
    found = [r for r in ran.values() if r["family"] == family]
    if not found:
      lines.append(f"   {family}: none ran")
      continue
    slower = sorted((r for r in found if r["ratio"] > 1), key=lambda r: -r["ratio"])
    lines.append(
      f"   {family}: geometric mean {_geomean([r['ratio'] for r in found]):.2f} over "
      f"{len(found)} points; the workshop slower at {len(slower)}"
      + (": " + ", ".join(f"{_name(r)} {r['ratio']:.2f}" for r in slower) if slower else "")
    )
  return "\n".join(lines)


def pjrt_api_functions() -> list[str]:
  """The functions of the PJRT_Api table, without the PJRT_ prefix, in the order of the
  pjrt_c_api.h that the xla-cpu-pjrt wheel ships (the header the plugin is built with)."""
  import xla_plugins.xla_cpu_pjrt as xla_cpu

  header = (Path(xla_cpu.__file__).parent / "include" / "pjrt_c_api.h").read_text()
  api_struct = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", header, re.S)[1]
  return [
    f.removeprefix("PJRT_") for f in re.findall(r"_PJRT_API_STRUCT_FIELD\((\w+)\)", api_struct)
  ]


def api_usage(traces: list, functions: list[str] | None = None) -> str:
  """What the calls of `traces` (teach.tracing.Trace) used of the PJRT_Api table
  (`functions`, default `pjrt_api_functions()`): how many of its functions, which
  extension functions, and which calls returned an error. A failed call hands jaxlib a
  PJRT_Error, which it reads (Error_GetCode, Error_Message) and frees (Error_Destroy):
  those functions are called only because of a failure, so the line says how many of
  the count they are.
  """
  functions = pjrt_api_functions() if functions is None else functions
  used = sorted({c.name for t in traces for c in t.calls})
  core = [f for f in used if f in functions]
  extensions = [f for f in used if f not in functions]
  failed: dict[str, int] = {}
  for t in traces:
    for c in t.calls:
      if c.code and not c.name.startswith("Error_"):
        key = f"{c.name} (error code {c.code})"
        failed[key] = failed.get(key, 0) + 1
  errors = [f for f in core if f.startswith("Error_")]
  lines = [
    f"JAX called {len(core)} of the {len(functions)} functions of the PJRT_Api table,",
    f"and {len(extensions)} extension functions: {extensions}",
  ]
  if failed:
    lines.append(
      "calls that returned an error: "
      + ", ".join(f"{name} x{n}" for name, n in failed.items())
      + f"; jaxlib read and freed each error, so {len(errors)} of the {len(core)} are "
      f"Error_ functions ({', '.join(errors)}): {len(core) - len(errors)} without them"
    )
  else:
    lines.append(
      "no call returned an error" + ("" if not errors else f", yet JAX called {', '.join(errors)}")
    )
  return "\n".join(lines)
