// Complex tan, tanh, expm1, sinh, cosh, multiply and divide as XLA:CPU computes them, so that the
// edges of the complex plane (infinities, NaN, signed zeros, overflow of the intermediate
// exponentials, subnormals read as zero under the workers' DAZ mode) give XLA's values:
//
//   * tanh and tan: xla/service/elemental_ir_emitter.cc (EmitComplexUnaryOp, kTanh/kTan):
//       tanh(a + bi) = (e^2a - e^-2a + 2i sin 2b) / (e^2a + e^-2a + 2 cos 2b), with
//       e^2a - e^-2a = expm1(2a) - expm1(-2a), 2 + 2 cos 2b = 4 cos^2 b, 2 sin 2b = 4 sin b
//       cos b; +-1 as the real part once expm1(2a) + expm1(-2a) overflows; (NaN, NaN) for a
//       finite a and a NaN sin 2b; a zero imaginary part for b == 0 (or infinite a and a
//       NaN sin 2b). tan(x + yi) = -i tanh(-y + xi).
//   * expm1: same file, kExpm1: (expm1(a) cos b + cosm1(b)) + i e^a sin b, the imaginary
//     part 0 for b == 0 (so expm1(89 + 0i) is (inf, 0), not (inf, NaN)).
//   * sinh and cosh: stablehlo's CHLO decomposition (chlo.sinh/chlo.cosh of complex),
//       cosh z = E(z + c) + E(c - z),  sinh z = E(z + c) - E(c - z),  c = -ln 2,
//     where E(u + vi) = e^u (cos v + i sin v) computed as (e^(u/2) cos v) e^(u/2) where e^u
//     overflows, with a zero imaginary part for v == 0.
//
//   * multiply and divide: same file, EmitComplexMultiply (the schoolbook product, no
//     NaN recovery: (1e-20 + 0i)(NaN + inf i) is (NaN, NaN), where libgcc's C99 Annex G
//     __mulsc3 gives (NaN, inf)) and EmitComplexDivide (Smith's algorithm; when it gives
//     (NaN, NaN), the limits for a zero denominator, an infinite numerator over a finite
//     denominator and a finite numerator over an infinite one).
//
// R is float or double; the results are std::complex<R>.
#ifndef WORKSHOP_KERNELS_COMPLEX_MATH_H_
#define WORKSHOP_KERNELS_COMPLEX_MATH_H_

#include <cmath>
#include <complex>
#include <limits>

namespace workshop {

// tanh(a + bi) as (real, imag), XLA's formula (above).
template <typename R>
std::complex<R> XlaTanhParts(R a, R b) {
  const R inf = std::numeric_limits<R>::infinity();
  const R two_a = a + a;
  const R exp_2a_m1 = std::expm1(two_a), exp_neg_2a_m1 = std::expm1(R(-1) * two_a);
  const R real_numerator = exp_2a_m1 - exp_neg_2a_m1;
  const R cos_b = std::cos(b), sin_b = std::sin(b);
  const R imag_numerator = R(4) * (cos_b * sin_b);
  const R exp_sum_m2 = exp_2a_m1 + exp_neg_2a_m1;
  const R denom = exp_sum_m2 + cos_b * cos_b * R(4);
  R real = exp_sum_m2 == inf ? std::copysign(R(1), a) : real_numerator / denom;
  R imag = imag_numerator / denom;
  const bool a_is_inf = std::fabs(a) == inf;
  const bool sin_2b_is_nan = std::isnan(imag_numerator);
  if (sin_2b_is_nan && !a_is_inf) real = std::numeric_limits<R>::quiet_NaN();
  if (b == R(0) || (a_is_inf && sin_2b_is_nan)) imag = R(0);
  return {real, imag};
}

template <typename R>
std::complex<R> XlaComplexTanh(std::complex<R> z) {
  return XlaTanhParts(z.real(), z.imag());
}

template <typename R>
std::complex<R> XlaComplexTan(std::complex<R> z) {
  const std::complex<R> t = XlaTanhParts(R(-1) * z.imag(), z.real());
  return {t.imag(), R(-1) * t.real()};
}

template <typename R>
std::complex<R> XlaComplexExpm1(std::complex<R> z) {
  const R a = z.real(), b = z.imag();
  const R expm1_a = std::expm1(a), exp_a = expm1_a + R(1);
  const R half_sin = std::sin(b / R(2));
  // cos b - 1, exact near b = 0 (+0 for b = 0, as XLA's cosm1).
  const R cos_b_m1 = R(0) - R(2) * half_sin * half_sin;
  const R cos_b = cos_b_m1 + R(1);
  return {expm1_a * cos_b + cos_b_m1, b == R(0) ? R(0) : exp_a * std::sin(b)};
}

// e^(u + vi) as the CHLO decomposition expands it (above).
template <typename R>
std::complex<R> ChloExp(R u, R v) {
  const R e = std::exp(u);
  const bool overflow = e == std::numeric_limits<R>::infinity();
  const R half = std::exp(u * R(0.5));
  const R c = std::cos(v), s = std::sin(v);
  const R real = overflow ? (half * c) * half : e * c;
  const R imag = v == R(0) ? R(0) : overflow ? (half * s) * half : e * s;
  return {real, imag};
}

// cosh (sign = 1) or sinh (sign = -1) of z.
template <typename R>
std::complex<R> ChloCoshSinh(std::complex<R> z, R sign) {
  const R c = static_cast<R>(-0.69314718055994530942);  // -ln 2, rounded to R.
  const std::complex<R> up = ChloExp(z.real() + c, z.imag() + R(0));
  const std::complex<R> down = ChloExp(c - z.real(), R(0) - z.imag());
  return {up.real() + sign * down.real(), up.imag() + sign * down.imag()};
}

// XLA:CPU's LLVM contracts each product-and-sum into one FMA; which product is fused
// decides where an intermediate overflow becomes NaN ((-3 + 1e-20i)(3.4e38 - inf i) is
// inf + inf i there, NaN + inf i without FMAs).
template <typename R>
std::complex<R> XlaComplexMultiply(std::complex<R> x, std::complex<R> y) {
  return {std::fma(x.real(), y.real(), -(x.imag() * y.imag())),
          std::fma(x.imag(), y.real(), x.real() * y.imag())};
}

template <typename R>
std::complex<R> XlaComplexDivide(std::complex<R> x, std::complex<R> y) {
  const R a_r = x.real(), a_i = x.imag(), b_r = y.real(), b_i = y.imag();
  const R zero = 0, one = 1, inf = std::numeric_limits<R>::infinity();
  // Products and sums fused as XLA:CPU's LLVM contracts them (see XlaComplexMultiply).
  const R r_over_i = b_r / b_i, r_over_i_denom = std::fma(r_over_i, b_r, b_i);
  const R i_over_r = b_i / b_r, i_over_r_denom = std::fma(i_over_r, b_i, b_r);
  const R b_r_abs = std::fabs(b_r), b_i_abs = std::fabs(b_i);
  const bool r_lt_i = b_r_abs < b_i_abs;
  const R c_r = r_lt_i ? std::fma(r_over_i, a_r, a_i) / r_over_i_denom
                       : std::fma(i_over_r, a_i, a_r) / i_over_r_denom;
  const R c_i = r_lt_i ? std::fma(r_over_i, a_i, -a_r) / r_over_i_denom
                       : std::fma(-i_over_r, a_r, a_i) / i_over_r_denom;
  if (!(std::isnan(c_r) && std::isnan(c_i))) return {c_r, c_i};
  const R a_r_abs = std::fabs(a_r), a_i_abs = std::fabs(a_i);
  if (b_r_abs == zero && b_i_abs == zero && (!std::isnan(a_r) || !std::isnan(a_i))) {
    const R signed_inf = std::copysign(inf, b_r);
    return {signed_inf * a_r, signed_inf * a_i};
  }
  const bool b_finite = b_r_abs != inf && !std::isnan(b_r) && b_i_abs != inf && !std::isnan(b_i);
  if ((a_r_abs == inf || a_i_abs == inf) && b_finite) {
    const R s_r = std::copysign(a_r_abs == inf ? one : zero, a_r);
    const R s_i = std::copysign(a_i_abs == inf ? one : zero, a_i);
    return {inf * (s_r * b_r + s_i * b_i), inf * (s_i * b_r - s_r * b_i)};
  }
  const bool a_finite = a_r_abs != inf && !std::isnan(a_r) && a_i_abs != inf && !std::isnan(a_i);
  if ((b_r_abs == inf || b_i_abs == inf) && a_finite) {
    const R s_r = std::copysign(b_r_abs == inf ? one : zero, b_r);
    const R s_i = std::copysign(b_i_abs == inf ? one : zero, b_i);
    return {zero * (a_r * s_r + a_i * s_i), zero * (a_i * s_r - a_r * s_i)};
  }
  return {c_r, c_i};
}

}  // namespace workshop

#endif  // WORKSHOP_KERNELS_COMPLEX_MATH_H_
