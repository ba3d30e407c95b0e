"""Derives the constants of the f32 exp kernel (plugin_src/kernels/math/exp_f32.cc) and measures
its error and that of the logistic built on it.

The kernel evaluates, in float32:

    k = round(x * LOG2E)              (adding and subtracting SHIFTER, 1.5 * 2^23)
    r = (x - k * LN2_HI) - k * LN2_LO                         |r| <= ln2 / 2 (a hair more)
    p = 1 + (r + r^2 Q(r))            Q(r) = (c6 r^2 + (c5 r + c4)) r^2 + (c3 r + c2)  ~ e^r
    e^x = 2^k p                       (k added to p's exponent field, in integers)

and answers +0 below MIN_ARG (the smallest float32 whose e^x rounds to a normal float32),
+inf above MAX_ARG (the largest whose e^x rounds to a finite one), NaN for NaN.

Range reduction: LN2_HI is ln2 cut to 16 significant bits, so k * LN2_HI is exact in
float32 for |k| < 2^8 (|k| <= 128 in range), and x - k * LN2_HI is exact (Sterbenz: the
two are within a factor 2 of each other for k != 0). LN2_LO is the float32 nearest
ln2 - LN2_HI; what is left of ln2 (~1e-14) times |k| moves r by ~1e-12, a thousandth of an
ulp of the result. The second subtraction rounds once (an FMA) or twice, an absolute error
in r of at most ~2^-25 |r|, which is the same relative error in e^r.

The polynomial: 1 and r are exact, Q (degree DEGREE - 2) is fitted to minimize the max
error of 1 + r + r^2 Q(r) against e^r over |r| <= R_MAX in units of the result's float32
ulp (2^-24 below 1, 2^-23 from 1 on; scaling by 2^k changes neither): weighted least
squares in float64 with Lawson's reweighting (weights *= |error| after each solve), which
converges to the minimax (equioscillating) fit. Degree 5 leaves 1.4 ulp of approximation
error before any rounding; degree 6 leaves 0.04, so the float32 roundings are nearly all of
the error. p = 1 + s with s = r + r^2 Q(r) rounds once where it matters most.

Then the coefficients are rounded to float32 and the kernel's float32 arithmetic is replayed
(with fused multiply-adds, as GCC contracts the x86-64-v3 clone, and without, as in the
SSE2 one) over every float32 in [-SWEEP, SWEEP], against float64 np.exp; and the same for
logistic(x) = 1 / (1 + e^-x) (kernel LogisticF32).

Run: python tools/fit_exp.py   (numpy only; four sweeps over 2.3e9 floats, a minute or two each)
"""

from __future__ import annotations

import numpy as np

import f32_replay

DEGREE = 6
SWEEP = 100.0
f32 = np.float32
TINY = np.finfo(f32).tiny

LOG2E = f32(1 / np.log(2.0))
LN2_HI = f32(np.round(np.log(2.0) * 2.0**16) / 2.0**16)
LN2_LO = f32(np.log(2.0) - np.float64(LN2_HI))
SHIFTER = f32(1.5 * 2.0**23)
# k comes from float32 x * LOG2E, which can round across a half: r may pass ln2 / 2 by a
# little (|x| * 2^-24 ln2 at most, ~4e-6 at |x| = 89).
R_MAX = np.log(2.0) / 2 * (1 + 2.0**-10)


def _rounds_to_normal(x) -> bool:
  with np.errstate(over="ignore"):
    return TINY <= np.exp(np.float64(x)).astype(f32) < np.inf


def _last_float(start: float, direction: float) -> float:
  """The last float32 from `start` toward `direction` whose e^x rounds to a normal float32
  (start must be one)."""
  x = f32(start)
  while _rounds_to_normal(np.nextafter(x, f32(direction))):
    x = np.nextafter(x, f32(direction))
  return float(x)


MIN_ARG = _last_float(-87.33, -np.inf)  # ~ln(FLT_MIN) = -126 ln2
MAX_ARG = _last_float(88.72, np.inf)  # ~ln(FLT_MAX) ~ 128 ln2


def fit(degree: int = DEGREE, r_max: float = R_MAX, iterations: int = 200):
  """Returns (c, err): float64 coefficients of Q, lowest degree first (c[0] ~ 1/2), and the
  max error of 1 + r + r^2 Q(r) in result ulps."""
  r = np.linspace(-r_max, r_max, 40001)
  e = np.exp(r)
  ulp = np.where(e < 1, 2.0**-24, 2.0**-23)
  a = r[:, None] ** (2 + np.arange(degree - 1)) / ulp[:, None]
  b = (e - 1 - r) / ulp
  v = np.ones_like(r)
  for _ in range(iterations):
    w = np.sqrt(v)
    c, *_ = np.linalg.lstsq(a * w[:, None], b * w, rcond=None)
    err = a @ c - b
    v *= np.abs(err) + 1e-300
    v /= v.sum()
  return c, float(np.abs(err).max())


def exp32(x: np.ndarray, c: np.ndarray, fused: bool = True) -> np.ndarray:
  """The kernel's float32 arithmetic, operation by operation (c: Q's float32 coefficients,
  c2..c6, in the degree-4 case the kernel has)."""
  assert len(c) == 5, "the kernel's Estrin form is for Q of degree 4"
  madd = f32_replay.madd(fused)
  c2, c3, c4, c5, c6 = (f32(v) for v in c)
  x = x.astype(f32)
  with np.errstate(over="ignore", invalid="ignore"):  # Out-of-range lanes: masked below.
    shifted = madd(x, LOG2E, SHIFTER)
    k = (shifted - SHIFTER).astype(f32)
    r = madd(-k, LN2_HI, x)  # Exact either way (see above).
    r = madd(-k, LN2_LO, r)
    r2 = (r * r).astype(f32)
    q = madd(madd(c6, r2, madd(c5, r, c4)), r2, madd(c3, r, c2))
    p = (madd(q, r2, r) + f32(1)).astype(f32)
    scaled = p.view(np.uint32) + (shifted.view(np.uint32) << np.uint32(23))
    y = np.where(x < f32(MIN_ARG), np.uint32(0), scaled).view(f32)
    return np.where(~(x <= f32(MAX_ARG)), x + f32(np.inf), y).astype(f32)


def logistic32(x: np.ndarray, c: np.ndarray, fused: bool = True) -> np.ndarray:
  """The kernel's LogisticF32: 1 / (1 + e^-x) on exp32, in float32, with the subnormal
  quotients (x < ~-87.34) flushed to +0 as the workers' FTZ mode does."""
  y = (f32(1) / (f32(1) + exp32(-x.astype(f32), c, fused))).astype(f32)
  return np.where(y < TINY, f32(0), y)


def exp64(x: np.ndarray) -> np.ndarray:
  return np.exp(x.astype(np.float64))


def logistic64(x: np.ndarray) -> np.ndarray:
  return 1 / (1 + np.exp(-x.astype(np.float64)))


def flush_mismatches(y: np.ndarray, ref: np.ndarray, x: np.ndarray) -> np.ndarray:
  """The x whose result is not +0 though ref rounds below the smallest normal float32, or
  is +0 though ref does not."""
  with np.errstate(over="ignore"):
    flushed = ref.astype(f32) < TINY
  return x[(y.view(np.uint32) == 0) != flushed]


def sweep(
  c,
  fused: bool,
  kernel=exp32,
  exact=exp64,
  lo: float = -SWEEP,
  hi: float = SWEEP,
  chunk: int = 1 << 18,
):
  """(max ulp error, where, flush mismatches) of kernel against exact over every float32 in
  [lo, hi], in chunks small enough for numpy to reuse its buffers (64 MB ones page-fault
  anew each time: 9x slower)."""
  worst, at, mismatches = 0.0, 0.0, []
  for sign, a, b in ((1, max(lo, 0.0), hi), (-1, max(-hi, 0.0), -lo)):
    if b < a:
      continue
    first = int(np.array(a, f32).view(np.int32))
    last = int(np.array(b, f32).view(np.int32))
    for start in range(first, last + 1, chunk):
      x = np.arange(start, min(start + chunk, last + 1), dtype=np.int32).view(f32) * f32(sign)
      y, ref = kernel(x, c, fused), exact(x)
      # Results below the smallest normal are not measured (see flush_mismatches).
      err = np.where(ref < TINY, 0.0, f32_replay.ulp_error(y, ref))
      i = int(err.argmax())
      if err[i] > worst:
        worst, at = float(err[i]), float(x[i])
      mismatches.extend(flush_mismatches(y, ref, x).tolist())
  return worst, at, mismatches


def main():
  c, err = fit()
  c32 = c.astype(f32)
  print(f"degree {DEGREE}, |r| <= {R_MAX:.6f}: max error of the float64 fit {err:.4f} ulp")
  # %.9g round-trips a float32.
  print("kC, highest degree first: " + ", ".join(f"{float(v):.9g}f" for v in c32[::-1]))
  print(
    f"kLog2e = {float(LOG2E):.9g}f, kLn2Hi = {float(LN2_HI):.9g}f, kLn2Lo = {float(LN2_LO):.9g}f"
  )
  print(f"kMinArg = {MIN_ARG:.9g}f, kMaxArg = {MAX_ARG:.9g}f", flush=True)
  for name, kernel, exact in (("exp", exp32, exp64), ("logistic", logistic32, logistic64)):
    for fused in (True, False):
      worst, at, mismatches = sweep(c32, fused, kernel, exact)
      print(
        f"{name}: max error over every float32 in [-{SWEEP:g}, {SWEEP:g}], "
        f"{'with' if fused else 'without'} FMA: {worst:.3f} ulp at x = {at!r}; "
        f"+0 where the exact result rounds to a normal float32 or not +0 where it "
        f"does not: {mismatches}",
        flush=True,
      )


if __name__ == "__main__":
  main()
