"""Derives the constants of the f32 tanh kernel (plugin_src/kernels/math/tanh_f32.cc) and
measures its error.

The kernel evaluates, for a = |x| < SATURATE (the smallest float32 whose tanh rounds to 1.0f,
about 9.011; from there on the result is +-1):

    w = a            if a <  SPLIT    (the small path)
    w = a / 2        if a >= SPLIT    (the large path: halve, then double)
    s = w * w
    u = w + (w * s) * D(s) / Q(s)                       ~ tanh(w), odd rational w P(s) / Q(s)
    tanh(x) = u                   on the small path
            = 2 u / (1 + u * u)   on the large path (tanh(2w) = 2 tanh(w) / (1 + tanh(w)^2))

with the sign of x put back, and x itself where |x| < 2^-12 (tanh(x) rounds to x there,
which also keeps -0 and subnormals) or x is NaN. D and Q are polynomials of degree D_DEG,
Q_DEG with Q(0) = 1; D / Q approximates r(s) = (tanh(w) / w - 1) / s, which is -1/3 at 0.

Why this shape, not one rational on [0, 9]: a single odd rational x P(x^2) / Q(x^2) on the
whole range, evaluated in float32, is about 5 ulp off (near 1 every rounding in P, Q and the
final product costs up to an ulp of the result; measured with this script's machinery for
degrees (4..7, 3..6)). Here errors are damped instead of summed:
* u = w + correction: rounding errors in the correction scale by |correction| / u, at most
  (w - tanh w) / tanh w = 0.31 for w < SPLIT = 1.
* doubling: a relative error e in u becomes e (1 - u^2) / (1 + u^2) in the result (0.65 at
  w = SPLIT / 2, 2.5e-4 at saturation), so the large path only pays for fma(u, u, 1) and
  the division; the half argument also shrinks the range of s to [0, (SATURATE / 2)^2].

The fit minimizes the weighted max relative error of D / Q against r over w in
[0, SATURATE / 2], the weight being how much a relative error of r moves the final result,
in result ulps (the two factors above). It runs in float64 on s scaled to [0, 1]:
1. Loeb's linearization: with the previous denominator Q0 fixed, minimizing
   sum v_i (weight_i (D(s_i) - r_i Q(s_i)) / (r_i Q0(s_i)))^2 is linear least squares
   (Q(0) = 1 fixed); its residual is the relative error once Q stops moving.
2. Lawson's reweighting: v_i *= |error_i| after each solve, which drives the
   least-squares solution toward the minimax (equioscillating) one.
Then the coefficients are rounded to float32 and the kernel's exact float32 arithmetic is
replayed (with fused multiply-adds as in the AVX2+FMA clone, and without as in the SSE2
one) over every float32 in [2^-12, 2 * SATURATE], against float64 np.tanh.

Run: python tools/fit_tanh.py   (numpy only; about 20 s, mostly the sweep). It printed max
1.72 ulp with FMA and 1.91 ulp without, the figures that the kernel's header comment and
tests/ops/test_elementwise_tanh_f32.py quote.
"""

from __future__ import annotations

import numpy as np

import f32_replay

D_DEG = 2
Q_DEG = 2
SPLIT = 1.0
TINY = 2.0**-12

f32 = np.float32


def saturation() -> float:
  """The smallest float32 x with tanh(x) rounding to 1.0f: 1 - tanh(x) <= 2^-25 (the tie
  rounds to 1.0f, whose last mantissa bit is even)."""
  x = np.float32(np.arctanh(1 - 2.0**-25))
  while np.tanh(np.float64(x)) < 1 - 2.0**-25:
    x = np.nextafter(x, f32(np.inf))
  while np.tanh(np.float64(np.nextafter(x, f32(0)))) >= 1 - 2.0**-25:
    x = np.nextafter(x, f32(0))
  return float(x)


SATURATE = saturation()


def fit(
  d_deg: int = D_DEG,
  q_deg: int = Q_DEG,
  split: float = SPLIT,
  saturate: float = SATURATE,
  iterations: int = 60,
):
  """Returns (d, q, err): float64 coefficients in s, lowest degree first, q[0] = 1, and the
  max weighted error of the fit in result ulps."""
  half = saturate / 2
  w = np.linspace(1e-3, half, 40001)
  s = w * w
  u = np.tanh(w)
  r = (u / w - 1) / s
  small_gain = np.where(w <= split, (w - u) / u, 0)
  large_gain = np.where(w >= split / 2, (w - u) / u * (1 - u * u) / (1 + u * u), 0)
  weight = np.maximum(small_gain, large_gain) * 2.0**24
  z = s / half**2
  vd = np.vander(z, d_deg + 1, increasing=True)
  vq = np.vander(z, q_deg + 1, increasing=True)
  q_prev = np.ones_like(z)
  v = np.ones_like(z)
  for _ in range(iterations):
    scale = np.sqrt(v) * weight / (np.abs(r) * q_prev)
    # Unknowns d_0..d_m, q_1..q_k (q_0 = 1 moves to the right-hand side).
    a = np.hstack([vd, -r[:, None] * vq[:, 1:]]) * scale[:, None]
    sol, *_ = np.linalg.lstsq(a, r * scale, rcond=None)
    d = sol[: d_deg + 1]
    q = np.concatenate([[1.0], sol[d_deg + 1 :]])
    q_prev = vq @ q
    err = weight * ((vd @ d) / q_prev / r - 1)
    v *= np.abs(err) + 1e-300
    v /= v.sum()
  # Back from z = s / half^2 to s.
  d = d / half ** (2 * np.arange(d_deg + 1))
  q = q / half ** (2 * np.arange(q_deg + 1))
  return d, q, float(np.abs(err).max())


def tanh32(
  x: np.ndarray,
  d: np.ndarray,
  q: np.ndarray,
  split: float = SPLIT,
  saturate: float = SATURATE,
  fused: bool = True,
) -> np.ndarray:
  """The kernel's float32 arithmetic, operation by operation."""
  madd = f32_replay.madd(fused)
  x = x.astype(f32)
  a = np.abs(x)
  large = a >= f32(split)
  w = np.where(large, a * f32(0.5), a)
  s = w * w
  dd = np.full_like(s, f32(d[-1]))
  for c in d[-2::-1]:
    dd = madd(dd, s, f32(c))
  qq = np.full_like(s, f32(q[-1]))
  for c in q[-2::-1]:
    qq = madd(qq, s, f32(c))
  u = madd(w * s, dd / qq, w)
  doubled = (u + u) / madd(u, u, f32(1))
  y = np.where(a >= f32(saturate), f32(1), np.where(large, doubled, u))
  y = np.copysign(y, x)
  keep = (np.abs(x) < f32(TINY)) | np.isnan(x)
  return np.where(keep, x, y).astype(f32)


def sweep(d, q, fused: bool, lo: float = TINY, hi: float = 2 * SATURATE, **kw):
  """(max ulp error, where) over every float32 in [lo, hi]; tanh is odd, the kernel too."""
  first = int(np.array(lo, f32).view(np.int32))
  last = int(np.array(hi, f32).view(np.int32))
  worst, at = 0.0, 0.0
  for start in range(first, last + 1, 1 << 23):
    x = np.arange(start, min(start + (1 << 23), last + 1), dtype=np.int32).view(f32)
    exact = np.tanh(x.astype(np.float64))
    err = f32_replay.ulp_error(tanh32(x, d, q, fused=fused, **kw), exact)
    i = int(err.argmax())
    if err[i] > worst:
      worst, at = float(err[i]), float(x[i])
  return worst, at


def main():
  d, q, err = fit()
  d32, q32 = d.astype(f32), q.astype(f32)
  print(
    f"D degree {D_DEG}, Q degree {Q_DEG}, split {SPLIT}, saturation at {SATURATE!r}: "
    f"weighted max error of the float64 fit {err:.3f} ulp"
  )
  for fused in (True, False):
    worst, at = sweep(d32, q32, fused)
    print(
      f"max error over every float32 in [2^-12, {2 * SATURATE:.4g}], "
      f"{'with' if fused else 'without'} FMA: {worst:.3f} ulp at x = {at!r}"
    )
  # %.9g round-trips a float32.
  for name, coeffs in (("kD", d32), ("kQ", q32)):
    print(f"{name}, highest degree first: " + ", ".join(f"{float(c):.9g}" for c in coeffs[::-1]))
  print(f"kSaturate = {SATURATE:.9g}")


if __name__ == "__main__":
  main()
