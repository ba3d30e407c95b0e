// sort: sorts operands of one shape along `dim`, all by the same permutation.
//
//   sort: the comparators JAX emits (compiler/rules/sort.py): lexicographic over `keys`
//     = [[operand, descending, canonicalize], ...]. Each key operand is mapped to unsigned
//     64-bit keys whose integer order is the comparator's order (floats by IEEE totalOrder
//     on their bits, after canonicalization: -0.0 -> +0.0, every NaN -> one NaN above
//     +inf; 8/4-bit floats by XLA:CPU's order on their bits, MinifloatKeys); the permutation
//     is then stably sorted by each key, least significant first
//     (an LSD sort, equal to one lexicographic stable sort), and every operand gathered.
//     Stable whatever `is_stable` says: a stable order is a valid unstable one. Rows
//     (every index but `dim`) are independent and split over the pool.
//
//   sort_general: any comparator, as a lane plan (compiler/lanes.py) over
//     (lhs_0, rhs_0, lhs_1, rhs_1, ..., captures...). A bitonic sorting network: its
//     compare-exchange steps are data-independent, so each of its log2(n)(log2(n)+1)/2
//     steps evaluates the comparator once for all pairs of all rows. With is_stable the
//     original index breaks ties (a second comparator run tells ties from "greater"), which
//     makes the result the stable sort. Any comparator, even an inconsistent one, yields a
//     permutation, so nothing can go out of bounds.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>

#include "kernels/core/attr_check.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/core/subplan.h"
#include "kernels/math/minifloat.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

constexpr uint64_t kSignBit = uint64_t{1} << 63;

// Where one sequence to sort lies: element j at base + j * stride (in elements).
struct Row {
  int64_t base, stride, n;
};

// Fills keys[j] with the order key of element perm[j] of `row`.
using KeyFn = void (*)(const void* data, const Row& row, const int64_t* perm, bool canonicalize,
                       uint64_t* keys);

template <typename T>
void IntKeys(const void* data, const Row& row, const int64_t* perm, bool, uint64_t* keys) {
  const T* x = static_cast<const T*>(data) + row.base;
  for (int64_t j = 0; j < row.n; ++j) {
    const T v = x[perm[j] * row.stride];
    if constexpr (std::is_signed_v<T>) {
      keys[j] = static_cast<uint64_t>(static_cast<int64_t>(v)) ^ kSignBit;
    } else {
      keys[j] = static_cast<uint64_t>(v);
    }
  }
}

// Floats of any width by their bits; `kInf` is +inf's bit pattern.
template <typename Bits, Bits kInf>
void FloatKeys(const void* data, const Row& row, const int64_t* perm, bool canonicalize,
               uint64_t* keys) {
  using Signed = std::make_signed_t<Bits>;
  constexpr Bits kSign = Bits{1} << (8 * sizeof(Bits) - 1);
  const Bits* x = static_cast<const Bits*>(data) + row.base;
  for (int64_t j = 0; j < row.n; ++j) {
    Bits bits = x[perm[j] * row.stride];
    if (canonicalize) {
      const Bits magnitude = bits & static_cast<Bits>(~kSign);
      if (magnitude > kInf) bits = kInf + 1;  // Any NaN -> one positive NaN.
      if (magnitude == 0) bits = 0;           // -0.0 -> +0.0.
    }
    // totalOrder: non-negative floats order like their bits; negative ones in reverse,
    // which flipping the magnitude bits turns around.
    Signed s = static_cast<Signed>(bits);
    if (s < 0) s = static_cast<Signed>(s ^ std::numeric_limits<Signed>::max());
    keys[j] = static_cast<uint64_t>(static_cast<int64_t>(s)) ^ kSignBit;
  }
}

// 8- and 4-bit floats (one per byte) in the order XLA:CPU's TOTALORDER compare gives them:
// its comparison expander compares the bits as signed integers with the magnitude of
// negative values flipped, so -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN; FNUZ types
// map their NaN (the sign bit alone, their "-0") below every value; f8E8M0FNU (no sign)
// orders by its unsigned bits, NaN (0xFF) last. Canonicalized: -0 -> +0, every NaN -> the
// type's one canonical NaN (positive where the type has a sign), as jnp.sort's comparator;
// not canonicalized, NaNs of one sign still tie.
template <DType kType>
void MinifloatKeys(const void* data, const Row& row, const int64_t* perm, bool canonicalize,
                   uint64_t* keys) {
  const minifloat::Format& f = *minifloat::FormatOf(kType);
  const uint64_t sign = minifloat::SignBit(f);
  const uint8_t* x = static_cast<const uint8_t*>(data) + row.base;
  for (int64_t j = 0; j < row.n; ++j) {
    uint64_t bits = x[perm[j] * row.stride];
    if (f.kind == minifloat::Kind::kE8M0) {
      keys[j] = bits;
      continue;
    }
    // XLA compares the bits after a round trip through f16, which gives every NaN of one
    // sign one pattern (here: the largest); canonicalized, every NaN is positive.
    const minifloat::Unpacked u = minifloat::Decode(f, bits);
    if (u.nan && f.kind != minifloat::Kind::kFnuz)
      bits = (sign - 1) | (canonicalize ? 0 : bits & sign);
    if (canonicalize && u.zero) bits = 0;
    // Negative values below sign, magnitudes reversed; FNUZ's NaN (0x80) below them all.
    const uint64_t magnitude = bits & (sign - 1);
    const uint64_t below = f.kind == minifloat::Kind::kFnuz ? sign : sign - 1;
    keys[j] = (bits & sign)
                  ? (magnitude == 0 && f.kind == minifloat::Kind::kFnuz ? 0 : below - magnitude)
                  : sign + magnitude;
  }
}

KeyFn KeyFunction(DType t) {
  switch (t) {
    case DType::kPred: return IntKeys<uint8_t>;
    case DType::kS8: return IntKeys<int8_t>;
    case DType::kS16: return IntKeys<int16_t>;
    case DType::kS32: return IntKeys<int32_t>;
    case DType::kS64: return IntKeys<int64_t>;
    case DType::kU8: return IntKeys<uint8_t>;
    case DType::kU16: return IntKeys<uint16_t>;
    case DType::kU32: return IntKeys<uint32_t>;
    case DType::kU64: return IntKeys<uint64_t>;
    case DType::kF16: return FloatKeys<uint16_t, 0x7C00>;
    case DType::kBF16: return FloatKeys<uint16_t, 0x7F80>;
    case DType::kF32: return FloatKeys<uint32_t, 0x7F800000u>;
    case DType::kF64: return FloatKeys<uint64_t, 0x7FF0000000000000ull>;
    case DType::kF8E5M2: return MinifloatKeys<DType::kF8E5M2>;
    case DType::kF8E4M3FN: return MinifloatKeys<DType::kF8E4M3FN>;
    case DType::kF8E4M3B11FNUZ: return MinifloatKeys<DType::kF8E4M3B11FNUZ>;
    case DType::kF8E5M2FNUZ: return MinifloatKeys<DType::kF8E5M2FNUZ>;
    case DType::kF8E4M3FNUZ: return MinifloatKeys<DType::kF8E4M3FNUZ>;
    case DType::kF8E4M3: return MinifloatKeys<DType::kF8E4M3>;
    case DType::kF8E3M4: return MinifloatKeys<DType::kF8E3M4>;
    case DType::kF8E8M0FNU: return MinifloatKeys<DType::kF8E8M0FNU>;
    case DType::kF4E2M1FN: return MinifloatKeys<DType::kF4E2M1FN>;
    default: return nullptr;
  }
}

// Copies `width`-byte elements: dst[base + j*stride] = src[base + perm[j]*stride].
template <typename U>
void GatherRow(const void* src, void* dst, const Row& row, const int64_t* perm) {
  const U* in = static_cast<const U*>(src) + row.base;
  U* out = static_cast<U*>(dst) + row.base;
  for (int64_t j = 0; j < row.n; ++j) out[j * row.stride] = in[perm[j] * row.stride];
}

void Gather(int64_t width, const void* src, void* dst, const Row& row, const int64_t* perm) {
  DispatchByteWidth(width, [&](auto tag) { GatherRow<decltype(tag)>(src, dst, row, perm); }, [] {});
}

// Checks operands (and outputs, if any) share one shape; returns (outer, n, inner) around
// `dim`.
std::array<int64_t, 3> SortGeometry(const KernelContext& ctx, int64_t dim) {
  const size_t num = ctx.instr.outs.size();
  if (num == 0 || ctx.ins.size() < num || (!ctx.outs.empty() && ctx.outs.size() != num)) {
    throw PlanError("sort needs one operand per result");
  }
  const Dims& dims = *ctx.ins[0].dims;
  if (dim < 0 || dim >= static_cast<int64_t>(dims.size())) throw PlanError("bad dim");
  for (size_t k = 0; k < num; ++k) {
    if (*ctx.ins[k].dims != dims) throw PlanError("operands of different shapes");
    if (!ctx.outs.empty() && (*ctx.outs[k].dims != dims || ctx.outs[k].dtype != ctx.ins[k].dtype)) {
      throw PlanError("results must have their operand's shape and dtype");
    }
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= dims[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(dims.size()); ++d) inner *= dims[d];
  return {outer, dims[dim], inner};
}

Status Sort(KernelContext& ctx) {
  const auto [outer, n, inner] = SortGeometry(ctx, ctx.instr.attr<int64_t>("dim"));
  struct Key {
    const void* data;
    KeyFn fn;
    bool descending, canonicalize;
  };
  std::vector<Key> keys;
  for (const IntList& spec : ctx.instr.attr<std::vector<IntList>>("keys")) {
    if (spec.size() != 3 || spec[0] < 0 || spec[0] >= static_cast<int64_t>(ctx.outs.size())) {
      throw PlanError("bad sort key");
    }
    const Tensor& operand = ctx.ins[spec[0]];
    KeyFn fn = KeyFunction(operand.dtype);
    if (fn == nullptr) return UnsupportedDType(ctx, operand.dtype);
    keys.push_back(Key{operand.data, fn, spec[1] != 0, spec[2] != 0});
  }
  struct Entry {
    uint64_t key;
    int64_t index;
  };
  if (outer == 0 || n == 0 || inner == 0) return Status();  // nothing to sort, no scratch
  // Rows are independent: ranges of them split over the pool (ThreadPool::PartsFor), each
  // part with its own perm, key_values and entries, and std::stable_sort's merge buffer
  // (up to n Entries), charged per part.
  const int64_t rows = outer * inner;
  // Per key, a stable sort costs about 4 ns per element and level (log2 n) on one thread,
  // about 48 element operations at kNanosPerElementOp (64 rows of 256 f32: 0.56 ms a call;
  // 1000 rows of 1000: 88 ms, 8 ns, out of cache).
  KernelWork work;
  work.element_ops = 48.0 * rows * n * (std::bit_width(static_cast<uint64_t>(n)) + 1) *
                     static_cast<double>(keys.size());
  ThreadPool& pool = ThreadPool::Global();
  const int64_t parts = std::min(pool.PartsFor(work), rows);
  ScratchCharge scratch;
  WORKSHOP_RETURN_IF_ERROR(scratch.Charge(
      ctx,
      parts * n * static_cast<int64_t>(sizeof(int64_t) + sizeof(uint64_t) + 2 * sizeof(Entry))));
  pool.ParallelFor(rows, (rows + parts - 1) / parts, [&](int64_t first, int64_t end) {
    std::vector<int64_t> perm(n);
    std::vector<uint64_t> key_values(n);
    std::vector<Entry> entries(n);
    for (int64_t r = first; r < end; ++r) {
      const int64_t o = r / inner, i = r % inner;
      const Row row{o * n * inner + i, inner, n};
      std::iota(perm.begin(), perm.end(), 0);
      for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
        key->fn(key->data, row, perm.data(), key->canonicalize, key_values.data());
        const uint64_t flip = key->descending ? ~uint64_t{0} : 0;
        for (int64_t j = 0; j < n; ++j) entries[j] = Entry{key_values[j] ^ flip, perm[j]};
        std::stable_sort(entries.begin(), entries.end(),
                         [](const Entry& a, const Entry& b) { return a.key < b.key; });
        for (int64_t j = 0; j < n; ++j) perm[j] = entries[j].index;
      }
      for (size_t k = 0; k < ctx.outs.size(); ++k) {
        Gather(ByteWidth(ctx.ins[k].dtype), ctx.ins[k].data, ctx.outs[k].data, row, perm.data());
      }
    }
  });
  return Status();
}

// ---- sort_general ----

// The compare-exchange pairs (lo < hi < n) of one step of a bitonic network for n
// elements padded to a power of two. Pairs that touch padding are left out: padding acts as
// +inf already in place, which no comparator would move.
std::vector<std::pair<int64_t, int64_t>> BitonicStep(int64_t n, int64_t block, int64_t j) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i < n; ++i) {
    // The first step of each merge mirrors the block, so every step sorts ascending.
    const int64_t partner = j == block / 2 ? (i ^ (block - 1)) : (i ^ j);
    if (partner > i && partner < n) pairs.emplace_back(i, partner);
  }
  return pairs;
}

Status SortGeneral(KernelContext& ctx) {
  const Plan& comparator = SubPlan(ctx, "comparator");
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  const bool stable = ctx.instr.attr<int64_t>("is_stable") != 0;
  const size_t num = ctx.instr.outs.size();
  if (ctx.in_storage.size() < num) throw PlanError("fewer operands than results");
  const auto [outer, n, inner] = SortGeometry(ctx, dim);
  if (n <= 1 || outer * inner == 0) {  // Already sorted: hand the operands on.
    for (size_t k = 0; k < num; ++k) ctx.out_storage.push_back(ctx.in_storage[k]);
    return Status();
  }
  StorageList captures;
  for (size_t k = num; k < ctx.in_storage.size(); ++k) captures.push_back(ctx.in_storage[k]);
  const int64_t batch = outer * inner;

  // Work on [batch, n] copies, each sequence contiguous: (outer, inner, n).
  const std::vector<int64_t> work_dims = {outer, inner, n};
  std::vector<int64_t> widths(num);
  StorageList rows;
  for (size_t k = 0; k < num; ++k) {
    const int64_t w = widths[k] = ByteWidth(ctx.ins[k].dtype);
    std::shared_ptr<Storage> row;
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, batch * n * w, &row));
    StridedCopy(row->data(), ctx.ins[k].data, w, work_dims, {n * inner * w, w, inner * w});
    rows.push_back(std::move(row));
  }
  std::vector<int64_t> original(batch * n);
  for (int64_t b = 0; b < batch; ++b) std::iota(&original[b * n], &original[b * n] + n, 0);

  const int64_t padded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)));
  for (int64_t block = 2; block <= padded; block *= 2) {
    for (int64_t j = block / 2; j > 0; j /= 2) {
      const auto pairs = BitonicStep(n, block, j);
      const int64_t m = static_cast<int64_t>(pairs.size());
      const int64_t lanes = batch * m;
      // lo[k], hi[k]: operand k's elements at the pairs' lower and upper positions.
      StorageList lo(num), hi(num);
      for (size_t k = 0; k < num; ++k) {
        const int64_t w = widths[k];
        WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, lanes * w, &lo[k]));
        WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, lanes * w, &hi[k]));
        const char* src = static_cast<const char*>(rows[k]->data());
        char* l = static_cast<char*>(lo[k]->data());
        char* h = static_cast<char*>(hi[k]->data());
        for (int64_t b = 0, q = 0; b < batch; ++b) {
          for (const auto& [p, r] : pairs) {
            std::memcpy(l + q * w, src + (b * n + p) * w, w);
            std::memcpy(h + q * w, src + (b * n + r) * w, w);
            ++q;
          }
        }
      }
      auto compare = [&](const StorageList& a, const StorageList& b, StorageList* less) {
        StorageList args;
        for (size_t k = 0; k < num; ++k) {
          args.push_back(a[k]);
          args.push_back(b[k]);
        }
        args.insert(args.end(), captures.begin(), captures.end());
        WORKSHOP_RETURN_IF_ERROR(
            RunSubPlan(ctx, WithLanes(comparator, lanes), std::move(args), less));
        if (less->size() != 1 || (*less)[0]->size() < static_cast<size_t>(lanes)) {
          throw PlanError("the comparator must return one pred per pair");
        }
        return Status();
      };
      StorageList hi_less, lo_less;
      WORKSHOP_RETURN_IF_ERROR(compare(hi, lo, &hi_less));
      if (stable) WORKSHOP_RETURN_IF_ERROR(compare(lo, hi, &lo_less));
      const bool* hl = static_cast<const bool*>(hi_less[0]->data());
      const bool* lh = stable ? static_cast<const bool*>(lo_less[0]->data()) : nullptr;
      for (int64_t b = 0, q = 0; b < batch; ++b) {
        for (const auto& [p, r] : pairs) {
          const int64_t x = b * n + p, y = b * n + r;
          const bool swap = hl[q] || (stable && !lh[q] && original[y] < original[x]);
          ++q;
          if (!swap) continue;
          std::swap(original[x], original[y]);
          for (size_t k = 0; k < num; ++k) {
            char* base = static_cast<char*>(rows[k]->data());
            char tmp[16];
            std::memcpy(tmp, base + x * widths[k], widths[k]);
            std::memcpy(base + x * widths[k], base + y * widths[k], widths[k]);
            std::memcpy(base + y * widths[k], tmp, widths[k]);
          }
        }
      }
    }
  }

  // Back to the operands' layout: element (o, j, i) is at ((o * inner) + i) * n + j.
  for (size_t k = 0; k < num; ++k) {
    const int64_t w = widths[k];
    std::shared_ptr<Storage> out;
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, batch * n * w, &out));
    StridedCopy(out->data(), rows[k]->data(), w, {outer, n, inner}, {inner * n * w, w, n * w});
    ctx.out_storage.push_back(std::move(out));
  }
  return Status();
}

// The axis the kernels sort along (KernelDef::check).
Status CheckSortDim(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  return c.Axis("dim", c.In(0));
}

WORKSHOP_REGISTER_KERNEL("sort", .fn = Sort, .check = CheckSortDim);
WORKSHOP_REGISTER_KERNEL("sort_general", .fn = SortGeneral, .manages_outputs = true,
                         .check = CheckSortDim);

}  // namespace
}  // namespace workshop
