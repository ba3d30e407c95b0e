"""The elementwise op x dtype coverage report: each cell run on workshop and on XLA:CPU, and compared.

    python -m jax_plugins.workshop.teach.coverage            # prints the matrix (markdown)
    python -m jax_plugins.workshop.teach.coverage --write    # ... and writes docs/coverage.md

The cells are the elementwise ops of the op table (compiler/optable.py) on every dtype
buffers hold. A cell whose program the StableHLO verifier rejects (popcnt of f32) is not a
cell. All cells are one program, each `op` on four-element inputs (split down to one
program per cell where that fails), compiled and run on both backends in one process
(XLA:CPU is JAX's `cpu` backend); the results are compared with a tolerance per dtype.
Marks:

    ok    both run, same result          gap   XLA:CPU runs it, workshop does not
    -     neither runs it                diff  both run, results differ
    ours  workshop runs it, XLA:CPU does not
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import ml_dtypes
import numpy as np

from ..compiler.optable import ALL, SPECS

# MLIR spelling and numpy type of each dtype name.
_MLIR = {
  "pred": ("i1", np.bool_),
  "s8": ("i8", np.int8),
  "s16": ("i16", np.int16),
  "s32": ("i32", np.int32),
  "s64": ("i64", np.int64),
  "u8": ("ui8", np.uint8),
  "u16": ("ui16", np.uint16),
  "u32": ("ui32", np.uint32),
  "u64": ("ui64", np.uint64),
  "f16": ("f16", np.float16),
  "bf16": ("bf16", ml_dtypes.bfloat16),
  "f32": ("f32", np.float32),
  "f64": ("f64", np.float64),
  "c64": ("complex<f32>", np.complex64),
  "c128": ("complex<f64>", np.complex128),
}
DTYPES = [d for d in _MLIR if d in ALL]
# Relative tolerance by dtype: libm and XLA's vector math differ in the last ulps.
_RTOL = {"f16": 2e-3, "bf16": 2e-2, "f32": 2e-5, "c64": 2e-5, "f64": 1e-12, "c128": 1e-12}
# Cells the StableHLO verifier accepts but XLA:CPU aborts the process on (a CHECK
# failure), so they cannot be run in one process: counted as XLA:CPU not running them.
XLA_CPU_CRASHES = {("remainder", "c64"), ("remainder", "c128")}
# Ops whose results are not of the operand type, or that need attributes: not cells.
_SKIP = {
  "compare",
  "select",
  "clamp",
  "reduce_precision",
  "real",
  "imag",
  "complex",
  "is_finite",
  "convert",
  "bitcast_convert",
  "gelu_tanh",
}


def ops() -> list[str]:
  """The table's elementwise math ops and CHLO special functions, the report's rows."""
  return [
    name
    for name, s in SPECS.items()
    if s.family in ("elementwise", "chlo") and name not in _SKIP and name != "top_k"
  ]


def _inputs(dtype: str, operands: int) -> list[np.ndarray]:
  np_type = _MLIR[dtype][1]
  if dtype == "pred":
    values = [[True, False, True, False], [True, True, False, False]]
  elif dtype[0] in "su":
    # Positive, nonzero second operands: x / 0 and negative shifts or exponents are
    # implementation-defined.
    values = [[1, 2, 3, 5], [1, 2, 3, 1]]
  elif dtype[0] == "c":
    values = [[0.5 + 0.25j, -0.75 + 0.5j, 0.25 - 0.5j, 0.75], [0.25 - 0.5j, 1.5, 0.5j, 2.0]]
  else:
    values = [[0.5, -0.75, 0.25, 1.5], [0.25, 1.5, -0.5, 2.0]]
  return [np.asarray(v).astype(np_type) for v in values[:operands]]


def _result_type(op: str, dtype: str) -> str:
  if op == "abs" and dtype in ("c64", "c128"):
    dtype = "f32" if dtype == "c64" else "f64"
  return f"tensor<4x{_MLIR[dtype][0]}>"


def program(cells: list[tuple[str, str]]) -> str:
  """@main applying each cell's op to four-element operands of its dtype, one result each."""
  args, body, results = [], [], []
  for j, (op, dtype) in enumerate(cells):
    spec = SPECS[op]
    dialect = "chlo" if spec.family == "chlo" else "stablehlo"
    t = f"tensor<4x{_MLIR[dtype][0]}>"
    names = [f"%a{j}_{i}" for i in range(spec.operands)]
    args += [f"{n}: {t}" for n in names]
    result = _result_type(op, dtype)
    body.append(
      f'  %r{j} = "{dialect}.{op}"({", ".join(names)}) : '
      f'({", ".join([t] * spec.operands)}) -> {result}'
    )
    results.append((f"%r{j}", result))
  types = ", ".join(t for _, t in results)
  return (
    f"func.func public @main({', '.join(args)}) -> ({types}) {{\n"
    + "\n".join(body)
    + f"\n  return {', '.join(r for r, _ in results)} : {types}\n}}\n"
  )


def valid(op: str, dtype: str, _context=[]) -> bool:  # noqa: B006  # pylint: disable=dangerous-default-value
  """Whether the StableHLO verifier accepts `op` on `dtype`."""
  from jax._src.interpreters import mlir
  from jaxlib.mlir import ir

  if not _context:  # One context for every cell: making one costs more than parsing.
    _context.append(mlir.make_ir_context())
  try:
    ir.Module.parse(program([(op, dtype)]), _context[0]).operation.verify()
    return True
  except Exception:  # pylint: disable=broad-except  (any rejection: not a cell)
    return False


def run(backend, cells: list[tuple[str, str]]) -> list[np.ndarray] | str:
  """The results of `cells` on `backend` (one program), or the error message if it does
  not run."""
  import jax
  from jax._src.interpreters import mlir
  from jax._src.lib import xla_client
  from jaxlib.mlir import ir

  try:
    with mlir.make_ir_context():
      code = mlir.module_to_bytecode(ir.Module.parse(program(cells)))
    device = backend.devices()[0]
    executable = backend.compile_and_load(
      code, xla_client.DeviceList((device,)), xla_client.CompileOptions()
    )
    args = [jax.device_put(x, device) for op, d in cells for x in _inputs(d, SPECS[op].operands)]
    out = executable.execute_sharded(args).disassemble_into_single_device_arrays()
    return [np.asarray(o[0]) for o in out]
  except Exception as e:  # pylint: disable=broad-except  (the backend rejected it)
    return str(e).splitlines()[0]


def _run_each(backend, cells: list[tuple[str, str]]) -> list[np.ndarray | str]:
  """Per cell: its result or error. One program for all of them (compiling is most of
  the cost), split in halves down to single cells where a program fails."""
  together = run(backend, cells) if cells else []
  if not isinstance(together, str):
    return together
  if len(cells) == 1:
    return [together]
  half = len(cells) // 2
  return _run_each(backend, cells[:half]) + _run_each(backend, cells[half:])


def same(a: np.ndarray, b: np.ndarray, dtype: str) -> bool:
  if a.shape != b.shape or a.dtype != b.dtype:
    return False
  rtol = _RTOL.get(dtype)
  if rtol is None:
    return bool(np.array_equal(a, b))
  wide = np.complex128 if dtype[0] == "c" else np.float64
  return bool(np.allclose(a.astype(wide), b.astype(wide), rtol=rtol, atol=rtol, equal_nan=True))


@dataclasses.dataclass
class Cell:
  op: str
  dtype: str
  mark: str
  detail: str = ""


def matrix(workshop, xla_cpu, rows: list[str] | None = None) -> list[Cell]:
  """Every valid cell of `rows` (default: ops()) run on both backends."""
  cells = [(op, d) for op in rows or ops() for d in DTYPES if valid(op, d)]
  ours_all = _run_each(workshop, cells)
  runnable = [c for c in cells if c not in XLA_CPU_CRASHES]
  ref_all = dict(zip(runnable, _run_each(xla_cpu, runnable)))
  result = []
  for (op, dtype), ours in zip(cells, ours_all):
    ref = ref_all.get((op, dtype), "XLA:CPU aborts")
    ours_ok, ref_ok = not isinstance(ours, str), not isinstance(ref, str)
    if ours_ok and ref_ok:
      match = same(ours, ref, dtype)
      cell = Cell(op, dtype, "ok" if match else "diff", "" if match else f"{ours} vs {ref}")
    elif ref_ok:
      cell = Cell(op, dtype, "gap", ours)
    elif ours_ok:
      cell = Cell(op, dtype, "ours", ref)
    else:
      cell = Cell(op, dtype, "-", ours)
    result.append(cell)
  return result


def render(cells: list[Cell]) -> str:
  """A markdown table, op rows by dtype columns, with totals and the exceptions."""
  by = {(c.op, c.dtype): c.mark for c in cells}
  rows = list(dict.fromkeys(c.op for c in cells))
  lines = ["| op | " + " | ".join(DTYPES) + " |", "|---" * (len(DTYPES) + 1) + "|"]
  for op in rows:
    lines.append(f"| `{op}` | " + " | ".join(by.get((op, d), "") for d in DTYPES) + " |")
  totals = {m: sum(c.mark == m for c in cells) for m in ("ok", "gap", "diff", "ours", "-")}
  lines += [
    "",
    f"{len(cells)} cells (op, dtype) the StableHLO verifier accepts: "
    + ", ".join(f"{n} {m}" for m, n in totals.items()),
    "",
  ]
  lines += [f"* {c.op} {c.dtype}: {c.mark}: {c.detail}" for c in cells if c.mark in ("gap", "diff")]
  return "\n".join(lines) + "\n"


def _backends():
  """workshop and XLA:CPU (JAX's cpu backend) in this process."""
  import jax
  from jax._src import xla_bridge

  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  jax.config.update("jax_enable_x64", True)
  return xla_bridge.get_backend("workshop"), xla_bridge.get_backend("cpu")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--write", action="store_true", help="write docs/coverage.md")
  args = parser.parse_args()
  text = render(matrix(*_backends()))
  print(text, end="")
  if args.write:
    path = Path(__file__).resolve().parents[3] / "docs" / "coverage.md"
    path.write_text(
      "# Elementwise op x dtype coverage: workshop against XLA:CPU\n\n"
      "Generated by `python -m jax_plugins.workshop.teach.coverage --write`; see the "
      "module's docstring for the marks. The elementwise ops of the op table only: the other\n"
      "families' dtypes are in their `OpSpec`s (`compiler/optable.py`) and their tests.\n\n" + text
    )


if __name__ == "__main__":
  main()
