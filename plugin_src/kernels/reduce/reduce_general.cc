// Reductions with bodies other than a single combiner (kernels/reduce/reduce.cc has those):
//
//   argmax, argmin: ins x, index, init_x, init_index; outs (value, index). The body
//     jnp.argmax/argmin emit (compiler/rules/reduce.py `_match_arg_reduce`), folded
//     in memory order (long rows in chunks): the accumulator a = (a_v, a_i) keeps itself when
//     a_v > b_v (argmin: <) or a_v is NaN, and on equal values keeps the smaller index.
//     So the first maximum wins, and any NaN beats every number, the first NaN winning.
//
//   reduce_general: ins xs..., inits..., captured scalars...; attrs dims, body (a lane
//     plan, compiler/lanes.py) taking (accumulators..., elements..., captures...).
//     Every operand is first transposed to [R, M] (R reduced elements, M outputs, both in
//     row-major order), then rows are combined pairwise, (0,1), (2,3), ..., halving R
//     each round: log2(R) body runs, each vectorized over all the pairs of the round.
//     The left operand of each pair always covers the earlier elements, so order-sensitive
//     bodies (argmax-like NaN/tie rules) see the sequential order's outcome; a float sum
//     is reassociated (pairwise), which only improves its accuracy. Last, the init values
//     are combined in once: out = body(init, total).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/core/attr_check.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/core/subplan.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/math/simd.h"
#include "kernels/reduce/reduce.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// Checks `reduced` names distinct dims of `dims`; returns the number of outputs (M) and
// of elements reduced into each (R).
std::pair<int64_t, int64_t> CheckReduced(const Dims& dims, const IntList& reduced) {
  std::vector<bool> is_reduced(dims.size(), false);
  for (int64_t d : reduced) {
    if (d < 0 || d >= static_cast<int64_t>(dims.size()) || is_reduced[d]) {
      throw PlanError("bad reduced dimension " + std::to_string(d));
    }
    is_reduced[d] = true;
  }
  int64_t outputs = 1, rows = 1;
  for (size_t d = 0; d < dims.size(); ++d) (is_reduced[d] ? rows : outputs) *= dims[d];
  return {outputs, rows};
}

// ---- argmax / argmin ----

// One step of the argmax (kMax) / argmin body: folds element b into accumulator a. It is
// associative (the leftmost NaN wins, else the best value with the smallest index), so
// any bracketing that keeps elements in order gives the sequential result.
template <bool kMax, typename T, typename I>
inline void ArgStep(T& av, I& ai, T bv, I bi) {
  const bool keep = (kMax ? av > bv : av < bv) || av != av;
  const bool keep_index = keep || (av == bv && ai < bi);
  ai = keep_index ? ai : bi;
  av = keep ? av : bv;
}

// Folds a contiguous row into (av, ai), with the sequential fold's result, in passes over
// the row (in L1 for rows up to thousands of elements) that need no dependent chain of
// compare-selects as the fold itself does. The sequential fold's outcome:
//  * a NaN accumulator keeps itself; else the first NaN of the row in memory order wins,
//    with its index;
//  * else the best value m of the accumulator and the row (min for argmin, max for
//    argmax), with the smallest index among the elements equal to m (the accumulator's
//    included when av == m), and as value the last element equal to m in memory order
//    (the fold takes b's value on a tie), which has m's bits unless m is a zero.
// Pass 1 finds m (NaNs skipped) with kLanes independent accumulators over interleaved
// elements, which vectorize (min/max instructions: how they treat the sign of zero does
// not matter, == ignores it); pass 2 walks the row in memory order with two rarely taken
// branches: the first NaN ends it, an element equal to m with a smaller index is taken.
template <bool kMax, typename T, typename I>
void ArgFoldContiguous(const T* v, const I* ix, int64_t n, T& av, I& ai) {
  if (av != av || n <= 0) return;  // NOLINT(misc-redundant-expression): NaN test.
  constexpr int kLanes = 8;
  T best[kLanes];
  for (int l = 0; l < kLanes; ++l) best[l] = av;
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const T x = v[k + l];
      best[l] = (kMax ? x > best[l] : x < best[l]) ? x : best[l];
    }
  }
  T m = av;
  for (int l = 0; l < kLanes; ++l) m = (kMax ? best[l] > m : best[l] < m) ? best[l] : m;
  for (; k < n; ++k) m = (kMax ? v[k] > m : v[k] < m) ? v[k] : m;
  bool have = av == m;
  I index = ai;
  for (int64_t t = 0; t < n; ++t) {
    const T x = v[t];
    if (x != x) {  // NOLINT(misc-redundant-expression): the first NaN wins.
      av = x;
      ai = ix[t];
      return;
    }
    if (x == m && (!have || ix[t] < index)) {
      index = ix[t];
      have = true;
    }
  }
  T value = av == m ? av : m;
  if (m == T(0)) {  // The last zero's sign.
    for (int64_t t = n - 1; t >= 0; --t) {
      if (v[t] == m) {
        value = v[t];
        break;
      }
    }
  }
  av = value;
  ai = index;
}

// Rows shorter than this fold across rows (ArgFoldShortRows) instead of one at a time.
constexpr int64_t kArgShortRow = 16;
// Rows (vector lanes) ArgFoldShortRows folds at once: a 32-byte (AVX2) register of the
// wider of the value and index types. Wider vectors are split by GCC, and it scalarized
// the compare-selects of 64-byte int64 vectors (argmax with x64 indices was 10x slower).
template <typename T, typename I>
constexpr int kArgLanes = static_cast<int>(32 / std::max(sizeof(T), sizeof(I)));

// Signed integers of T's width: the element type of a comparison of T vectors.
template <typename T>
using MaskOf =
    std::conditional_t<sizeof(T) == 1, int8_t,
                       std::conditional_t<sizeof(T) == 2, int16_t,
                                          std::conditional_t<sizeof(T) == 4, int32_t, int64_t>>>;

// `count` short rows of n elements, row r's values at v + r * v_row and its indices at
// ix + r * ix_row (element j at j * ix_step), folded into (av[r], ai[r]). kArgLanes rows
// at a time, lane l folding row l's elements with ArgStep in memory order (the sequential
// fold itself) as vector compare-selects; the rows left over fold one by one. Row by row,
// a row of 4 paid two or three mispredicted branches on random data (argmax over
// (100000, 4): 2.9 ms against XLA:CPU's 0.15).
template <bool kMax, typename T, typename I>
WORKSHOP_SIMD_CLONES void ArgFoldShortRows(const T* v, int64_t v_row, const I* ix, int64_t ix_row,
                                           int64_t ix_step, int64_t n, int64_t count,
                                           T* __restrict av_out, I* __restrict ai_out) {
  constexpr int kLanes = kArgLanes<T, I>;
  using VT [[gnu::vector_size(kLanes * sizeof(T))]] = T;
  using VI [[gnu::vector_size(kLanes * sizeof(I))]] = I;
  using MI [[gnu::vector_size(kLanes * sizeof(I))]] = MaskOf<I>;
  int64_t r = 0;
  for (; r + kLanes <= count; r += kLanes) {
    VT av;
    VI ai;
    std::memcpy(&av, av_out + r, sizeof(av));
    std::memcpy(&ai, ai_out + r, sizeof(ai));
    const T* block_v = v + r * v_row;
    const I* block_i = ix + r * ix_row;
    for (int64_t j = 0; j < n; ++j) {
      T bvs[kLanes];
      I bis[kLanes];
      for (int l = 0; l < kLanes; ++l) bvs[l] = block_v[l * v_row + j];
      VT bv;
      std::memcpy(&bv, bvs, sizeof(bv));
      VI bi;
      if (ix_row == 0) {  // One index row for all (jnp.argmax's iota, broadcast).
        bi = VI{} + block_i[j * ix_step];
      } else {
        for (int l = 0; l < kLanes; ++l) bis[l] = block_i[l * ix_row + j * ix_step];
        std::memcpy(&bi, bis, sizeof(bi));
      }
      auto better = [&] {
        if constexpr (kMax) {
          return av > bv;
        } else {
          return av < bv;
        }
      };
      const auto keep = better() | (av != av);  // NOLINT(misc-redundant-expression): NaN.
      const MI keep_index =
          __builtin_convertvector(keep, MI) | (__builtin_convertvector(av == bv, MI) & (ai < bi));
      ai = keep_index ? ai : bi;
      av = keep ? av : bv;
    }
    std::memcpy(av_out + r, &av, sizeof(av));
    std::memcpy(ai_out + r, &ai, sizeof(ai));
  }
  for (; r < count; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      ArgStep<kMax>(av_out[r], ai_out[r], v[r * v_row + j], ix[r * ix_row + j * ix_step]);
    }
  }
}

// One input row folded element-wise into a row of accumulators (a reduction over a
// leading or middle axis: each column is an output). ix_step 0 (the index broadcast
// along the row) or 1, so that each loop has unit strides and vectorizes.
template <bool kMax, typename T, typename I>
WORKSHOP_SIMD_CLONES void ArgStepColumns(T* __restrict av, I* __restrict ai, const T* v,
                                         const I* ix, int64_t ix_step, int64_t n) {
  // Through locals, so that every element is stored: ArgStep on the arrays themselves
  // became masked stores (vpmaskmovd), which took half the loop's time.
  auto step = [&](int64_t k, I b) {
    T a = av[k];
    I i = ai[k];
    ArgStep<kMax>(a, i, v[k], b);
    av[k] = a;
    ai[k] = i;
  };
  if (ix_step == 0) {
    const I b = ix[0];
    for (int64_t k = 0; k < n; ++k) step(k, b);
  } else {
    for (int64_t k = 0; k < n; ++k) step(k, ix[k]);
  }
}

// `index_strides`: the index operand's element strides along x's dims (x's own for an
// index of x's shape; zero along the dims a smaller index is broadcast over).
template <bool kMax, typename T, typename I>
void ArgReduceLoop(const Tensor& x, const Tensor& index, const std::vector<int64_t>& index_strides,
                   const IntList& reduced, T* out_v, I* out_i) {
  const Dims& dims = *x.dims;
  std::vector<std::vector<int64_t>> strides = {RowMajorStrides(dims),
                                               ReducedOutputStrides(dims, reduced), index_strides};
  const std::vector<int64_t> rows = CollapseDims(dims, strides);
  const int64_t n = rows.empty() ? 1 : rows.back();
  const int64_t in_step = rows.empty() ? 0 : strides[0].back();
  const int64_t out_step = rows.empty() ? 0 : strides[1].back();
  const int64_t index_step = rows.empty() ? 0 : strides[2].back();
  const T* xs = x.as<T>();
  const I* is = index.as<I>();
  // Columns [c0, c1) of the row at `offsets`.
  auto fold = [&](const std::vector<int64_t>& offsets, int64_t c0, int64_t c1) {
    const T* row_v = xs + offsets[0];
    const I* row_i = is + offsets[2];
    T* acc_v = out_v + offsets[1];
    I* acc_i = out_i + offsets[1];
    if (out_step == 0 && in_step == 1 && index_step == 1) {
      ArgFoldContiguous<kMax>(row_v, row_i, n, *acc_v, *acc_i);
      return;
    }
    if (out_step == 1 && in_step == 1 && (index_step == 0 || index_step == 1)) {
      ArgStepColumns<kMax>(acc_v + c0, acc_i + c0, row_v + c0, row_i + c0 * index_step, index_step,
                           c1 - c0);
      return;
    }
    for (int64_t k = c0; k < c1; ++k) {
      ArgStep<kMax>(acc_v[k * out_step], acc_i[k * out_step], row_v[k * in_step],
                    row_i[k * index_step]);
    }
  };
  // Reduced dims exactly the trailing ones: each row folds into an output of its own, so
  // rows split over the pool (two passes of a compare-select per element: work 2).
  std::vector<int64_t> sorted(reduced.begin(), reduced.end());
  std::sort(sorted.begin(), sorted.end());
  bool trailing = true;
  for (size_t k = 0; k < sorted.size(); ++k) {
    trailing = trailing && sorted[k] == static_cast<int64_t>(dims.size() - sorted.size() + k);
  }
  const int64_t num_rows = NumRows(rows);
  ThreadPool& pool = ThreadPool::Global();
  if (trailing && out_step == 0 && in_step == 1) {
    // Short rows: the rows of a stretch (consecutive along the second-to-last dim) have
    // consecutive outputs, since x is dense and the reduced dims trail.
    const bool short_rows = n < kArgShortRow && rows.size() >= 2 && kVectorLanes<T> &&
                            kVectorLanes<I> && (index_step == 0 || index_step == 1);
    auto run_rows = [&](int64_t begin, int64_t end) {
      if (!short_rows) {
        ForEachRowIn(rows, strides, begin, end,
                     [&](const std::vector<int64_t>& offsets) { fold(offsets, 0, n); });
        return;
      }
      if constexpr (kVectorLanes<T> && kVectorLanes<I>) {
        const size_t row_dim = rows.size() - 2;
        ForEachRowRunIn(rows, strides, begin, end,
                        [&](const std::vector<int64_t>& offsets, int64_t count) {
                          ArgFoldShortRows<kMax>(xs + offsets[0], strides[0][row_dim],
                                                 is + offsets[2], strides[2][row_dim], index_step,
                                                 n, count, out_v + offsets[1], out_i + offsets[1]);
                        });
      }
    };
    const int64_t parts =
        std::min<int64_t>(pool.PartsFor(num_rows * n * 2, kMinPartWork), num_rows);
    if (parts <= 1) {
      run_rows(0, num_rows);
      return;
    }
    pool.ParallelFor(num_rows, (num_rows + parts - 1) / parts, run_rows);
    return;
  }
  // Otherwise the outputs are the columns of the innermost dim (out_step 1) or a single
  // output per row set: with unit steps the columns split over the pool, every part
  // walking all rows over its own columns, each column's fold still in row order.
  constexpr int64_t kMinColumns = 64;
  const int64_t parts =
      out_step == 1 && in_step == 1
          ? std::min<int64_t>(pool.PartsFor(num_rows * n * 2, kMinPartWork), n / kMinColumns)
          : 1;
  if (parts <= 1) {
    ForEachRow(rows, strides, [&](const std::vector<int64_t>& offsets) { fold(offsets, 0, n); });
    return;
  }
  pool.ParallelFor(n, (n + parts - 1) / parts, [&](int64_t c0, int64_t c1) {
    ForEachRow(rows, strides, [&](const std::vector<int64_t>& offsets) { fold(offsets, c0, c1); });
  });
}

template <bool kMax>
Status ArgReduce(KernelContext& ctx) {
  if (ctx.ins.size() != 4 || ctx.outs.size() != 2) {
    throw PlanError("takes (x, index, init_x, init_index) and returns (value, index)");
  }
  const Tensor& x = ctx.ins[0];
  const Tensor& index = ctx.ins[1];
  const IntList& reduced = ctx.instr.attr<IntList>("dims");
  const int64_t outputs = CheckReduced(*x.dims, reduced).first;
  // The index operand: of x's shape, or (attribute index_dims, compiler/broadcasts.py)
  // broadcast to it with its dims at these of x's, as broadcast_in_dim's `dims`.
  std::vector<int64_t> index_strides = RowMajorStrides(*x.dims);
  const auto mapped = ctx.instr.attrs.find("index_dims");
  if (mapped != ctx.instr.attrs.end()) {
    const IntList* at = std::get_if<IntList>(&mapped->second);
    const Dims& small = *index.dims;
    if (at == nullptr || at->size() != small.size()) throw PlanError("bad index_dims");
    const std::vector<int64_t> small_strides = RowMajorStrides(small);
    std::fill(index_strides.begin(), index_strides.end(), 0);
    std::vector<bool> seen(x.dims->size(), false);
    for (size_t k = 0; k < at->size(); ++k) {
      const int64_t d = (*at)[k];
      if (d < 0 || d >= static_cast<int64_t>(x.dims->size()) || seen[d] ||
          (small[k] != (*x.dims)[d] && small[k] != 1)) {
        throw PlanError("index_dims do not map the index operand onto the operand's dims");
      }
      seen[d] = true;
      index_strides[d] = small[k] == 1 ? 0 : small_strides[k];
    }
  } else if (*index.dims != *x.dims) {
    throw PlanError("operand and result shapes disagree");
  }
  if (ctx.outs[0].num_elements() != outputs || ctx.outs[1].num_elements() != outputs ||
      ctx.ins[2].num_elements() != 1 || ctx.ins[3].num_elements() != 1) {
    throw PlanError("operand and result shapes disagree");
  }
  if (ctx.ins[2].dtype != x.dtype || ctx.outs[0].dtype != x.dtype ||
      ctx.ins[3].dtype != index.dtype || ctx.outs[1].dtype != index.dtype) {
    throw PlanError("operand and result dtypes disagree");
  }
  auto unsupported = [&] { return UnsupportedDType(ctx, x.dtype); };
  return DispatchAll(
      x.dtype,
      [&](auto value_tag) -> Status {
        using T = decltype(value_tag);
        return DispatchInt(
            index.dtype,
            [&](auto index_tag) -> Status {
              using I = decltype(index_tag);
              T* out_v = ctx.outs[0].as<T>();
              I* out_i = ctx.outs[1].as<I>();
              std::fill(out_v, out_v + outputs, *ctx.ins[2].as<T>());
              std::fill(out_i, out_i + outputs, *ctx.ins[3].as<I>());
              ArgReduceLoop<kMax>(x, index, index_strides, reduced, out_v, out_i);
              return Status();
            },
            [&] { return UnsupportedDType(ctx, index.dtype); });
      },
      unsupported);
}

// ---- reduce_general ----

// `count` copies of the `width`-byte element at `src`.
Status Splat(const KernelContext& ctx, const void* src, int64_t width, int64_t count,
             std::shared_ptr<Storage>* out) {
  WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, width * count, out));
  char* dst = static_cast<char*>((*out)->data());
  for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * width, src, width);
  return Status();
}

Status ReduceGeneral(KernelContext& ctx) {
  const Plan& body = SubPlan(ctx, "body");
  const IntList& reduced = ctx.instr.attr<IntList>("dims");
  const size_t n = ctx.instr.outs.size();
  if (n == 0 || ctx.ins.size() < 2 * n) throw PlanError("needs (xs..., inits...)");
  const Dims& dims = *ctx.ins[0].dims;
  const auto [outputs, reduced_count] = CheckReduced(dims, reduced);
  const StorageList captures(ctx.in_storage.begin() + 2 * n, ctx.in_storage.end());
  std::vector<int64_t> widths(n);
  for (size_t k = 0; k < n; ++k) {
    const Tensor& init = ctx.ins[n + k];
    if (*ctx.ins[k].dims != dims) throw PlanError("operands of different shapes");
    if (init.dtype != ctx.ins[k].dtype || init.num_elements() != 1) {
      throw PlanError("init values must be scalars of their operand's dtype");
    }
    widths[k] = ByteWidth(ctx.ins[k].dtype);
  }

  // [R, M]: reduced dims (ascending) outside, kept dims inside.
  std::vector<int64_t> order;
  for (int64_t d : reduced) order.push_back(d);
  std::sort(order.begin(), order.end());
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) order.push_back(d);
  }
  const std::vector<int64_t> elem_strides = RowMajorStrides(dims);
  std::vector<int64_t> permuted_dims;
  for (int64_t d : order) permuted_dims.push_back(dims[d]);
  int64_t rows = outputs == 0 ? 0 : reduced_count;

  StorageList acc(n);
  for (size_t k = 0; k < n && rows > 0; ++k) {
    std::vector<int64_t> src_strides;
    for (int64_t d : order) src_strides.push_back(elem_strides[d] * widths[k]);
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, rows * outputs * widths[k], &acc[k]));
    StridedCopy(acc[k]->data(), ctx.ins[k].data, widths[k], permuted_dims, src_strides);
  }

  while (rows > 1) {
    const int64_t pairs = rows / 2;
    StorageList args(2 * n);
    for (size_t k = 0; k < n; ++k) {
      const int64_t row_bytes = outputs * widths[k];
      const char* src = static_cast<const char*>(acc[k]->data());
      for (int side = 0; side < 2; ++side) {  // Even rows left, odd rows right.
        std::shared_ptr<Storage>& dst = args[side * n + k];
        WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, pairs * row_bytes, &dst));
        StridedCopy(dst->data(), src + side * row_bytes, widths[k], {pairs, outputs},
                    {2 * row_bytes, widths[k]});
      }
    }
    args.insert(args.end(), captures.begin(), captures.end());
    StorageList combined;
    WORKSHOP_RETURN_IF_ERROR(
        RunSubPlan(ctx, WithLanes(body, pairs * outputs), std::move(args), &combined));
    if (combined.size() != n) throw PlanError("the body must return one value per operand");
    for (size_t k = 0; k < n; ++k) {
      if (combined[k]->size() < static_cast<size_t>(pairs * outputs * widths[k])) {
        throw PlanError("the body returns a value of another dtype than its operand");
      }
    }
    if (rows % 2 == 1) {  // The last row has no partner this round: carry it over.
      for (size_t k = 0; k < n; ++k) {
        const int64_t row_bytes = outputs * widths[k];
        std::shared_ptr<Storage> next;
        WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, (pairs + 1) * row_bytes, &next));
        std::memcpy(next->data(), combined[k]->data(), pairs * row_bytes);
        std::memcpy(static_cast<char*>(next->data()) + pairs * row_bytes,
                    static_cast<const char*>(acc[k]->data()) + (rows - 1) * row_bytes, row_bytes);
        combined[k] = std::move(next);
      }
    }
    acc = std::move(combined);
    rows = pairs + rows % 2;
  }

  StorageList inits(n);
  for (size_t k = 0; k < n; ++k) {
    WORKSHOP_RETURN_IF_ERROR(Splat(ctx, ctx.ins[n + k].data, widths[k], outputs, &inits[k]));
  }
  if (rows == 0) {  // Nothing to reduce (or no outputs): the result is the init value.
    ctx.out_storage = std::move(inits);
    return Status();
  }
  StorageList args = std::move(inits);
  args.insert(args.end(), acc.begin(), acc.end());
  args.insert(args.end(), captures.begin(), captures.end());
  return RunSubPlan(ctx, WithLanes(body, outputs), std::move(args), &ctx.out_storage);
}

// ---- map ----

// map(xs..., captures...): `body`, a lane plan over (xs..., captures...), run once with one
// lane per element.
Status Map(KernelContext& ctx) {
  const Plan& body = SubPlan(ctx, "body");
  const int64_t n = ctx.instr.attr<int64_t>("operands");
  if (n < 1 || static_cast<int64_t>(ctx.ins.size()) < n) throw PlanError("needs operands");
  const int64_t count = ctx.ins[0].num_elements();
  if (count == 0) {
    ctx.out_storage.resize(ctx.instr.outs.size());
    for (auto& out : ctx.out_storage) WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, 0, &out));
    return Status();
  }
  return RunSubPlan(ctx, WithLanes(body, count), ctx.in_storage, &ctx.out_storage);
}

WORKSHOP_REGISTER_KERNEL("map", Map, /*aliases_operand=*/false, /*manages_outputs=*/true);
WORKSHOP_REGISTER_KERNEL("argmax", .fn = ArgReduce<true>, .check = CheckReduction);
WORKSHOP_REGISTER_KERNEL("argmin", .fn = ArgReduce<false>, .check = CheckReduction);
WORKSHOP_REGISTER_KERNEL("reduce_general", .fn = ReduceGeneral, .manages_outputs = true,
                         .check = CheckReduction);

}  // namespace
}  // namespace workshop
