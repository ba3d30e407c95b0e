// fft: FFT, IFFT, RFFT and IRFFT over the trailing 1-3 dimensions.
//
//   ins:  x; outs: y
//   attrs: fft_type "FFT" | "IFFT" | "RFFT" | "IRFFT", fft_length (1-3 ints, the trailing
//          dims of the complex data, or of the real side for RFFT/IRFFT)
//   FFT, IFFT: c64/c128 -> same shape. RFFT: f32/f64 [..., n] -> c64/c128 [..., n/2+1].
//   IRFFT: c64/c128 [..., n/2+1] -> f32/f64 [..., n]. IFFT and IRFFT scale by
//   1/prod(fft_length), as numpy and XLA do. IRFFT reads only the non-redundant half of
//   the spectrum, so the imaginary parts of its DC (and, for even n, Nyquist) terms have
//   no effect.
//
// Algorithm (our own implementation, no library): a recursive mixed-radix Cooley-Tukey
// decimation in time, in the formulation of KISS FFT (Mark Borgerding): a length
// n = p * m transform does p length-m transforms of the stride-p subsequences, then one
// pass of radix-p butterflies with twiddles w_n^(q k). Radices 4, 2 and 3 have dedicated
// butterflies, other primes up to kMaxDirectRadix a generic O(p^2) one. Lengths with a
// larger prime factor use Bluestein's algorithm (chirp z-transform: the DFT as a
// convolution with the chirp w^(k^2/2), computed with power-of-two FFTs), so every length,
// primes included, costs O(n log n). Inverse transforms conjugate in and out. Twiddles are
// computed in long double and rounded once, so f32 and f64 errors stay at a few ulps
// times log n.
//
// Multi-dimensional transforms are 1-D transforms along each axis in turn: along the last
// axis rows are contiguous; other axes are gathered column by column into a scratch line.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <numbers>
#include <vector>

#include "kernels/kernel.h"

namespace workshop {
namespace {

constexpr int64_t kMaxDirectRadix = 32;

// std::complex's operator* handles inf/nan corner cases through a library call; this is
// the plain product, which vectorizes.
template <typename R>
inline std::complex<R> Mul(std::complex<R> a, std::complex<R> b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

// exp(-2 pi i num / den), accurate to the last bit of R.
template <typename R>
std::complex<R> UnitRoot(int64_t num, int64_t den) {
  const long double angle = -2.0L * std::numbers::pi_v<long double> *
                            static_cast<long double>(num) / static_cast<long double>(den);
  return {static_cast<R>(std::cos(angle)), static_cast<R>(std::sin(angle))};
}

int64_t SmallestPrimeFactor(int64_t n) {
  for (int64_t p = 2; p * p <= n; ++p) {
    if (n % p == 0) return p;
  }
  return n;
}

// A forward DFT of one length, reusable across rows. Not thread-safe (owns scratch).
template <typename R>
class FftPlan {
 public:
  using C = std::complex<R>;

  explicit FftPlan(int64_t n) : n_(n), scratch_(n) {
    if (n <= 1) return;  // The identity.
    // Radix-4 first (fewest passes), then the remaining prime factors in increasing order.
    int64_t rest = n;
    while (rest % 4 == 0) radices_.push_back(4), rest /= 4;
    while (rest > 1) {
      const int64_t p = SmallestPrimeFactor(rest);
      if (p > kMaxDirectRadix) {
        InitBluestein();
        return;
      }
      radices_.push_back(p);
      rest /= p;
    }
    generic_.resize(*std::max_element(radices_.begin(), radices_.end()));
    twiddles_.resize(n);
    for (int64_t i = 0; i < n; ++i) twiddles_[i] = UnitRoot<R>(i, n);
    // Per stage, the butterflies' twiddles w^(q k stride) laid out [q-1][k], so each
    // butterfly pass reads them sequentially.
    int64_t stride = 1;
    for (int64_t p : radices_) {
      const int64_t m = n / stride / p;
      std::vector<C>& table = stage_twiddles_.emplace_back((p - 1) * m);
      for (int64_t q = 1; q < p; ++q) {
        for (int64_t k = 0; k < m; ++k) table[(q - 1) * m + k] = twiddles_[(q * k * stride) % n];
      }
      stride *= p;
    }
  }

  // data[0..n) <- DFT(data); with `inverse`, the unnormalized inverse DFT.
  void Run(C* data, bool inverse) {
    if (n_ <= 1) return;
    if (inverse) {
      for (int64_t i = 0; i < n_; ++i) data[i] = std::conj(data[i]);
    }
    if (bluestein_) {
      RunBluestein(data);
    } else {
      std::memcpy(scratch_.data(), data, n_ * sizeof(C));
      Work(data, scratch_.data(), 1, 0);
    }
    if (inverse) {
      for (int64_t i = 0; i < n_; ++i) data[i] = std::conj(data[i]);
    }
  }

 private:
  // out[0..len) <- DFT of in[0], in[stride], ..., where len = n_ / stride at `stage`.
  void Work(C* out, const C* in, int64_t stride, size_t stage) {
    const int64_t p = radices_[stage];
    const int64_t m = n_ / stride / p;
    if (m == 1) {
      for (int64_t q = 0; q < p; ++q) out[q] = in[q * stride];
    } else {
      for (int64_t q = 0; q < p; ++q) Work(out + q * m, in + q * stride, stride * p, stage + 1);
    }
    const C* tw = stage_twiddles_[stage].data();
    switch (p) {
      case 2: Radix2(out, tw, m); break;
      case 3: Radix3(out, tw, m); break;
      case 4: Radix4(out, tw, m); break;
      default: RadixGeneric(out, tw, m, p, stride); break;
    }
  }

  // Each butterfly combines out[k + q m] (q < p), the k-th outputs of the p sub-transforms,
  // after twiddling by w^(q k stride) = tw[(q - 1) m + k].
  void Radix2(C* out, const C* tw, int64_t m) {
    for (int64_t k = 0; k < m; ++k) {
      const C b = Mul(out[k + m], tw[k]);
      out[k + m] = out[k] - b;
      out[k] += b;
    }
  }

  void Radix3(C* out, const C* tw, int64_t m) {
    const R s3 = static_cast<R>(std::sqrt(3.0L) / 2);  // -Im(w_3)
    for (int64_t k = 0; k < m; ++k) {
      const C t0 = out[k];
      const C t1 = Mul(out[k + m], tw[k]);
      const C t2 = Mul(out[k + 2 * m], tw[m + k]);
      const C s = t1 + t2, d = t1 - t2;
      const C mid = t0 - s * R(0.5);
      const C rot(d.imag() * s3, -d.real() * s3);  // -i sqrt(3)/2 * d
      out[k] = t0 + s;
      out[k + m] = mid + rot;
      out[k + 2 * m] = mid - rot;
    }
  }

  void Radix4(C* out, const C* tw, int64_t m) {
    for (int64_t k = 0; k < m; ++k) {
      const C t0 = out[k];
      const C t1 = Mul(out[k + m], tw[k]);
      const C t2 = Mul(out[k + 2 * m], tw[m + k]);
      const C t3 = Mul(out[k + 3 * m], tw[2 * m + k]);
      const C a = t0 + t2, b = t0 - t2, c = t1 + t3;
      const C d = t1 - t3;
      const C minus_i_d(d.imag(), -d.real());
      out[k] = a + c;
      out[k + m] = b + minus_i_d;
      out[k + 2 * m] = a - c;
      out[k + 3 * m] = b - minus_i_d;
    }
  }

  void RadixGeneric(C* out, const C* tw, int64_t m, int64_t p, int64_t stride) {
    C* t = generic_.data();
    const int64_t root = stride * m;  // w_p = twiddles_[root]
    for (int64_t k = 0; k < m; ++k) {
      t[0] = out[k];
      for (int64_t q = 1; q < p; ++q) t[q] = Mul(out[k + q * m], tw[(q - 1) * m + k]);
      for (int64_t u = 0; u < p; ++u) {
        C sum = t[0];
        for (int64_t q = 1; q < p; ++q) sum += Mul(t[q], twiddles_[(q * u % p) * root]);
        out[k + u * m] = sum;
      }
    }
  }

  // Bluestein: X_k = conj(c_k) * sum_j (x_j conj(c_j)) c_(k-j), c_k = w^(-k^2/2).
  void InitBluestein() {
    bluestein_ = true;
    radices_.clear();
    int64_t size = 1;
    while (size < 2 * n_ - 1) size *= 2;
    conv_ = std::make_unique<FftPlan<R>>(size);
    chirp_.resize(n_);
    for (int64_t k = 0; k < n_; ++k) {
      // k^2 mod 2n keeps the angle exact for large k.
      chirp_[k] = UnitRoot<R>(static_cast<int64_t>((static_cast<__int128>(k) * k) % (2 * n_)),
                              2 * n_);
    }
    filter_.assign(size, C(0));
    for (int64_t k = 0; k < n_; ++k) {
      filter_[k] = std::conj(chirp_[k]);
      if (k > 0) filter_[size - k] = std::conj(chirp_[k]);
    }
    conv_->Run(filter_.data(), false);
    work_.resize(size);
  }

  void RunBluestein(C* data) {
    const int64_t size = static_cast<int64_t>(work_.size());
    for (int64_t k = 0; k < n_; ++k) work_[k] = Mul(data[k], chirp_[k]);
    std::fill(work_.begin() + n_, work_.end(), C(0));
    conv_->Run(work_.data(), false);
    for (int64_t k = 0; k < size; ++k) work_[k] = Mul(work_[k], filter_[k]);
    conv_->Run(work_.data(), true);
    const R scale = R(1) / static_cast<R>(size);
    for (int64_t k = 0; k < n_; ++k) data[k] = Mul(work_[k], chirp_[k]) * scale;
  }

  int64_t n_;
  std::vector<int64_t> radices_;
  // scratch_: the input of the top-level Work, read while butterflies run; generic_: one
  // butterfly's twiddled inputs.
  std::vector<C> twiddles_, scratch_, generic_;
  std::vector<std::vector<C>> stage_twiddles_;
  // Bluestein state: the chirp, the FFT of the convolution filter, a work line.
  bool bluestein_ = false;
  std::unique_ptr<FftPlan<R>> conv_;
  std::vector<C> chirp_, filter_, work_;
};

// Transforms axis `axis` (counted from the end, 1 = last) of a dense complex array.
template <typename R>
void TransformAxis(std::complex<R>* data, const Dims& dims, int axis, bool inverse) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t n = dims[rank - axis];
  int64_t inner = 1;
  for (int64_t d = rank - axis + 1; d < rank; ++d) inner *= dims[d];
  const int64_t outer = NumElements(dims) / (n * inner);
  FftPlan<R> plan(n);
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) plan.Run(data + o * n, inverse);
    return;
  }
  // Columns are strided; gather kColumns neighbouring ones at a time so every memory
  // access touches a run of contiguous elements rather than one per cache line.
  constexpr int64_t kColumns = 8;
  std::vector<std::complex<R>> lines(kColumns * n);
  for (int64_t o = 0; o < outer; ++o) {
    std::complex<R>* block = data + o * n * inner;
    for (int64_t i0 = 0; i0 < inner; i0 += kColumns) {
      const int64_t width = std::min(kColumns, inner - i0);
      for (int64_t k = 0; k < n; ++k) {
        for (int64_t c = 0; c < width; ++c) lines[c * n + k] = block[k * inner + i0 + c];
      }
      for (int64_t c = 0; c < width; ++c) plan.Run(lines.data() + c * n, inverse);
      for (int64_t k = 0; k < n; ++k) {
        for (int64_t c = 0; c < width; ++c) block[k * inner + i0 + c] = lines[c * n + k];
      }
    }
  }
}

template <typename R>
void Scale(std::complex<R>* data, int64_t count, R factor) {
  for (int64_t i = 0; i < count; ++i) data[i] *= factor;
}

template <typename R>
void ComplexFft(const Tensor& x, const Tensor& y, int rank, bool inverse, int64_t total) {
  auto* out = y.as<std::complex<R>>();
  std::memcpy(out, x.data, y.num_elements() * sizeof(*out));
  for (int axis = 1; axis <= rank; ++axis) TransformAxis(out, *y.dims, axis, inverse);
  if (inverse) Scale(out, y.num_elements(), R(1) / static_cast<R>(total));
}

template <typename R>
void RealFft(const Tensor& x, const Tensor& y, int rank) {
  const int64_t n = x.dims->back(), half = y.dims->back();
  const R* in = x.as<R>();
  auto* out = y.as<std::complex<R>>();
  FftPlan<R> plan(n);
  std::vector<std::complex<R>> line(n);
  for (int64_t row = 0, rows = x.num_elements() / n; row < rows; ++row) {
    for (int64_t k = 0; k < n; ++k) line[k] = in[row * n + k];
    plan.Run(line.data(), false);
    std::memcpy(out + row * half, line.data(), half * sizeof(line[0]));
  }
  for (int axis = 2; axis <= rank; ++axis) TransformAxis(out, *y.dims, axis, false);
}

template <typename R>
void InverseRealFft(const Tensor& x, const Tensor& y, int rank, int64_t total) {
  const int64_t n = y.dims->back(), half = x.dims->back();
  // The leading axes are inverted first, on a copy (the input is not ours to modify).
  const auto* in = x.as<std::complex<R>>();
  std::vector<std::complex<R>> spectrum;
  if (rank > 1) {
    spectrum.assign(in, in + x.num_elements());
    for (int axis = 2; axis <= rank; ++axis) TransformAxis(spectrum.data(), *x.dims, axis, true);
    in = spectrum.data();
  }
  R* out = y.as<R>();
  FftPlan<R> plan(n);
  std::vector<std::complex<R>> line(n);
  const R scale = R(1) / static_cast<R>(total);
  for (int64_t row = 0, rows = y.num_elements() / n; row < rows; ++row) {
    const std::complex<R>* h = in + row * half;
    // Rebuild the Hermitian spectrum; X[n-k] = conj(X[k]).
    for (int64_t k = 0; k < n; ++k) line[k] = k <= n / 2 ? h[k] : std::conj(h[n - k]);
    plan.Run(line.data(), true);
    for (int64_t k = 0; k < n; ++k) out[row * n + k] = line[k].real() * scale;
  }
}

Status Fft(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const Tensor& y = ctx.outs[0];
  const std::string& type = ctx.instr.attr<std::string>("fft_type");
  const IntList& lengths = ctx.instr.attr<IntList>("fft_length");
  const int rank = static_cast<int>(lengths.size());
  const bool real_in = type == "RFFT", real_out = type == "IRFFT";
  const Tensor& complex_side = real_in ? y : x;
  const Tensor& real_side = real_in ? x : y;
  // The complex dtype of this transform and the real dtype it pairs with.
  const bool f64 = complex_side.dtype == DType::kC128;
  const DType real_dtype = f64 ? DType::kF64 : DType::kF32;
  bool ok = rank >= 1 && rank <= 3 && x.rank() >= rank && x.rank() == y.rank() &&
            (complex_side.dtype == DType::kC64 || f64) &&
            (real_in || real_out ? real_side.dtype == real_dtype
                                 : y.dtype == x.dtype && *y.dims == *x.dims);
  int64_t total = 1;
  for (int i = 0; ok && i < rank; ++i) {
    const int64_t real_dim = (*real_side.dims)[real_side.rank() - rank + i];
    const int64_t complex_dim = (*complex_side.dims)[complex_side.rank() - rank + i];
    const bool last = i == rank - 1;
    ok = real_dim == lengths[i] &&
         complex_dim == (last && (real_in || real_out) ? lengths[i] / 2 + 1 : lengths[i]);
    total *= lengths[i];
  }
  for (int64_t d = 0; ok && d < x.rank() - rank; ++d) ok = (*x.dims)[d] == (*y.dims)[d];
  if (!ok || !(real_in || real_out || type == "FFT" || type == "IFFT")) {
    return InvalidArgument("workshop: fft ", type, " of ", ShapeString(x.dtype, *x.dims),
                           " into ", ShapeString(y.dtype, *y.dims), " with fft_length of ",
                           rank, " dims at ", ctx.instr.loc);
  }
  if (y.num_elements() == 0) return Status();
  auto run = [&](auto tag) {
    using R = decltype(tag);
    if (real_in) {
      RealFft<R>(x, y, rank);
    } else if (real_out) {
      InverseRealFft<R>(x, y, rank, total);
    } else {
      ComplexFft<R>(x, y, rank, type == "IFFT", total);
    }
  };
  f64 ? run(double{}) : run(float{});
  return Status();
}

WORKSHOP_REGISTER_KERNEL("fft", Fft);

}  // namespace
}  // namespace workshop
