"""Accuracy of reductions, scans and f32 transcendentals: workshop and XLA:CPU against float64.

    python -m jax_plugins.workshop.bench.accuracy          # the table
    python -m jax_plugins.workshop.bench.accuracy --csv F  # and a CSV

For each case (a reduction pattern or a cumulative op on one dtype) the same jitted
function runs on the workshop device and on JAX's CPU backend, and both results are
compared with numpy's in float64 on the same inputs (cast to float64 first, so the
reference has the input's exact values; float64 cases use long double). The error of a result y against the reference r
is max_i |y_i - r_i| / max(|r_i|, floor): the inputs are positive, about 1 (uniform in
[0.5, 1.5) unless a case narrows them), so no r_i is near 0 and the ratio is a relative error. `ratio` is
workshop's error over XLA:CPU's.

tests/ops/test_reduce_accuracy.py asserts the rule of docs/performance.md for every case:
workshop's error <= 2 x XLA:CPU's + 4 ulp of the result dtype. The inputs come from a
fixed seed, so the comparison is deterministic.

The second table (`ulp_cases`) is elementwise float32 functions: the largest error in
float32 ulps at the exact (float64) result, over 2^18 fixed-seed inputs per function
(uniform over the range a case names, or log-uniform magnitudes). Its rule, asserted by
tests/ops/test_elementwise_accuracy.py: workshop's max ulp error <= XLA:CPU's + 0.25.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from scipy import special  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
  """One program: `f` on jax arrays, `ref` the same in float64 numpy, `shape`/`dtype` of
  its input."""

  name: str
  shape: tuple[int, ...]
  dtype: str
  f: Callable
  ref: Callable
  out_dtype: str | None = None  # the result's dtype when not the input's (ulp unit)
  spread: float = 1.0  # inputs are 1 + spread * u, u uniform in [-0.5, 0.5)


def _var(x, axis):
  return np.var(x, axis=axis)


def _logsumexp_ref(x, axis):
  return special.logsumexp(x, axis=axis)


def _cumlogsumexp_ref(x, axis):
  return np.logaddexp.accumulate(x, axis=axis)


def cases() -> list[Case]:
  """The reduction patterns (axis sets of each kind: leading, middle, trailing, several,
  everything) and scans, on float32 and the 16-bit floats (whose sums JAX accumulates in
  float32) and float64 (where x64 is on)."""
  c: list[Case] = []
  s = lambda axis, **kw: lambda x: jnp.sum(x, axis=axis, **kw)  # noqa: E731
  r = lambda axis: lambda x: np.sum(x, axis=axis)  # noqa: E731
  for dt in ("float32",):
    c += [
      Case(f"sum axis 0 (100000, 8) {dt}", (100000, 8), dt, s(0), r(0)),
      Case(f"sum axis 0 (4096, 256) {dt}", (4096, 256), dt, s(0), r(0)),
      Case(f"sum axis 1 (64, 20000, 16) {dt}", (64, 20000, 16), dt, s(1), r(1)),
      Case(f"sum axis -1 (8, 100000) {dt}", (8, 100000), dt, s(-1), r(-1)),
      Case(f"sum all (1048576,) {dt}", (1 << 20,), dt, s(None), r(None)),
      Case(f"sum all (4194304,) {dt}", (1 << 22,), dt, s(None), r(None)),
      Case(f"sum axes (0, 2) (2000, 8, 50) {dt}", (2000, 8, 50), dt, s((0, 2)), r((0, 2))),
      Case(
        f"mean axes (0, 1, 2) (8, 28, 28, 32) {dt}",
        (8, 28, 28, 32),
        dt,
        lambda x: jnp.mean(x, axis=(0, 1, 2)),
        lambda x: np.mean(x, axis=(0, 1, 2)),
      ),
      Case(
        f"mean axes (0, 1, 2) (64, 56, 56, 64) {dt}",
        (64, 56, 56, 64),
        dt,
        lambda x: jnp.mean(x, axis=(0, 1, 2)),
        lambda x: np.mean(x, axis=(0, 1, 2)),
      ),
      Case(
        f"var axis 0 (100000, 8) {dt}",
        (100000, 8),
        dt,
        lambda x: jnp.var(x, axis=0),
        lambda x: _var(x, 0),
      ),
      Case(
        f"var axis -1 (16, 65536) {dt}",
        (16, 65536),
        dt,
        lambda x: jnp.var(x, axis=-1),
        lambda x: _var(x, -1),
      ),
      Case(
        f"logsumexp axis 0 (100000, 8) {dt}",
        (100000, 8),
        dt,
        lambda x: jax.nn.logsumexp(x, axis=0),
        lambda x: _logsumexp_ref(x, 0),
      ),
      Case(
        f"logsumexp axis -1 (8, 100000) {dt}",
        (8, 100000),
        dt,
        lambda x: jax.nn.logsumexp(x, axis=-1),
        lambda x: _logsumexp_ref(x, -1),
      ),
      Case(
        f"cumsum (1048576,) {dt}", (1 << 20,), dt, lambda x: jnp.cumsum(x), lambda x: np.cumsum(x)
      ),
      Case(
        f"cumsum axis 0 (20000, 16) {dt}",
        (20000, 16),
        dt,
        lambda x: jnp.cumsum(x, axis=0),
        lambda x: np.cumsum(x, axis=0),
      ),
      Case(
        f"cumsum axis 1 (16, 20000) {dt}",
        (16, 20000),
        dt,
        lambda x: jnp.cumsum(x, axis=1),
        lambda x: np.cumsum(x, axis=1),
      ),
      Case(
        f"cumsum reverse (65536,) {dt}",
        (65536,),
        dt,
        lambda x: lax.cumsum(x, reverse=True),
        lambda x: np.cumsum(x[::-1])[::-1],
      ),
      Case(
        f"cumlogsumexp (65536,) {dt}",
        (65536,),
        dt,
        lambda x: lax.cumlogsumexp(x),
        lambda x: _cumlogsumexp_ref(x, 0),
      ),
      # Values close to 1, so that the products stay in range.
      Case(f"cumprod (65536,) {dt}", (65536,), dt, jnp.cumprod, np.cumprod, spread=1 / 4096),
      Case(
        f"prod axis 0 (4096, 64) {dt}",
        (4096, 64),
        dt,
        lambda x: jnp.prod(x, axis=0),
        lambda x: np.prod(x, axis=0),
        spread=1 / 1024,
      ),
    ]
  for dt in ("bfloat16", "float16"):
    c += [
      Case(
        f"sum in f32 axis 0 (100000, 8) {dt}",
        (100000, 8),
        dt,
        s(0, dtype=jnp.float32),
        r(0),
        out_dtype="float32",
      ),
      Case(
        f"sum in f32 axis -1 (8, 100000) {dt}",
        (8, 100000),
        dt,
        s(-1, dtype=jnp.float32),
        r(-1),
        out_dtype="float32",
      ),
      Case(
        f"mean axes (0, 1, 2) (8, 28, 28, 32) {dt}",
        (8, 28, 28, 32),
        dt,
        lambda x: jnp.mean(x, axis=(0, 1, 2), dtype=jnp.float32),
        lambda x: np.mean(x, axis=(0, 1, 2)),
        out_dtype="float32",
      ),
    ]
  return c


@dataclasses.dataclass(frozen=True)
class UlpCase:
  """An elementwise f32 function: `f` on jax arrays, `ref` on float64 numpy, inputs uniform in
  [low, high) or, with `log`, +-10^u for u uniform in [low, high)."""

  name: str
  f: Callable
  ref: Callable
  low: float
  high: float
  log: bool = False


def ulp_cases() -> list[UlpCase]:
  """The transcendentals a model's step meets, each on its usual range and a wide one."""
  return [
    UlpCase("sin [-10, 10)", jnp.sin, np.sin, -10, 10),
    UlpCase("sin [-1e4, 1e4)", jnp.sin, np.sin, -1e4, 1e4),
    UlpCase("cos [-10, 10)", jnp.cos, np.cos, -10, 10),
    UlpCase("cos [-1e4, 1e4)", jnp.cos, np.cos, -1e4, 1e4),
    UlpCase("tan [-1.5, 1.5)", jnp.tan, np.tan, -1.5, 1.5),
    UlpCase("exp [-80, 80)", jnp.exp, np.exp, -80, 80),
    UlpCase("expm1 [-5, 5)", jnp.expm1, np.expm1, -5, 5),
    UlpCase(
      "log |10^[-30, 30)|",
      lambda x: jnp.log(jnp.abs(x)),
      lambda x: np.log(np.abs(x)),
      -30,
      30,
      True,
    ),
    UlpCase("log [0, 10)", jnp.log, np.log, 0, 10),
    UlpCase("log1p [-0.9, 10)", jnp.log1p, np.log1p, -0.9, 10),
    UlpCase("log2 [0, 10)", jnp.log2, np.log2, 0, 10),
    UlpCase("log10 [0, 10)", jnp.log10, np.log10, 0, 10),
    UlpCase("tanh [-10, 10)", jnp.tanh, np.tanh, -10, 10),
    UlpCase("logistic [-20, 20)", jax.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), -20, 20),
    UlpCase("sinh [-20, 20)", jnp.sinh, np.sinh, -20, 20),
    UlpCase("cosh [-20, 20)", jnp.cosh, np.cosh, -20, 20),
    UlpCase("arcsin [-1, 1)", jnp.arcsin, np.arcsin, -1, 1),
    UlpCase("arctan [-100, 100)", jnp.arctan, np.arctan, -100, 100),
    UlpCase("arcsinh [-100, 100)", jnp.arcsinh, np.arcsinh, -100, 100),
    UlpCase("erf [-4, 4)", lax.erf, special.erf, -4, 4),
    UlpCase("sqrt [0, 100)", jnp.sqrt, np.sqrt, 0, 100),
    UlpCase("rsqrt [0, 100)", lax.rsqrt, lambda x: 1 / np.sqrt(x), 0, 100),
  ]


def ulp_input(case: UlpCase, n: int = 1 << 18, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  u = rng.uniform(case.low, case.high, size=n)
  if case.log:
    u = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0) * 10.0**u
  return u.astype(np.float32)


def max_ulp_error(y: np.ndarray, ref: np.ndarray) -> float:
  """The largest |y - ref| in float32 ulps at the exact float64 `ref` (2^(e - 24) for |ref|
  in [2^(e-1), 2^e), at least 2^-149), over the elements whose exact result is a finite
  normal float32 (below that the kernels flush, as XLA:CPU's do)."""
  ok = np.isfinite(ref) & (np.abs(ref) >= np.finfo(np.float32).tiny) & (np.abs(ref) < 2.0**128)
  _, e = np.frexp(ref[ok])
  err = np.abs(y[ok].astype(np.float64) - ref[ok]) / np.ldexp(1.0, np.maximum(e - 24, -149))
  return float(np.nan_to_num(err, nan=np.inf).max(initial=0.0))


@dataclasses.dataclass
class UlpRow:
  case: UlpCase
  workshop: float
  cpu: float

  @property
  def ok(self) -> bool:
    """The rule: no worse than XLA:CPU by more than a quarter ulp."""
    return self.workshop <= self.cpu + 0.25


def measure_ulps(case: UlpCase, seed: int = 0) -> UlpRow:
  x = ulp_input(case, seed=seed)
  with np.errstate(all="ignore"):
    ref = case.ref(x.astype(np.float64))
  f = jax.jit(case.f)
  errors = [
    max_ulp_error(np.asarray(f(jax.device_put(x, jax.devices(p)[0]))), ref)
    for p in ("workshop", "cpu")
  ]
  return UlpRow(case, *errors)


def report_ulps(rows: list[UlpRow], out=sys.stdout) -> None:
  width = max(len(r.case.name) for r in rows)
  print(
    f"{'float32 function':<{width}}  {'workshop':>8}  {'XLA:CPU':>8}  (max ulp)  rule", file=out
  )
  for r in rows:
    print(
      f"{r.case.name:<{width}}  {r.workshop:8.2f}  {r.cpu:8.2f}             "
      f"{'ok' if r.ok else 'FAILS'}",
      file=out,
    )


def x64_cases() -> list[Case]:
  """float64 versions of a few patterns (need jax_enable_x64)."""
  dt = "float64"
  return [
    Case(
      f"sum axis 0 (100000, 8) {dt}",
      (100000, 8),
      dt,
      lambda x: jnp.sum(x, axis=0),
      lambda x: np.sum(x, axis=0),
    ),
    Case(f"sum all (1048576,) {dt}", (1 << 20,), dt, jnp.sum, np.sum),
    Case(f"cumsum (1048576,) {dt}", (1 << 20,), dt, jnp.cumsum, np.cumsum),
  ]


def make_input(case: Case, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  x = 1 + case.spread * rng.uniform(-0.5, 0.5, size=case.shape)
  return x.astype(ml_dtypes.bfloat16 if case.dtype == "bfloat16" else case.dtype)


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
  y = np.asarray(y, ref.dtype)
  return float(np.max(np.abs(y - ref) / np.maximum(np.abs(ref), 1e-30)))


def ulp(dtype: str) -> float:
  return float(np.finfo(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype).eps)


@dataclasses.dataclass
class Row:
  case: Case
  workshop: float
  cpu: float

  @property
  def ratio(self) -> float:
    return (
      self.workshop / self.cpu if self.cpu > 0 else (0.0 if self.workshop == 0 else float("inf"))
    )

  @property
  def bound(self) -> float:
    """The accuracy rule: 2 x XLA:CPU's error + 4 ulp of the result's dtype."""
    return 2 * self.cpu + 4 * ulp(self.case.out_dtype or self.case.dtype)

  @property
  def ok(self) -> bool:
    return self.workshop <= self.bound


def measure(case: Case, seed: int = 0) -> Row:
  x = make_input(case, seed)
  # float64 results need a wider reference: x86's 80-bit long double (64-bit significand).
  ref = case.ref(x.astype(np.longdouble if case.dtype == "float64" else np.float64))
  f = jax.jit(case.f)
  errors = []
  for platform in ("workshop", "cpu"):
    try:
      y = np.asarray(f(jax.device_put(x, jax.devices(platform)[0])))
    except jax.errors.JaxRuntimeError as e:  # reported as a failing row, with the reason
      errors.append(float("inf"))
      print(f"{case.name} on {platform}: {str(e).splitlines()[0]}", file=sys.stderr)
      continue
    errors.append(relative_error(y, ref))
  return Row(case, *errors)


def report(rows: list[Row], out=sys.stdout) -> None:
  width = max(len(r.case.name) for r in rows)
  print(f"{'case':<{width}}  {'workshop':>9}  {'XLA:CPU':>9}  {'ratio':>6}  rule", file=out)
  for r in rows:
    print(
      f"{r.case.name:<{width}}  {r.workshop:9.2e}  {r.cpu:9.2e}  {r.ratio:6.2f}  "
      f"{'ok' if r.ok else 'FAILS'}",
      file=out,
    )


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(
    prog="python -m jax_plugins.workshop.bench.accuracy", description=__doc__.splitlines()[0]
  )
  p.add_argument("--csv", help="also write the rows to this CSV file")
  p.add_argument("--cases", help="only cases whose name contains this text")
  args = p.parse_args(argv)
  selected = [c for c in cases() if not args.cases or args.cases in c.name]
  rows = [measure(c) for c in selected]
  with jax.enable_x64(True):
    rows += [measure(c) for c in x64_cases() if not args.cases or args.cases in c.name]
  report(rows)
  ulp_rows = [measure_ulps(c) for c in ulp_cases() if not args.cases or args.cases in c.name]
  if ulp_rows:
    print()
    report_ulps(ulp_rows)
  if args.csv:
    with open(args.csv, "w", newline="") as f:
      w = csv.writer(f)
      w.writerow(["case", "dtype", "workshop_rel_err", "cpu_rel_err", "ratio", "ok"])
      for r in rows:
        w.writerow([r.case.name, r.case.dtype, r.workshop, r.cpu, r.ratio, r.ok])
      for r in ulp_rows:
        w.writerow([r.case.name, "float32", r.workshop, r.cpu, "ulp", r.ok])
  return 0 if all(r.ok for r in rows) and all(r.ok for r in ulp_rows) else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
