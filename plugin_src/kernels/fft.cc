// fft: FFT, IFFT, RFFT and IRFFT over the trailing 1-3 dimensions.
//
//   ins:  x; outs: y
//   attrs: fft_type "FFT" | "IFFT" | "RFFT" | "IRFFT", fft_length (1-3 ints, the trailing
//          dims of the complex data, or of the real side for RFFT/IRFFT), mkl_library (the
//          path of libmkl_rt.so.N the compiler found, compiler/rules/fft.py)
//   FFT, IFFT: c64/c128 -> same shape. RFFT: f32/f64 [..., n] -> c64/c128 [..., n/2+1].
//   IRFFT: c64/c128 [..., n/2+1] -> f32/f64 [..., n]. IFFT and IRFFT scale by
//   1/prod(fft_length), as numpy and XLA do. IRFFT reads only the non-redundant half of
//   the spectrum, so the imaginary parts of its DC (and, for even n, Nyquist) terms have
//   no effect.
//
// Implementation: Intel oneMKL's DFTI (XLA:CPU uses ducc0, which has no C++ headers on
// PyPI; the `mkl` and `mkl-include` wheels have both library and headers). The plugin
// does not link MKL, whose unprefixed cblas_*/LAPACK symbols would clash with the
// scipy-openblas32 ones dot and linalg use: `prepare` (compile/deserialize time) dlopens
// the instruction's mkl_library with RTLD_LOCAL, looks up the few DFTI entry points,
// selects MKL's sequential threading layer and commits and runs one tiny transform, so a
// missing or broken library fails the compile, never a run. mkl_dfti.h comes from
// mkl-include at build time, for the types and enums only.
//
// Parallelism is the plugin's: MKL runs single-threaded (sequential layer, and
// DFTI_THREAD_LIMIT 1 in case another user of the process chose a threaded layer), and
// the kernel splits work over ThreadPool::Global() in a fixed number of parts, so results
// do not depend on timing. Rank 1: the batch is split by transforms, one batched DFTI call
// per part (a single transform runs on one core: MKL's sequential 1M-point FFT already
// takes half XLA:CPU's time). Rank 2 and 3 go axis by axis with batched 1-D transforms,
// never DFTI's multi-dimensional descriptors: those were measured at about twice the
// rounding error (float64 rms 0.68 ulp vs 0.37 for 17x31; XLA:CPU 0.36). The rows of the
// last axis are split by rows, every other axis by outer blocks or by columns of a block
// (strided 1-D transforms, DFTI's stride and distance parameters; lengths that are not
// powers of two on tiles of columns gathered into contiguous rows, MKL's strided path
// being less accurate for those). IRFFT works through a
// scratch copy of its input: complex backward transforms over the leading axes, then
// complex-to-real rows, as numpy and XLA do, which is what makes "only the non-redundant
// half is read" hold along the leading axes too.
//
// Committed descriptors are cached per configuration (precision, domain, lengths, number
// of transforms, strides, distances, placement, backward scale) in a bounded pool behind a
// mutex. A descriptor is leased to one thread at a time (MKL documents concurrent use of
// one committed descriptor only through DFTI_NUMBER_OF_USER_THREADS, deprecated), so two
// threads running the same configuration get two descriptors; idle ones beyond
// kMaxIdleDescriptors are freed, least recently used first. Errors of DFTI become a Status
// naming the op, the dtype and DftiErrorMessage.
#include <dlfcn.h>
#include <mkl_dfti.h>

#include <algorithm>
#include <bit>
#include <complex>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/core/kernel.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// MKL_Set_Threading_Layer's code for the sequential layer (mkl_service.h).
constexpr int kMklThreadingSequential = 1;

// The DFTI entry points, from one dlopen of libmkl_rt. Lives for the process.
struct Mkl {
  std::string path;
  decltype(&::DftiCreateDescriptor_s_1d) create_s_1d;
  decltype(&::DftiCreateDescriptor_d_1d) create_d_1d;
  decltype(&::DftiCreateDescriptor_s_md) create_s_md;
  decltype(&::DftiCreateDescriptor_d_md) create_d_md;
  decltype(&::DftiSetValue) set_value;
  decltype(&::DftiCommitDescriptor) commit;
  decltype(&::DftiComputeForward) forward;
  decltype(&::DftiComputeBackward) backward;
  decltype(&::DftiFreeDescriptor) free;
  decltype(&::DftiErrorMessage) error_message;
};

// One descriptor's configuration, in DFTI's terms. Strides have rank + 1 entries (the
// first is an offset, 0); the forward domain is complex (FFT) or real (RFFT), the
// backward one complex.
struct Layout {
  bool f64 = false, real = false, in_place = false;
  std::vector<MKL_LONG> lengths;
  MKL_LONG howmany = 1, fwd_distance = 0, bwd_distance = 0;
  std::vector<MKL_LONG> fwd_strides, bwd_strides;
  double bwd_scale = 1.0;

  std::vector<int64_t> Key(const Mkl* mkl) const {
    std::vector<int64_t> key = {
        reinterpret_cast<int64_t>(mkl),       f64,     real,         in_place,
        static_cast<int64_t>(lengths.size()), howmany, fwd_distance, bwd_distance,
        std::bit_cast<int64_t>(bwd_scale)};
    key.insert(key.end(), lengths.begin(), lengths.end());
    key.insert(key.end(), fwd_strides.begin(), fwd_strides.end());
    key.insert(key.end(), bwd_strides.begin(), bwd_strides.end());
    return key;
  }
};

std::string MklError(const Mkl& mkl, const char* call, MKL_LONG status) {
  const char* message = mkl.error_message(status);
  return StrCat("MKL ", call, " failed: ", message ? message : "(no message)", " (status ", status,
                ")");
}

// Creates, configures and commits a descriptor; "" or what failed.
std::string CreateDescriptor(const Mkl& mkl, const Layout& l, DFTI_DESCRIPTOR_HANDLE* out) {
  // DftiCreateDescriptor is a macro over these four (mkl_dfti.h).
  const DFTI_CONFIG_VALUE domain = l.real ? DFTI_REAL : DFTI_COMPLEX;
  const auto rank = static_cast<MKL_LONG>(l.lengths.size());
  DFTI_DESCRIPTOR_HANDLE h = nullptr;
  MKL_LONG s;
  if (rank == 1) {
    s = l.f64 ? mkl.create_d_1d(&h, domain, l.lengths[0])
              : mkl.create_s_1d(&h, domain, l.lengths[0]);
  } else {
    s = l.f64 ? mkl.create_d_md(&h, domain, rank, l.lengths.data())
              : mkl.create_s_md(&h, domain, rank, l.lengths.data());
  }
  if (s != DFTI_NO_ERROR) {
    if (h != nullptr) mkl.free(&h);
    return MklError(mkl, "DftiCreateDescriptor", s);
  }
  const char* what = "DftiSetValue";
  auto set = [&](DFTI_CONFIG_PARAM param, auto value) {
    if (s == DFTI_NO_ERROR) s = mkl.set_value(h, param, value);
  };
  set(DFTI_PLACEMENT, l.in_place ? DFTI_INPLACE : DFTI_NOT_INPLACE);
  set(DFTI_NUMBER_OF_TRANSFORMS, l.howmany);
  set(DFTI_FWD_DISTANCE, l.fwd_distance);
  set(DFTI_BWD_DISTANCE, l.bwd_distance);
  set(DFTI_FWD_STRIDES, l.fwd_strides.data());
  set(DFTI_BWD_STRIDES, l.bwd_strides.data());
  set(DFTI_BACKWARD_SCALE, l.bwd_scale);  // Read as a double in either precision.
  set(DFTI_THREAD_LIMIT, static_cast<MKL_LONG>(1));
  if (l.real) {
    set(DFTI_CONJUGATE_EVEN_STORAGE, DFTI_COMPLEX_COMPLEX);
    set(DFTI_PACKED_FORMAT, DFTI_CCE_FORMAT);
  }
  if (s == DFTI_NO_ERROR) what = "DftiCommitDescriptor", s = mkl.commit(h);
  if (s != DFTI_NO_ERROR) {
    mkl.free(&h);
    return MklError(mkl, what, s);
  }
  *out = h;
  return "";
}

// Committed descriptors not in use, by configuration; bounded.
class DescriptorPool {
 public:
  static constexpr size_t kMaxIdleDescriptors = 64;

  static DescriptorPool& Global() {
    // Never destroyed: at exit MKL may already have run its own destructors. The idle
    // descriptors stay reachable from here (no leak report).
    static auto* pool = new DescriptorPool();
    return *pool;
  }

  // An idle descriptor for `l`, or a new one; "" or what failed.
  std::string Lease(const Mkl& mkl, const Layout& l, std::vector<int64_t>* key,
                    DFTI_DESCRIPTOR_HANDLE* out) {
    *key = l.Key(&mkl);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = idle_.find(*key);
      if (it != idle_.end() && !it->second.handles.empty()) {
        *out = it->second.handles.back();
        it->second.handles.pop_back();
        --count_;
        return "";
      }
    }
    return CreateDescriptor(mkl, l, out);  // Committing can take a while: not under mu_.
  }

  void Return(const Mkl& mkl, std::vector<int64_t> key, DFTI_DESCRIPTOR_HANDLE h) {
    std::vector<std::pair<const Mkl*, DFTI_DESCRIPTOR_HANDLE>> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Idle& idle = idle_[std::move(key)];
      idle.mkl = &mkl;
      idle.handles.push_back(h);
      idle.last_use = ++clock_;
      ++count_;
      while (count_ > kMaxIdleDescriptors) {
        auto oldest = idle_.end();
        for (auto it = idle_.begin(); it != idle_.end(); ++it) {
          if (!it->second.handles.empty() &&
              (oldest == idle_.end() || it->second.last_use < oldest->second.last_use)) {
            oldest = it;
          }
        }
        for (DFTI_DESCRIPTOR_HANDLE e : oldest->second.handles) {
          evicted.emplace_back(oldest->second.mkl, e);
        }
        count_ -= oldest->second.handles.size();
        idle_.erase(oldest);
      }
    }
    for (auto& [owner, e] : evicted) owner->free(&e);
  }

  size_t idle_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  struct Idle {
    const Mkl* mkl = nullptr;
    std::vector<DFTI_DESCRIPTOR_HANDLE> handles;
    uint64_t last_use = 0;
  };
  std::mutex mu_;
  std::map<std::vector<int64_t>, Idle> idle_;
  size_t count_ = 0;
  uint64_t clock_ = 0;
};

// Runs the transform `l` once (its howmany transforms) from `in` to `out` (the same for
// in-place layouts); "" or what failed.
std::string Compute(const Mkl& mkl, const Layout& l, bool forward, const void* in, void* out) {
  std::vector<int64_t> key;
  DFTI_DESCRIPTOR_HANDLE h = nullptr;
  std::string error = DescriptorPool::Global().Lease(mkl, l, &key, &h);
  if (!error.empty()) return error;
  // Out of place, DFTI keeps the input (DFTI_DESTROY_INPUT defaults to DFTI_AVOID).
  void* src = const_cast<void*>(in);
  MKL_LONG s;
  if (l.in_place) {
    s = forward ? mkl.forward(h, src) : mkl.backward(h, src);
  } else {
    s = forward ? mkl.forward(h, src, out) : mkl.backward(h, src, out);
  }
  DescriptorPool::Global().Return(mkl, std::move(key), h);
  return s == DFTI_NO_ERROR
             ? ""
             : MklError(mkl, forward ? "DftiComputeForward" : "DftiComputeBackward", s);
}

// Loads (once per path) and checks the library.
std::string LoadMkl(const std::string& path, const Mkl** out) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, std::unique_ptr<Mkl>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded->find(path); it != loaded->end()) {
    *out = it->second.get();
    return "";
  }
  // RTLD_LOCAL: MKL's BLAS and LAPACK symbols must not interpose on OpenBLAS's. Never
  // closed: descriptors and MKL's own state live until exit.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return StrCat("cannot load ", path, ": ", why ? why : "dlopen failed");
  }
  auto mkl = std::make_unique<Mkl>();
  mkl->path = path;
  std::string missing;
  auto find = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
    if (fn == nullptr) missing += StrCat(missing.empty() ? "" : ", ", symbol);
  };
  find(mkl->create_s_1d, "DftiCreateDescriptor_s_1d");
  find(mkl->create_d_1d, "DftiCreateDescriptor_d_1d");
  find(mkl->create_s_md, "DftiCreateDescriptor_s_md");
  find(mkl->create_d_md, "DftiCreateDescriptor_d_md");
  find(mkl->set_value, "DftiSetValue");
  find(mkl->commit, "DftiCommitDescriptor");
  find(mkl->forward, "DftiComputeForward");
  find(mkl->backward, "DftiComputeBackward");
  find(mkl->free, "DftiFreeDescriptor");
  find(mkl->error_message, "DftiErrorMessage");
  int (*set_threading_layer)(int) = nullptr;
  find(set_threading_layer, "MKL_Set_Threading_Layer");
  int (*set_code_path)(int) = nullptr;
  find(set_code_path, "MKL_CBWR_Set");
  if (!missing.empty()) return StrCat(path, " lacks ", missing);
  // Before MKL's first computation; afterwards (someone else in the process used MKL
  // first) it keeps the layer chosen, and DFTI_THREAD_LIMIT 1 still applies.
  set_threading_layer(kMklThreadingSequential);
  // MKL's AVX2 code path on every host that has AVX2 (Conditional Numerical
  // Reproducibility), so a transform gives the same bits on every such host. MKL's own
  // choice on AVX-512 hosts is less accurate than ducc0's (XLA:CPU's) for large real
  // inverse transforms: irfft to 2^20 points, max error 3.1e-7 of the largest value against
  // 2.0e-7 (f32), 6.7e-16 against 4.0e-16 (f64); on the AVX2 path it is at or below
  // ducc0's (tests/ops/test_fft.py::test_accuracy_at_least_xla). On a host without AVX2 the
  // call fails and MKL keeps its choice.
  set_code_path(MKL_CBWR_AVX2);
  // MKL loads its computational libraries (libmkl_core, libmkl_sequential) on first use:
  // make that use now, with a tiny transform, so a broken installation fails here.
  Layout l;
  l.lengths = {2};
  l.fwd_distance = l.bwd_distance = 2;
  l.fwd_strides = l.bwd_strides = {0, 1};
  std::complex<float> in[2] = {{1, 0}, {2, 0}}, res[2];
  std::string error = Compute(*mkl, l, true, in, res);
  if (error.empty() &&
      (res[0] != std::complex<float>(3, 0) || res[1] != std::complex<float>(-1, 0))) {
    error = "a length-2 test transform gave a wrong result";
  }
  if (!error.empty()) {
    mkl.release();  // Kept: the pool may hold the test's descriptor, which refers to it.
    return StrCat(path, ": ", error);
  }
  *out = mkl.get();
  (*loaded)[path] = std::move(mkl);
  return "";
}

Status Prepare(Instr& instr) {
  const std::string& path = instr.attr<std::string>("mkl_library");
  const Mkl* mkl = nullptr;
  std::string error = LoadMkl(path, &mkl);
  if (!error.empty()) {
    return FailedPrecondition("workshop: fft at ", instr.loc,
                              " needs Intel oneMKL's DFTI: ", error);
  }
  instr.prepared = std::shared_ptr<const void>(mkl, [](const void*) {});
  return Status();
}

// ---- Splitting work over the pool.

// Transforms below this many elements (times log2 of the length) per part are not worth a
// hand-off to another thread.
constexpr int64_t kMinWorkPerPart = 64 * 1024;

int64_t Log2Ceil(int64_t n) {
  int64_t bits = 1;
  while ((int64_t{1} << bits) < n) ++bits;
  return bits;
}

// Parts for `items` transforms of `elements` elements each (of length `n` along the axis).
int64_t NumParts(int64_t items, int64_t elements, int64_t n) {
  const int64_t work = items * elements * Log2Ceil(n);
  const int64_t threads = ThreadPool::Global().num_threads();
  // std::clamp needs lo <= hi: no items is one (empty) part.
  return std::clamp<int64_t>(work / kMinWorkPerPart, 1,
                             std::max<int64_t>(1, std::min(threads, items)));
}

// fn(begin, count) over `parts` fixed pieces of [0, items), concurrently; the first error.
template <typename Fn>
std::string SplitOver(int64_t items, int64_t parts, const Fn& fn) {
  if (parts <= 1) return fn(int64_t{0}, items);
  std::mutex mu;
  std::string first;
  ThreadPool::Global().ParallelFor(parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t lo = p * items / parts, hi = (p + 1) * items / parts;
      if (hi == lo) continue;
      std::string error = fn(lo, hi - lo);
      if (!error.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.empty()) first = std::move(error);
      }
    }
  });
  return first;
}

// ---- The transforms. Element sizes: R (real), C = complex<R>.

std::vector<MKL_LONG> TightStrides(const std::vector<MKL_LONG>& dims) {
  std::vector<MKL_LONG> strides(dims.size() + 1, 0);
  MKL_LONG s = 1;
  for (size_t i = dims.size(); i-- > 0;) strides[i + 1] = s, s *= dims[i];
  return strides;
}

MKL_LONG Product(const std::vector<MKL_LONG>& dims) {
  MKL_LONG p = 1;
  for (MKL_LONG d : dims) p *= d;
  return p;
}

// `count` whole transforms of `lengths` (row-major, tight), batched; complex unless real.
Layout WholeLayout(bool f64, bool real, const std::vector<MKL_LONG>& lengths, MKL_LONG count,
                   double bwd_scale) {
  Layout l;
  l.f64 = f64, l.real = real, l.lengths = lengths, l.howmany = count, l.bwd_scale = bwd_scale;
  std::vector<MKL_LONG> complex_dims = lengths;
  if (real) complex_dims.back() = lengths.back() / 2 + 1;
  l.fwd_strides = TightStrides(lengths);
  l.bwd_strides = TightStrides(complex_dims);
  l.fwd_distance = Product(lengths);
  l.bwd_distance = Product(complex_dims);
  return l;
}

// `count` 1-D complex transforms of length n along a strided axis: element k of transform
// j at k * stride + j * distance.
Layout AxisLayout(bool f64, MKL_LONG n, MKL_LONG stride, MKL_LONG distance, MKL_LONG count,
                  bool in_place, double bwd_scale) {
  Layout l;
  l.f64 = f64, l.lengths = {n}, l.howmany = count, l.in_place = in_place;
  l.fwd_strides = l.bwd_strides = {0, stride};
  l.fwd_distance = l.bwd_distance = distance;
  l.bwd_scale = bwd_scale;
  return l;
}

struct Job {
  const Mkl* mkl;
  bool f64;
  size_t complex_size;  // Bytes per complex element.
};

// Transforms axis `a` of the complex array `data` of shape [outer, dims...] in place, for
// every outer index and every position of the other axes.
std::string ComplexAxisInPlace(const Job& job, char* data, int64_t outer,
                               const std::vector<MKL_LONG>& dims, size_t a, bool forward,
                               double bwd_scale) {
  const MKL_LONG n = dims[a];
  MKL_LONG inner = 1, before = outer;
  for (size_t d = a + 1; d < dims.size(); ++d) inner *= dims[d];
  for (size_t d = 0; d < a; ++d) before *= dims[d];
  const int64_t block = n * inner;  // Elements of one outer block.
  const size_t cs = job.complex_size;
  if (inner == 1) {  // Contiguous rows.
    const int64_t parts = NumParts(before, n, n);
    return SplitOver(before, parts, [&](int64_t begin, int64_t count) {
      const Layout l = AxisLayout(job.f64, n, 1, n, count, true, bwd_scale);
      return Compute(*job.mkl, l, forward, data + begin * n * cs, data + begin * n * cs);
    });
  }
  if ((n & (n - 1)) != 0) {
    // Not a power of two: MKL's strided transforms of such lengths were measured less
    // accurate than its contiguous ones (float64 rms 0.48 vs 0.37 ulp for 17x31, XLA:CPU
    // 0.36), so tiles of kTile columns are gathered into contiguous rows and back.
    constexpr int64_t kTile = 16;
    const int64_t tiles = (inner + kTile - 1) / kTile;
    return SplitOver(
        before * tiles, NumParts(before * tiles, n * kTile, n), [&](int64_t begin, int64_t count) {
          std::vector<char> lines(static_cast<size_t>(kTile * n) * cs);
          for (int64_t t = begin; t < begin + count; ++t) {
            char* p = data + (t / tiles) * block * cs;
            const int64_t c0 = (t % tiles) * kTile, width = std::min(kTile, inner - c0);
            for (int64_t k = 0; k < n; ++k) {
              for (int64_t j = 0; j < width; ++j) {
                std::memcpy(&lines[(j * n + k) * cs], p + (k * inner + c0 + j) * cs, cs);
              }
            }
            const Layout l = AxisLayout(job.f64, n, 1, n, width, true, bwd_scale);
            std::string error = Compute(*job.mkl, l, forward, lines.data(), lines.data());
            if (!error.empty()) return error;
            for (int64_t k = 0; k < n; ++k) {
              for (int64_t j = 0; j < width; ++j) {
                std::memcpy(p + (k * inner + c0 + j) * cs, &lines[(j * n + k) * cs], cs);
              }
            }
          }
          return std::string();
        });
  }
  const int64_t block_parts = NumParts(before, block, n);
  if (block_parts > 1 || before >= ThreadPool::Global().num_threads()) {
    // Split by blocks; one call of `inner` strided columns per block.
    return SplitOver(before, block_parts, [&](int64_t begin, int64_t count) {
      const Layout l = AxisLayout(job.f64, n, inner, 1, inner, true, bwd_scale);
      for (int64_t b = begin; b < begin + count; ++b) {
        char* p = data + b * block * cs;
        std::string error = Compute(*job.mkl, l, forward, p, p);
        if (!error.empty()) return error;
      }
      return std::string();
    });
  }
  // Few blocks: split each block's columns.
  const int64_t parts = NumParts(inner, n, n);
  for (int64_t b = 0; b < before; ++b) {
    char* p = data + b * block * cs;
    std::string error = SplitOver(inner, parts, [&](int64_t begin, int64_t count) {
      const Layout l = AxisLayout(job.f64, n, inner, 1, count, true, bwd_scale);
      return Compute(*job.mkl, l, forward, p + begin * cs, p + begin * cs);
    });
    if (!error.empty()) return error;
  }
  return "";
}

// y <- the transform of x, both with `batch` transforms of `lengths` (complex-side dims
// `cdims`, real-side `lengths`).
std::string Run(const Job& job, const std::string& type, const void* x, void* y, int64_t batch,
                const std::vector<MKL_LONG>& lengths, double inverse_scale) {
  const bool real_in = type == "RFFT", real_out = type == "IRFFT";
  const bool real = real_in || real_out, forward = type == "FFT" || real_in;
  const size_t rank = lengths.size();
  const size_t cs = job.complex_size, rs = cs / 2;
  std::vector<MKL_LONG> cdims = lengths;
  if (real) cdims.back() = lengths.back() / 2 + 1;
  const int64_t celems = Product(cdims), relems = Product(lengths);
  const int64_t elements = std::max(celems, relems);
  const MKL_LONG last = lengths.back();
  const double bwd_scale = forward ? 1.0 : inverse_scale;
  const size_t in_size = real_in ? rs : cs, out_size = real_out ? rs : cs;
  const int64_t in_elems = real_in ? relems : celems, out_elems = real_out ? relems : celems;

  // Rank 1: whole transforms, split by batch.
  if (rank == 1) {
    return SplitOver(batch, NumParts(batch, elements, elements), [&](int64_t begin, int64_t count) {
      const Layout l = WholeLayout(job.f64, real, lengths, count, bwd_scale);
      return Compute(*job.mkl, l, forward, static_cast<const char*>(x) + begin * in_elems * in_size,
                     static_cast<char*>(y) + begin * out_elems * out_size);
    });
  }

  // Axis by axis. Rows of the last axis: complex or real-to-complex, x -> y.
  const int64_t rows = batch * (relems / last);
  auto last_axis = [&](const void* from, void* to, double scale) {
    const int64_t row_in = real_in ? last : cdims.back(), row_out = real_out ? last : cdims.back();
    return SplitOver(rows, NumParts(rows, last, last), [&](int64_t begin, int64_t count) {
      const Layout l = WholeLayout(job.f64, real, {last}, count, scale);
      return Compute(*job.mkl, l, forward,
                     static_cast<const char*>(from) + begin * row_in * in_size,
                     static_cast<char*>(to) + begin * row_out * out_size);
    });
  };
  // Inverse transforms scale each axis by 1/its length: one DFTI backward scale of
  // 1/prod(fft_length) on one axis was measured less accurate (float64 rms 0.64 vs 0.40
  // ulp for an ifft2 of 17x31).
  auto axis_scale = [&](size_t a) { return forward ? 1.0 : 1.0 / static_cast<double>(lengths[a]); };
  if (!real_out) {
    std::string error = last_axis(x, y, axis_scale(rank - 1));
    for (size_t a = rank - 1; error.empty() && a-- > 0;) {
      error =
          ComplexAxisInPlace(job, static_cast<char*>(y), batch, cdims, a, forward, axis_scale(a));
    }
    return error;
  }
  // IRFFT: backward complex transforms of the leading axes on a copy, then the rows.
  std::vector<char> scratch(static_cast<size_t>(batch * celems) * cs);
  std::memcpy(scratch.data(), x, scratch.size());
  for (size_t a = rank - 1; a-- > 0;) {
    std::string error =
        ComplexAxisInPlace(job, scratch.data(), batch, cdims, a, false, axis_scale(a));
    if (!error.empty()) return error;
  }
  return last_axis(scratch.data(), y, axis_scale(rank - 1));
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
  std::vector<MKL_LONG> dims;
  for (int i = 0; ok && i < rank; ++i) {
    const int64_t real_dim = (*real_side.dims)[real_side.rank() - rank + i];
    const int64_t complex_dim = (*complex_side.dims)[complex_side.rank() - rank + i];
    const bool last = i == rank - 1;
    ok = real_dim == lengths[i] &&
         complex_dim == (last && (real_in || real_out) ? lengths[i] / 2 + 1 : lengths[i]);
    total *= lengths[i];
    dims.push_back(lengths[i]);
  }
  for (int64_t d = 0; ok && d < x.rank() - rank; ++d) ok = (*x.dims)[d] == (*y.dims)[d];
  if (!ok || !(real_in || real_out || type == "FFT" || type == "IFFT")) {
    return InvalidArgument("workshop: fft ", type, " of ", ShapeString(x.dtype, *x.dims), " into ",
                           ShapeString(y.dtype, *y.dims), " with fft_length of ", rank, " dims at ",
                           ctx.instr.loc);
  }
  if (y.num_elements() == 0) return Status();
  const size_t complex_size = f64 ? sizeof(std::complex<double>) : sizeof(std::complex<float>);
  if (x.num_elements() == 0) {  // RFFT of length 0: sums of nothing.
    std::memset(y.data, 0, y.num_elements() * complex_size);
    return Status();
  }
  const auto* mkl = static_cast<const Mkl*>(ctx.instr.prepared.get());
  if (mkl == nullptr) return Internal("workshop: fft at ", ctx.instr.loc, " was not prepared");
  int64_t batch = 1;
  for (int64_t d = 0; d < x.rank() - rank; ++d) batch *= (*x.dims)[d];
  const Job job{mkl, f64, complex_size};
  std::string error = Run(job, type, x.data, y.data, batch, dims, 1.0 / static_cast<double>(total));
  if (!error.empty()) {
    return Internal("workshop: fft ", type, " of ", ShapeString(x.dtype, *x.dims), " (",
                    DTypeName(complex_side.dtype), ") at ", ctx.instr.loc, ": ", error);
  }
  return Status();
}

WORKSHOP_REGISTER_KERNEL("fft", .fn = Fft, .prepare = Prepare);

}  // namespace
}  // namespace workshop
