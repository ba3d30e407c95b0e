"""Runs StableHLO's interpreter test files through a PJRT plugin and reports pass counts.

The corpus (../shared/corpus/stablehlo_interpret/, see its README) holds test functions that
build inputs with `stablehlo.constant`, apply one op and state the expected result with
`check.*` ops. PJRT runs programs, not checks, so each case is rewritten into a program
whose `@main` returns every checked value next to its expected value; Python compares them.
Cases that run one program per replica/partition (`interpreter.run_parallel`) are compiled
once as an SPMD program with that many replicas and partitions and executed on as many
devices.

Each backend runs in a worker subprocess that streams one JSON line per case, so a plugin
that aborts the process (XLA CHECK failures do) costs one case, not the run: the supervisor
restarts the worker after the case that crashed.

    python tests/stablehlo_corpus.py            # pass counts, workshop next to XLA:CPU
    python tests/stablehlo_corpus.py -v add.mlir  # per-case results for some files
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

# Beside the repository (../shared/), unless WORKSHOP_CORPUS points elsewhere.
CORPUS = Path(
  os.environ.get(
    "WORKSHOP_CORPUS",
    Path(__file__).resolve().parents[2] / "shared" / "corpus" / "stablehlo_interpret",
  )
)
BACKENDS = ("workshop", "xla_cpu")
NUM_DEVICES = 8  # The largest run_parallel grid in the corpus has 5 programs.

# Element types JAX never produces; cases using them are counted apart (corpus README).
EXOTIC_TYPES = re.compile(
  r"x(?:u?i2|u?i4|f8E\w+|f4E\w+|f6E\w+)>|<(?:u?i2|u?i4|f8E\w+)>|"
  r"!quant\.|tensor<[^>]*!quant"
)
# Features outside PJRT's execution model (corpus README): skipped, with the reason.
OUT_OF_MODEL = {
  "interpreter.probe": "probes serialize values to files",
  "check.expect_serialized_eq": "probes serialize values to files",
  "stablehlo.infeed": "infeed has no host feeding in PJRT's Execute",
  "stablehlo.outfeed": "outfeed has no host feeding in PJRT's Execute",
  "stablehlo.send": "send/recv need host callbacks",
  "stablehlo.recv": "send/recv need host callbacks",
  "interpreter.print": "printing is an interpreter feature",
  "check.print": "printing is an interpreter feature",
  "stablehlo.custom_call": "custom calls target the interpreter",
}

_CHECK_CONST = re.compile(
  r"check\.(expect_eq_const|expect_almost_eq_const)\s+(%[\w#]+)\s*,\s*(dense<.*?>)\s*:\s*"
  r"(tensor<.*?>)\s*$",
  re.S | re.M,
)
_CHECK_PAIR = re.compile(
  r"check\.(expect_eq|expect_almost_eq|expect_close)\s+(%[\w#]+)\s*,\s*(%[\w#]+)"
  r"([^:\n]*):\s*(tensor<[^,\n]*>)(?:\s*,\s*tensor<[^\n]*>)?\s*$",
  re.M,
)
_TOLERANCE = re.compile(r"tolerance\s*=\s*([0-9.eE+-]+)")
_MAX_ULP = re.compile(r"max_ulp_difference\s*=\s*(\d+)")
_FUNC = re.compile(r"func\.func\s+(?:public\s+|private\s+)?@(\w+)\s*\(")
_RUN_PARALLEL = re.compile(
  r"(%[\w]+)(?::(\d+))?\s*=\s*\"interpreter\.run_parallel\"\((.*?)\)\s*\{\s*programs\s*=\s*"
  r"(\[.*?\]\])\s*\}\s*:\s*\((.*?)\)\s*->",
  re.S,
)
_DEFAULT_TOLERANCE = 1e-4  # check.expect_almost_eq's default.


@dataclasses.dataclass
class Check:
  """One checked value: result index `actual` of @main against index `expected`."""

  kind: str  # "exact", "almost" or "ulp".
  actual: int
  expected: int
  tolerance: float = _DEFAULT_TOLERANCE


@dataclasses.dataclass
class Case:
  """A corpus test rewritten as a program; see rewrite()."""

  file: str
  index: int
  name: str
  text: str = ""  # The module to compile; @main returns the checked values.
  checks: list[Check] = dataclasses.field(default_factory=list)
  replicas: int = 1
  partitions: int = 1
  inputs_text: str = ""  # run_parallel: a module whose @main returns every input.
  args_per_program: int = 0
  skip: str = ""  # Reason the case cannot run under PJRT.
  exotic: bool = False


def cases(files: list[str] | None = None) -> list[Case]:
  """Every case of the corpus (or of `files`), rewritten."""
  out = []
  for path in sorted(CORPUS.glob("**/*.mlir")):
    rel = str(path.relative_to(CORPUS))
    if files and rel not in files and path.name not in files:
      continue
    chunks = path.read_text().split("\n// -----")
    for index, chunk in enumerate(chunks):
      out.append(rewrite(rel, index, chunk))
  return out


def rewrite(file: str, index: int, chunk: str) -> Case:
  """Turns one corpus chunk into a program returning (actual, expected) pairs."""
  funcs = _FUNC.findall(chunk)
  case = Case(file, index, funcs[0] if funcs else "?", exotic=bool(EXOTIC_TYPES.search(chunk)))
  for marker, reason in OUT_OF_MODEL.items():
    if marker in chunk:
      case.skip = reason
      return case
  found = _checking_function(chunk)
  if found is None:
    case.skip = "no check in this case"
    return case
  header_start, body_start, case.name = found
  head, body = chunk[:header_start], chunk[body_start:]
  returns: list[tuple[str, str]] = []  # (value, type) pairs @main returns.
  expected_defs: list[str] = []  # The constants that replace check.expect_*_const.

  def on_const(m: re.Match) -> str:
    kind, value, literal, ty = m.groups()
    k = len(returns)
    returns.extend([(value, ty), (f"%expected{k}", ty)])
    case.checks.append(Check("exact" if kind == "expect_eq_const" else "almost", k, k + 1))
    expected_defs.append(f"%expected{k} = stablehlo.constant {literal} : {ty}")
    return expected_defs[-1]

  def on_pair(m: re.Match) -> str:
    kind, a, b, attrs, ty = m.groups()
    k = len(returns)
    returns.extend([(a, ty), (b, ty)])
    check = Check(
      {"expect_eq": "exact", "expect_almost_eq": "almost", "expect_close": "ulp"}[kind], k, k + 1
    )
    if t := _TOLERANCE.search(attrs):
      check.tolerance = float(t.group(1))
    if u := _MAX_ULP.search(attrs):
      check.tolerance = float(u.group(1))
    case.checks.append(check)
    return ""

  body = _CHECK_CONST.sub(on_const, body)
  body = _CHECK_PAIR.sub(on_pair, body)
  if "check." in body:
    case.skip = "a check form this runner does not rewrite"
    return case
  parallel = _RUN_PARALLEL.search(body)
  if parallel:
    return _rewrite_parallel(case, chunk, body, parallel, returns, expected_defs)
  types = ", ".join(t for _, t in returns)
  values = ", ".join(v for v, _ in returns)
  body = _replace_last_return(body, f"func.return {values} : {types}")
  head = _rename_other_mains(head, case.name)
  case.text = f"{head}func.func public @main() -> ({types}) {{{body}"
  return case


def _checking_function(chunk: str) -> tuple[int, int, str] | None:
  """(start of its header, start of its body, name) of the function holding the checks.

  Corpus test functions take no arguments, so the body starts after the header's `{`.
  """
  found = None
  for m in _FUNC.finditer(chunk):
    end = chunk.find("func.func", m.end())
    if "check." in chunk[m.end() : end if end >= 0 else len(chunk)]:
      found = (m.start(), chunk.index("{", m.end()) + 1, m.group(1))
  return found


def _replace_last_return(body: str, new: str) -> str:
  i = body.rfind("func.return")
  if i < 0:
    i = body.rfind("return")
  j = body.find("\n", i)
  return body[:i] + new + (body[j:] if j >= 0 else "")


def _rename_other_mains(text: str, kept: str) -> str:
  # Only the checking function may be called @main.
  return text if kept == "main" else re.sub(r"@main\b", "@main_renamed", text)


def _rewrite_parallel(
  case: Case,
  chunk: str,
  body: str,
  m: re.Match,
  returns: list[tuple[str, str]],
  expected_defs: list[str],
) -> Case:
  """run_parallel: compile the program SPMD; inputs come from @main's constants."""
  result, _, operands, programs, operand_types = m.groups()
  grid = [re.findall(r"@(\w+)", row) for row in re.findall(r"\[([^\[\]]*)\]", programs)]
  if len({p for row in grid for p in row}) != 1:
    case.skip = "run_parallel with different programs per process (MPMD)"
    return case
  program = grid[0][0]
  case.replicas, case.partitions = len(grid), len(grid[0])
  operands = [o.strip() for o in operands.split(",") if o.strip()]
  types = [t.strip() for t in re.split(r",\s*(?=tensor)", operand_types) if t.strip()]
  count = case.replicas * case.partitions
  case.args_per_program = len(operands) // count
  # Results: %result#k is result k of the flattened program grid.
  module = re.sub(
    rf"func\.func\s+(?:public\s+|private\s+)?@{program}\b", "func.func public @program_main", chunk
  )
  module = re.sub(r"func\.func\s+(?:public\s+)?@main\b.*", "", module, flags=re.S)
  module = module.replace("@program_main", "@main")
  if module.count("{") > module.count("}"):
    module += "\n}"  # The enclosing `module {` lost its closing brace with @main.
  case.text = module
  # Check j compares flattened result k (from %result#k) with the j-th expected constant,
  # which the inputs module returns after the operands.
  names = [v for v, _ in returns]
  for j, check in enumerate(case.checks):
    actual, expected = names[check.actual], names[check.expected]
    if not expected.startswith("%expected") or not actual.startswith(result):
      case.skip = "a run_parallel check this runner does not rewrite"
      return case
    check.actual = int(actual.split("#")[1]) if "#" in actual else 0
    check.expected = j
  # Inputs: a module whose @main returns the run_parallel operands, then the expected values.
  values = list(zip(operands, types)) + [(v, t) for v, t in returns if v.startswith("%expected")]
  result_types = ", ".join(t for _, t in values)
  defs = "\n".join([body[: m.start()], *expected_defs])
  case.inputs_text = (
    f"func.func public @main() -> ({result_types}) {{\n{defs}\n"
    f"  func.return {', '.join(v for v, _ in values)} : {result_types}\n}}"
  )
  return case


# ---- The worker: runs cases on one backend. ----


def _backend(name: str):
  """Initializes JAX with exactly one PJRT backend, `name`, with NUM_DEVICES devices."""
  import jax
  from jax._src import xla_bridge

  jax.config.update("jax_enable_x64", True)  # Keep 64-bit inputs 64-bit in device_put.
  if name == "workshop":
    jax.config.update("jax_platforms", "workshop")
    jax.config.update("jax_pjrt_client_create_options", f"num_devices:{NUM_DEVICES}")
  else:
    import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

    library = os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "xla_cpu_pjrt.so")
    xla_bridge.register_plugin(
      "xla_cpu", library_path=library, options={"cpu_device_count": NUM_DEVICES}
    )
    jax.config.update("jax_platforms", "xla_cpu")
  return xla_bridge.get_backend(name)


def _run(backend, text: str, replicas: int = 1, partitions: int = 1, args=()):
  """Compiles MLIR text and runs it; returns [device][result] numpy arrays."""
  import jax
  import numpy as np
  from jax._src.interpreters import mlir
  from jax._src.lib import xla_client
  from jaxlib.mlir import ir

  with mlir.make_ir_context():
    module = ir.Module.parse(text)
    code = mlir.module_to_bytecode(module)
  options = xla_client.CompileOptions()
  build = options.executable_build_options
  build.num_replicas, build.num_partitions = replicas, partitions
  ids = np.arange(replicas * partitions).reshape(replicas, partitions)
  build.device_assignment = xla_client.DeviceAssignment.create(ids)
  build.use_spmd_partitioning = partitions > 1
  devices = [backend.devices()[i] for i in ids.flatten()]
  executable = backend.compile_and_load(code, xla_client.DeviceList(tuple(devices)), options)
  # Each argument holds a different value per device, of the program's parameter shape.
  # A "replicated" array carries exactly such shards (JAX does not compare them), which
  # execute_sharded passes through as one buffer per device.
  mesh = jax.sharding.Mesh(np.array(devices), ("devices",))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  arrays = [
    jax.make_array_from_single_device_arrays(
      per_device[0].shape, replicated, [jax.device_put(a, d) for a, d in zip(per_device, devices)]
    )
    for per_device in args
  ]
  outputs = executable.execute_sharded(arrays).disassemble_into_single_device_arrays()
  return [[np.asarray(out[d]) for out in outputs] for d in range(len(devices))]


def _compare(check: Check, actual, expected) -> str:
  """'' if the check holds, else a short description of the difference."""
  import numpy as np

  if actual.shape != expected.shape:
    return f"shape {actual.shape} != {expected.shape}"
  if check.kind == "exact":
    a, e = actual, expected
    if a.dtype.kind in "fc":
      ok = np.array_equal(a, e, equal_nan=True)
    else:
      ok = np.array_equal(a, e)
  else:
    wide = np.complex128 if actual.dtype.kind == "c" else np.float64
    a, e = actual.astype(wide), expected.astype(wide)
    if check.kind == "almost":
      bound = check.tolerance
    else:  # ulp: max_ulp_difference units in the last place of the expected value.
      bound = check.tolerance * np.abs(np.spacing(expected).astype(np.float64))
    # Equal values (infinities included) and NaN against NaN pass; else within the bound.
    with np.errstate(invalid="ignore"):
      ok = bool(np.all((a == e) | (np.isnan(a) & np.isnan(e)) | (np.abs(a - e) <= bound)))
  return "" if ok else f"got {actual.tolist()!s:.200}, expected {expected.tolist()!s:.200}"


def run_case(backend, case: Case) -> tuple[str, str]:
  """(status, detail): status is pass, fail (wrong values) or error (did not run)."""
  try:
    if case.inputs_text:
      count = case.replicas * case.partitions
      values = _run(backend, case.inputs_text)[0]
      operands, expected = (
        values[: count * case.args_per_program],
        values[count * case.args_per_program :],
      )
      args = [
        [operands[d * case.args_per_program + i] for d in range(count)]
        for i in range(case.args_per_program)
      ]
      per_device = _run(backend, case.text, case.replicas, case.partitions, args)
      flat = [r for device in per_device for r in device]
      pairs = [(c, flat[c.actual], expected[j]) for j, c in enumerate(case.checks)]
    else:
      results = _run(backend, case.text)[0]
      pairs = [(c, results[c.actual], results[c.expected]) for c in case.checks]
  except Exception as e:  # The backend rejected or failed the program.
    return "error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
  for check, actual, expected in pairs:
    if diff := _compare(check, actual, expected):
      return "fail", diff
  return "pass", ""


def _worker(backend_name: str, start: int, files: list[str]) -> None:
  os.environ.pop("JAX_PLATFORMS", None)
  backend = _backend(backend_name)
  for i, case in enumerate(cases(files)):
    if i < start or case.skip:
      continue
    status, detail = run_case(backend, case)
    print(json.dumps({"i": i, "status": status, "detail": detail}), flush=True)


# ---- The supervisor. ----


def results(backend: str, files: list[str] | None = None) -> dict[int, tuple[str, str]]:
  """Case index -> (status, detail) on `backend`, restarting the worker after crashes."""
  all_cases = cases(files)
  out: dict[int, tuple[str, str]] = {i: ("skip", c.skip) for i, c in enumerate(all_cases) if c.skip}
  start = 0
  while start < len(all_cases):
    cmd = [sys.executable, __file__, "--worker", backend, "--start", str(start), *(files or [])]
    proc = subprocess.run(
      cmd,
      capture_output=True,
      text=True,
      timeout=1800,
      env={**os.environ, "PYTHONPATH": _pythonpath()},
    )
    last = start - 1
    for line in proc.stdout.splitlines():
      if line.startswith("{"):
        r = json.loads(line)
        out[r["i"]] = (r["status"], r["detail"])
        last = r["i"]
    if proc.returncode == 0:
      break
    # The worker died in the case after the last one it reported.
    crashed = next((i for i in range(last + 1, len(all_cases)) if i not in out), None)
    if crashed is None:
      break
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    out[crashed] = ("crash", f"exit {proc.returncode}: {tail}"[:300])
    start = crashed + 1
  return out


def _pythonpath() -> str:
  # The caller's path first (it may point at another build of the plugin), then this repo.
  repo = str(Path(__file__).resolve().parents[1])
  return os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), repo] if p)


def summarize(all_cases: list[Case], per_backend: dict[str, dict[int, tuple[str, str]]]):
  """Counts per backend and status, JAX-relevant and exotic-type cases apart."""
  table = {}
  for backend, res in per_backend.items():
    counts = Counter()
    for i, case in enumerate(all_cases):
      group = "exotic" if case.exotic else "main"
      counts[(group, res.get(i, ("missing", ""))[0])] += 1
    table[backend] = counts
  return table


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("files", nargs="*", help="corpus files (default: all)")
  parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
  parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
  args = parser.parse_args()
  if args.worker:
    return _worker(args.worker, args.start, args.files)
  all_cases = cases(args.files)
  per_backend = {b: results(b, args.files) for b in BACKENDS}
  if args.verbose:
    for i, case in enumerate(all_cases):
      row = "  ".join(f"{b}={per_backend[b].get(i, ('?', ''))[0]:5}" for b in BACKENDS)
      detail = next(
        (
          per_backend[b][i][1]
          for b in BACKENDS
          if per_backend[b].get(i, ("", ""))[0] not in ("pass", "skip")
        ),
        "",
      )
      print(f"{case.file}:{case.index} {case.name:40} {row}  {detail[:120]}")
  table = summarize(all_cases, per_backend)
  statuses = ("pass", "fail", "error", "crash", "skip")
  print(
    f"{'backend':10} {'cases':6} "
    + " ".join(f"{s:>6}" for s in statuses)
    + "   (exotic element types: pass/total)"
  )
  for backend, counts in table.items():
    main_counts = [counts[("main", s)] for s in statuses]
    exotic_total = sum(v for (g, _), v in counts.items() if g == "exotic")
    print(
      f"{backend:10} {sum(main_counts):6} "
      + " ".join(f"{n:6}" for n in main_counts)
      + f"   ({counts[('exotic', 'pass')]}/{exotic_total})"
    )
  both = [
    i
    for i in range(len(all_cases))
    if per_backend["xla_cpu"].get(i, ("",))[0] == "pass"
    and per_backend["workshop"].get(i, ("",))[0] != "pass"
  ]
  print(f"cases XLA:CPU passes and workshop does not: {len(both)}")


if __name__ == "__main__":
  main()
