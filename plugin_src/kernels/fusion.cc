// fusion: a run of elementwise kernels executed block by block (compiler/fusion.py).
//
// The body is an ordinary sub-plan whose results all have N elements: elementwise kernels
// over N elements, and broadcast_in_dim of operands with fewer elements (scalars, rows,
// columns, ...). Rather than run each kernel over all N elements (N-element
// intermediates, one pass over memory per kernel), we cut [0, N) into blocks and run the
// whole body on each block: operands and results are viewed at the block's offset,
// intermediates live in small per-thread buffers that stay in L1/L2. Blocks are
// independent, so they are spread over the thread pool.
//
// A row fusion (attribute `row` = C > 1) also holds reductions over the trailing dims
// whose product is C: softmax, layer norm. The N elements are N / C rows of C, a block is
// whole rows, and a slot is either full size (N elements, viewed per block) or per row
// (N / C elements, one per row, viewed per block as that block's rows). A reduce folds
// each row of its block (reduce.h, the reduce kernel's own fold, so the bits match the
// unfused program); a broadcast from a per-row slot back to full size fills each row; a
// broadcast between per-row slots (a reshape to [R, 1]) copies. Everything else is as
// in an elementwise fusion, on per-row or full-size views.
//
// What stays the same from block to block is worked out once, when the plan is prepared
// (FusionSchedule, KernelDef::prepare), and done once per thread:
// * a broadcast writes just the block's slice of its result (BroadcastSlice), never the
//   whole N elements;
// * a step whose result is the same in every block ("invariant": a broadcast whose
//   pattern repeats with the block length, e.g. of a scalar or of a row of gamma, and
//   elementwise steps over invariant values only) runs once, before the first block;
// * intermediates share buffers once they are dead, so a long chain stays in L1;
// * the kernel contexts are built once per thread; a block only moves data pointers.
#include <algorithm>
#include <atomic>
#include <complex>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>

#include "kernels/codegen/generated_code.h"
#include "kernels/core/attr_check.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/core/subplan.h"
#include "kernels/reduce/reduce.h"
#include "runtime/thread_pool.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace workshop {
namespace {

// At most 1024 elements per block: an f32 intermediate is 4 KiB, so a chain's live
// intermediates and its hoisted invariant values (a gelu has four constants) fit in L1
// together, and the block is still long enough for the per-kernel dispatch to vanish
// against the loop. Shorter when that makes column broadcasts invariant.
constexpr int64_t kMaxBlock = 1024;
// A row fusion's block: as many whole rows as fit in this many elements, at least one.
// Measured on layer norm and softmax over rows of 1024: blocks of 1024 to 4096 elements
// cost the same within noise, 8192 (intermediates spilling from L2) is slower.
constexpr int64_t kMaxRowBlock = 2048;

// Result bytes of a fusion from which its results bypass the cache (StreamStore). Results
// that big, with the operands they are computed from, do not stay in a typical last-level
// cache for a reader anyway, and a plain store first reads in every line it writes: 32 MB
// of traffic instead of 48 for a layer norm of 4096x1024 f32. Measured on the 2-core VM
// (32 MiB L3): layer norm 4096x1024 2.3-2.6 ms -> 1.6-1.8 ms, x*2+1 on 2^24 f32 3.5-3.9 ->
// 3.1-3.3 ms; with 4 MB results (1024 rows, 2^20 elements) streaming was slower (0.30 ->
// 0.36 ms), as plain stores hit in L3. A constant: sysconf's L3 size is 320 MB on that VM.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// Copies `bytes` from src (a scratch block, in L1) to dst with non-temporal stores where
// the target allows (SSE2: 16 bytes at a time, dst 16-aligned), memcpy elsewhere.
void StreamStore(char* dst, const char* src, int64_t bytes) {
#if defined(__SSE2__)
  const int64_t head = std::min<int64_t>(bytes, -reinterpret_cast<uintptr_t>(dst) & 15);
  std::memcpy(dst, src, head);
  dst += head, src += head, bytes -= head;
  for (; bytes >= 64; bytes -= 64, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
#endif
  std::memcpy(dst, src, bytes);
}

// How to write elements [offset, offset + length) of a broadcast_in_dim's row-major
// result: the result's dims with size-1 and contiguous dims merged, and the operand's
// element stride along each (0 along repeated dims).
struct BroadcastSlice {
  std::vector<int64_t> dims, strides;
  int64_t elem_size = 0;
  int64_t base = 0;  // Element of the operand that result element 0 reads (a slice's start).

  // The smallest period p such that element i and i + p always read the same operand
  // element (N if the pattern does not repeat inside the result).
  int64_t Period() const {
    int64_t period = 1, inner = 1;
    for (size_t d = dims.size(); d-- > 0;) {
      inner *= dims[d];
      if (strides[d] != 0) period = std::lcm(period, inner);
    }
    // A zero-size broadcast repeats with any period; 0 (lcm with a zero extent) would be
    // a divisor below.
    return period == 0 ? 1 : period;
  }
};

// Fills `dst` with elements [offset, offset + length) of the broadcast of `src`, run by
// run along the innermost dim: a fill where it repeats, a copy where it is contiguous.
template <typename T>
void WriteBroadcastSlice(const BroadcastSlice& b, const T* __restrict src, T* __restrict dst,
                         int64_t offset, int64_t length) {
  const int64_t inner = b.dims.back(), inner_stride = b.strides.back();
  const int64_t outer_rank = static_cast<int64_t>(b.dims.size()) - 1;
  int64_t row = offset / inner, column = offset % inner;
  while (length > 0) {
    int64_t base = 0;
    for (int64_t d = outer_rank - 1, rest = row; d >= 0; --d) {
      base += (rest % b.dims[d]) * b.strides[d];
      rest /= b.dims[d];
    }
    const int64_t run = std::min(inner - column, length);
    const T* from = src + b.base + base + column * inner_stride;
    if (inner_stride == 0) {
      const T value = *from;
      for (int64_t i = 0; i < run; ++i) dst[i] = value;
    } else if (inner_stride == 1) {
      std::memcpy(dst, from, run * sizeof(T));
    } else {
      for (int64_t i = 0; i < run; ++i) dst[i] = from[i * inner_stride];
    }
    dst += run;
    length -= run;
    ++row;
    column = 0;
  }
}

void WriteBroadcastSlice(const BroadcastSlice& b, const void* src, void* dst, int64_t offset,
                         int64_t length) {
  auto run = [&](auto zero) {
    using T = decltype(zero);
    WriteBroadcastSlice(b, static_cast<const T*>(src), static_cast<T*>(dst), offset, length);
  };
  switch (b.elem_size) {
    case 1: return run(uint8_t{});
    case 2: return run(uint16_t{});
    case 4: return run(uint32_t{});
    case 8: return run(uint64_t{});
    default: return run(std::complex<double>{});  // 16 bytes; checked in the schedule.
  }
}

// How to write elements [offset, offset + length) of a concatenate of whole operands:
// the result is rows (the dims before the concatenated one) in which operand k holds a
// run of spans[k] elements (its extent along the dim times the dims after it).
struct ConcatSlice {
  std::vector<int64_t> spans;
  int64_t elem_size = 0;
};

void WriteConcatSlice(const ConcatSlice& c, const std::vector<Tensor>& ins, char* dst,
                      int64_t offset, int64_t length) {
  int64_t row_span = 0;
  for (int64_t span : c.spans) row_span += span;
  if (row_span == 0) return;
  int64_t row = offset / row_span, column = offset % row_span;
  while (length > 0) {
    int64_t start = 0;
    for (size_t k = 0; k < c.spans.size() && length > 0; start += c.spans[k++]) {
      if (column >= start + c.spans[k]) continue;
      const int64_t run = std::min(start + c.spans[k] - column, length);
      const char* src =
          static_cast<const char*>(ins[k].data) + (row * c.spans[k] + column - start) * c.elem_size;
      std::memcpy(dst, src, run * c.elem_size);
      dst += run * c.elem_size;
      length -= run;
      column += run;
    }
    ++row;
    column = 0;
  }
}

struct Step {
  enum Kind {
    kKernel,          // The instruction's own kernel on the block's views.
    kConcat,          // A concatenate of whole operands: its elements at the block's offset.
    kBroadcast,       // A broadcast of a whole operand: the slice at the block's offset.
    kLocalBroadcast,  // From a per-row slot of this block (a row fill, or a copy).
    kRowReduce,       // Folds each row of the block.
    kPerRowScalar,    // The kernel once per row, operand `scalar` being the row's value.
  };
  const Instr* instr = nullptr;
  Kind kind = kKernel;
  std::vector<int> ins;  // The slots read: instr->ins, with elided broadcasts' sources.
  std::unique_ptr<BroadcastSlice> broadcast;  // kBroadcast, kLocalBroadcast.
  std::unique_ptr<ConcatSlice> concat;        // kConcat.
  RowFold fold = nullptr;                     // kRowReduce.
  int scalar = -1;                            // kPerRowScalar: which operand.
  bool per_row = false;                       // The result has one element per row.
  bool invariant = false;                     // Runs once per thread, not per block.
  bool elided = false;  // A broadcast its readers take as a scalar operand instead.
};

// Rows at least this long have their row broadcasts elided (kPerRowScalar): a kernel call
// per row must cost less than writing the row's block.
constexpr int64_t kMinScalarRow = 64;

// How a kernel sees a slot in a block.
enum class View {
  kWhole,   // All of it: operands smaller than the fusion (scalars, gamma, ...).
  kBlock,   // The block's elements: N-element slots.
  kPerRow,  // The block's rows: per-row slots of a row fusion.
};

// Everything about a body that does not depend on the data: computed once per body.
struct FusionSchedule {
  std::shared_ptr<const Plan> body;  // Steps point at its instructions.
  int64_t n = 0;                     // Elements of every full-size slot.
  int64_t row = 1;                   // Elements per row; 1 unless the fusion reduces rows.
  int64_t block = 0;  // Elements per block, whole rows (the last block may be shorter).
  int64_t grain = 1;  // Blocks a thread takes at a time; fewer than two batches: no threads.
  int64_t work = 0;   // Element operations of the whole fusion (ThreadPool::PartsFor).
  std::vector<Step> steps;
  std::vector<View> view;               // Per slot.
  std::vector<int64_t> scratch_offset;  // Per slot: byte offset in the scratch; -1: none.
  int64_t scratch_bytes = 0;
  // Results computed into scratch, then stored to the output with non-temporal stores.
  std::vector<int> streamed;
  mutable MeasuredTime measured;  // Its time on one thread (ThreadPool::PartsFor).
};

// Sets `slice` to write the elements of `out` read through operand element strides
// strides[1] (strides[0]: out's own row-major strides), its dims merged where both allow.
void SetStrides(const SlotType& out, std::vector<std::vector<int64_t>>& strides,
                BroadcastSlice& slice) {
  slice.dims = CollapseDims(out.dims, strides);
  slice.strides = std::move(strides[1]);
  if (slice.dims.empty()) {  // One element.
    slice.dims = {1};
    slice.strides = {0};
  }
  slice.elem_size = ByteWidth(out.dtype);
}

BroadcastSlice MakeBroadcastSlice(const SlotType& in, const SlotType& out, const IntList& dims) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.dims);
  std::vector<std::vector<int64_t>> strides = {RowMajorStrides(out.dims),
                                               std::vector<int64_t>(out.dims.size(), 0)};
  // Output dims the operand does not map to, or maps a size-1 dim to, repeat: stride 0.
  for (size_t i = 0; i < dims.size(); ++i) {
    if (in.dims[i] == out.dims[dims[i]]) strides[1][dims[i]] = in_strides[i];
  }
  BroadcastSlice slice;
  SetStrides(out, strides, slice);
  return slice;
}

// A slice (start, stride per dim) of `in` to `out` as the strided read that writes a
// block of it: XLA's loop fusion takes a slice into its consumers the same way, so the
// slice is never written out in full (associative_scan's even/odd halves, an RNN's gates).
BroadcastSlice MakeSliceView(const SlotType& in, const SlotType& out, const IntList& start,
                             const IntList& stride) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.dims);
  std::vector<std::vector<int64_t>> strides = {RowMajorStrides(out.dims),
                                               std::vector<int64_t>(out.dims.size(), 0)};
  BroadcastSlice slice;
  for (size_t d = 0; d < out.dims.size(); ++d) {
    strides[1][d] = in_strides[d] * stride[d];
    slice.base += start[d] * in_strides[d];
  }
  SetStrides(out, strides, slice);
  return slice;
}

// Whether `dims` reduced by a reduce are exactly the trailing dims of `in`, `row` elements.
bool ReducesTrailing(const SlotType& in, const IntList& dims, int64_t row) {
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  int64_t product = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != rank - static_cast<int64_t>(dims.size() - i)) return false;
    product *= in.dims[dims[i]];
  }
  return product == row;
}

// Whether a broadcast slice reads operand element i / `per` for result element i: a row
// fill (per = C) or a plain copy (per = 1) of a per-row slot. A one-element result (a
// fusion of one row: a batch-1 layer norm) reads element 0 whatever its slice says.
bool IsLocalPattern(const BroadcastSlice& b, int64_t rows, int64_t per) {
  if (rows * per == 1) return true;
  if (per == 1) return b.dims == std::vector<int64_t>{rows} && b.strides[0] == 1;
  if (rows == 1) return b.dims == std::vector<int64_t>{per} && b.strides[0] == 0;
  return b.dims == std::vector<int64_t>{rows, per} && b.strides == std::vector<int64_t>{1, 0};
}

// Broadcasts whose every reader is a scalar_operands kernel (add, multiply, ...) with the
// broadcast as one operand and a block-sized other operand: such a reader takes the
// broadcast's source instead, a scalar as a one-element operand, a per-row value row by
// row (kPerRowScalar), and the broadcast is never written. The readers' `ins` change, so
// this runs before invariance and scratch assignment look at them.
void ElideBroadcasts(const Plan& body, const std::vector<bool>& is_result, FusionSchedule& s) {
  if (s.n <= 1) return;
  for (size_t b = 0; b < s.steps.size(); ++b) {
    Step& cast = s.steps[b];
    const int out = cast.instr->outs[0];
    const bool scalar = cast.kind == Step::kBroadcast && s.view[cast.ins[0]] == View::kWhole &&
                        NumElements(body.slots[cast.ins[0]].dims) == 1;
    const bool row_fill =
        cast.kind == Step::kLocalBroadcast && !cast.per_row && s.row >= kMinScalarRow;
    if ((!scalar && !row_fill) || is_result[out]) continue;
    std::vector<std::pair<size_t, int>> readers;  // (step, operand index)
    bool ok = true;
    for (size_t r = b + 1; ok && r < s.steps.size(); ++r) {
      Step& reader = s.steps[r];
      const int uses = static_cast<int>(std::count(reader.ins.begin(), reader.ins.end(), out));
      if (uses == 0) continue;
      const int j = reader.ins[0] == out ? 0 : 1;
      ok = uses == 1 && reader.kind == Step::kKernel && reader.instr->kernel->scalar_operands &&
           reader.ins.size() == 2 &&
           s.view[reader.ins[1 - j]] == (reader.per_row ? View::kPerRow : View::kBlock);
      readers.emplace_back(r, j);
    }
    if (!ok || readers.empty()) continue;
    for (auto [r, j] : readers) {
      s.steps[r].ins[j] = cast.ins[0];
      if (row_fill) {
        s.steps[r].kind = Step::kPerRowScalar;
        s.steps[r].scalar = j;
      }
    }
    cast.elided = true;
  }
}

Status MakeSchedule(const Instr& fusion, const Plan& body, FusionSchedule* schedule) {
  FusionSchedule& s = *schedule;
  const size_t num_slots = body.slots.size();
  auto bad = [&](const Instr& instr, const char* why) {
    return InvalidArgument("workshop: ", instr.op, " at ", instr.loc, " cannot be fused (", why,
                           ") in ", fusion.loc);
  };
  if (body.results.empty()) return InvalidArgument("workshop: empty fusion ", fusion.loc);
  // The largest slot: a row fusion's only result may be per row (a fused sum of squares).
  // An operand that only slices read may be larger (compiler/fusion.py fusion_elements).
  std::vector<bool> sliced_only(num_slots, false);
  for (int p : body.params) sliced_only[p] = true;
  for (const Instr& instr : body.instrs) {
    for (size_t k = 0; k < instr.ins.size(); ++k) {
      if (instr.op != "slice" || k != 0) sliced_only[instr.ins[k]] = false;
    }
  }
  for (size_t i = 0; i < num_slots; ++i) {
    if (!sliced_only[i]) s.n = std::max(s.n, NumElements(body.slots[i].dims));
  }
  // Results of no elements (a softmax over zero rows): nothing to compute, whatever the
  // size of a scalar operand or a reduction's init; RunFusion returns at once.
  if (std::all_of(body.results.begin(), body.results.end(),
                  [&](int r) { return NumElements(body.slots[r].dims) == 0; })) {
    s.n = 0;
    return Status();
  }
  if (fusion.attrs.contains("row")) s.row = fusion.attr<int64_t>("row");
  if (s.row < 1 || s.n % s.row != 0) {
    return InvalidArgument("workshop: fusion rows of ", s.row, " do not divide its ", s.n,
                           " elements at ", fusion.loc);
  }
  const int64_t rows = s.n / s.row;
  s.view.resize(num_slots);
  for (size_t i = 0; i < num_slots; ++i) {
    s.view[i] = NumElements(body.slots[i].dims) == s.n ? View::kBlock : View::kWhole;
  }
  std::vector<bool> is_param(num_slots), is_result(num_slots);
  for (int p : body.params) is_param[p] = true;
  for (int r : body.results) is_result[r] = true;
  auto is_scalar = [&](int slot) {
    return s.view[slot] == View::kWhole && NumElements(body.slots[slot].dims) == 1;
  };

  // Each step's kind, the view of its result, and the block length that makes the most
  // broadcasts invariant.
  int64_t period = 1;
  for (const Instr& instr : body.instrs) {
    Step step;
    step.instr = &instr;
    step.ins = instr.ins;
    if (instr.outs.size() != 1) return bad(instr, "not one result");
    const int out = instr.outs[0];
    const int64_t out_elements = NumElements(body.slots[out].dims);
    step.per_row = s.row > 1 && out_elements == rows && !is_param[out];
    if (out_elements != s.n && !step.per_row) {
      return bad(instr, "its result is neither the fusion's size nor one per row");
    }
    if (step.per_row) s.view[out] = View::kPerRow;
    if (instr.op == "reshape" && step.per_row) {  // [R] -> [R, 1]: row-major, a copy.
      if (instr.ins.size() != 1 || s.view[instr.ins[0]] != View::kPerRow) {
        return bad(instr, "a reshape of something other than a per-row value");
      }
      step.kind = Step::kLocalBroadcast;
      step.broadcast = std::make_unique<BroadcastSlice>(
          BroadcastSlice{{rows}, {1}, ByteWidth(body.slots[out].dtype)});
    } else if (instr.op == "broadcast_in_dim") {
      if (instr.ins.size() != 1) return bad(instr, "not one operand");
      const SlotType& in = body.slots[instr.ins[0]];
      const SlotType& out_type = body.slots[out];
      const IntList& dims = instr.attr<IntList>("dims");
      bool ok = in.dtype == out_type.dtype && dims.size() == in.dims.size() &&
                ByteWidth(in.dtype) <= 16 && (s.view[instr.ins[0]] != View::kBlock || s.n == 1);
      for (size_t i = 0; ok && i < dims.size(); ++i) {
        ok = dims[i] >= 0 && dims[i] < static_cast<int64_t>(out_type.dims.size()) &&
             (in.dims[i] == 1 || in.dims[i] == out_type.dims[dims[i]]);
      }
      if (!ok) return bad(instr, "not a broadcast of a smaller operand");
      auto slice = std::make_unique<BroadcastSlice>(MakeBroadcastSlice(in, out_type, dims));
      if (s.view[instr.ins[0]] == View::kPerRow) {
        // From this block's own rows, written from their offset 0: only a row fill or a
        // copy has the same pattern there as in the whole result.
        if (!IsLocalPattern(*slice, rows, step.per_row ? 1 : s.row)) {
          return bad(instr, "a per-row value broadcast other than along its rows");
        }
        step.kind = Step::kLocalBroadcast;
      } else {
        step.kind = Step::kBroadcast;
        // A per-row result repeats with its period in rows: C times that in elements.
        const int64_t p = slice->Period() * (step.per_row ? s.row : 1);
        if (p <= kMaxBlock && std::lcm(period, p) <= kMaxBlock) period = std::lcm(period, p);
      }
      step.broadcast = std::move(slice);
    } else if (instr.op == "slice") {
      if (instr.ins.size() != 1 || step.per_row || s.view[instr.ins[0]] != View::kWhole ||
          is_result[instr.ins[0]]) {
        return bad(instr, "not a slice of a whole operand to the fusion's size");
      }
      const SlotType& in = body.slots[instr.ins[0]];
      const SlotType& out_type = body.slots[out];
      const IntList& start = instr.attr<IntList>("start");
      const IntList& stride = instr.attr<IntList>("stride");
      bool ok = in.dtype == out_type.dtype && ByteWidth(in.dtype) <= 16 &&
                start.size() == in.dims.size() && stride.size() == in.dims.size() &&
                out_type.dims.size() == in.dims.size();
      for (size_t d = 0; ok && d < in.dims.size(); ++d) {  // Every element read is in `in`.
        // (out - 1) * stride < in - start, without the product overflowing.
        ok = start[d] >= 0 && stride[d] >= 1 &&
             (out_type.dims[d] == 0 ||
              (start[d] < in.dims[d] &&
               out_type.dims[d] - 1 <= (in.dims[d] - 1 - start[d]) / stride[d]));
      }
      if (!ok) return bad(instr, "a slice outside its operand");
      step.kind = Step::kBroadcast;
      step.broadcast = std::make_unique<BroadcastSlice>(MakeSliceView(in, out_type, start, stride));
    } else if (instr.op == "concatenate") {
      // Of operands the fusion reads whole (compiler/fusion.py: all smaller than it): a
      // roll, a RoPE rotation, a GRU's [x, h].
      const SlotType& out_type = body.slots[out];
      const int64_t dim = instr.attr<int64_t>("dim");
      const int64_t rank = static_cast<int64_t>(out_type.dims.size());
      bool ok = !step.per_row && !instr.ins.empty() && dim >= 0 && dim < rank &&
                ByteWidth(out_type.dtype) <= 16;
      int64_t inner = 1, extent = 0;
      for (int64_t d = dim + 1; ok && d < rank; ++d) inner *= out_type.dims[d];
      auto concat = std::make_unique<ConcatSlice>();
      concat->elem_size = ByteWidth(out_type.dtype);
      for (size_t k = 0; ok && k < instr.ins.size(); ++k) {
        const SlotType& in = body.slots[instr.ins[k]];
        ok = s.view[instr.ins[k]] == View::kWhole && in.dtype == out_type.dtype &&
             static_cast<int64_t>(in.dims.size()) == rank;
        for (int64_t d = 0; ok && d < rank; ++d) ok = d == dim || in.dims[d] == out_type.dims[d];
        if (ok) {
          extent += in.dims[dim];
          concat->spans.push_back(in.dims[dim] * inner);
        }
      }
      if (!ok || extent != out_type.dims[dim]) {
        return bad(instr, "not a concatenate of whole operands to the fusion's size");
      }
      step.kind = Step::kConcat;
      step.concat = std::move(concat);
    } else if (instr.op == "reduce" && s.row > 1) {
      const std::string& reducer = instr.attr<std::string>("body");
      if (instr.ins.size() != 2 || !step.per_row || s.view[instr.ins[0]] != View::kBlock ||
          !is_scalar(instr.ins[1]) || body.slots[instr.ins[0]].dtype != body.slots[out].dtype ||
          body.slots[instr.ins[1]].dtype != body.slots[out].dtype ||
          !ReducesTrailing(body.slots[instr.ins[0]], instr.attr<IntList>("dims"), s.row)) {
        return bad(instr, "not a reduction of the fusion's rows");
      }
      step.kind = Step::kRowReduce;
      step.fold = FindRowFold(reducer, body.slots[out].dtype);
      if (step.fold == nullptr) return bad(instr, "no row fold for its body and dtype");
    } else {
      // Operands have the result's view, or are scalars (select's predicate, clamp's
      // bounds), read whole.
      const View want = step.per_row ? View::kPerRow : View::kBlock;
      for (int in : instr.ins) {
        if (s.view[in] != want && !is_scalar(in)) {
          return bad(instr, "an operand is neither the result's size nor a scalar");
        }
      }
    }
    s.steps.push_back(std::move(step));
  }
  if (s.row > 1) {
    s.block = std::min(s.n, s.row * std::max<int64_t>(1, kMaxRowBlock / s.row));
  } else {
    s.block = std::max<int64_t>(1, std::min(s.n, kMaxBlock - kMaxBlock % period));
  }

  ElideBroadcasts(body, is_result, s);

  // Invariant steps: their result, a temporary, is the same slice in every block.
  std::vector<bool> invariant(num_slots);
  for (size_t i = 0; i < num_slots; ++i) invariant[i] = s.view[i] == View::kWhole;
  for (Step& step : s.steps) {
    const int out = step.instr->outs[0];
    if (is_result[out] || step.elided) continue;
    if (step.kind == Step::kBroadcast) {
      const int64_t length = step.per_row ? s.block / s.row : s.block;
      step.invariant = length % step.broadcast->Period() == 0 || s.block == s.n;
    } else if (step.kind == Step::kConcat) {
      step.invariant = s.block == s.n;
    } else {
      step.invariant = true;
      for (int in : step.ins) step.invariant = step.invariant && invariant[in];
    }
    invariant[out] = step.invariant;
  }

  // Scratch buffers for the temporaries: invariant ones keep theirs; the others take a
  // free buffer and give it back after their last reader (never sharing one between an
  // instruction's operand and result: kernels take __restrict pointers).
  std::vector<int> last_use(num_slots, -1);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (s.steps[i].elided) continue;
    for (int in : s.steps[i].ins) last_use[in] = static_cast<int>(i);
  }
  const int64_t buffer_bytes = (s.block * 16 + 63) / 64 * 64;  // Any dtype, 64-aligned.
  std::vector<int64_t> free_buffers;
  s.scratch_offset.assign(num_slots, -1);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (s.steps[i].elided) continue;
    const int out = s.steps[i].instr->outs[0];
    if (!is_result[out] && !is_param[out]) {
      if (free_buffers.empty() || s.steps[i].invariant) {
        s.scratch_offset[out] = s.scratch_bytes;
        s.scratch_bytes += buffer_bytes;
      } else {
        s.scratch_offset[out] = free_buffers.back();
        free_buffers.pop_back();
      }
    }
    for (int in : s.steps[i].ins) {
      if (last_use[in] == static_cast<int>(i) && s.scratch_offset[in] >= 0 && !invariant[in]) {
        free_buffers.push_back(s.scratch_offset[in]);
        last_use[in] = -1;  // An operand read twice is freed once.
      }
    }
    if (last_use[out] < 0 && s.scratch_offset[out] >= 0 && !s.steps[i].invariant) {
      free_buffers.push_back(s.scratch_offset[out]);  // Dead on arrival.
    }
  }

  // Large results bypass the cache on their way out (see StreamStore).
  int64_t result_bytes = 0;
  for (const Step& step : s.steps) {
    const int out = step.instr->outs[0];
    if (is_result[out] && !is_param[out] && s.view[out] == View::kBlock) {
      result_bytes += s.n * ByteWidth(body.slots[out].dtype);
    }
  }
  if (result_bytes >= kStreamBytes) {
    for (const Step& step : s.steps) {
      const int out = step.instr->outs[0];
      if (!is_result[out] || is_param[out] || s.view[out] != View::kBlock) continue;
      s.scratch_offset[out] = s.scratch_bytes;
      s.scratch_bytes += buffer_bytes;
      s.streamed.push_back(out);
    }
  }

  // A batch carries about kParallelGrain elements' worth of kernel work (a long chain
  // splits earlier than a single kernel), so a thread hand-off pays for itself.
  int64_t per_block = 0;
  for (const Step& step : s.steps) {
    per_block += step.invariant || step.elided ? 0 : step.instr->kernel->work;
  }
  s.grain = std::max<int64_t>(1, kParallelGrain / (s.block * std::max<int64_t>(per_block, 1)));
  s.work = s.n * std::max<int64_t>(per_block, 1);
  return Status();
}

// The fusion kernel's prepare hook: the schedule, computed once per instruction.
Status PrepareFusion(Instr& instr) {
  auto schedule = std::make_shared<FusionSchedule>();
  schedule->body = instr.attr<std::shared_ptr<const Plan>>("body");
  WORKSHOP_RETURN_IF_ERROR(MakeSchedule(instr, *schedule->body, schedule.get()));
  instr.prepared = std::move(schedule);
  return Status();
}

// A kPerRowScalar step (a two-operand kernel) on `rows` rows of `row` elements: the
// kernel once per row, with the scalar operand at that row's value and the other operand
// and the result at that row. The views are put back afterwards, so the block loop's
// pointer updates still apply.
Status RunPerRow(const Step& step, int64_t row, int64_t rows, KernelContext& k) {
  static const Dims kOne = {1};
  const Dims row_dims = {row};
  const Tensor saved[3] = {k.ins[0], k.ins[1], k.outs[0]};
  Tensor& scalar = k.ins[step.scalar];
  Tensor& other = k.ins[1 - step.scalar];
  scalar.dims = &kOne;
  other.dims = k.outs[0].dims = &row_dims;
  const int64_t scalar_width = ByteWidth(scalar.dtype);
  const int64_t other_stride = row * ByteWidth(other.dtype);
  const int64_t out_stride = row * ByteWidth(k.outs[0].dtype);
  Status status;
  for (int64_t r = 0; r < rows && status.ok(); ++r) {
    scalar.data = static_cast<char*>(saved[step.scalar].data) + r * scalar_width;
    other.data = static_cast<char*>(saved[1 - step.scalar].data) + r * other_stride;
    k.outs[0].data = static_cast<char*>(saved[2].data) + r * out_stride;
    status = step.instr->kernel->fn(k);
  }
  k.ins[0] = saved[0];
  k.ins[1] = saved[1];
  k.outs[0] = saved[2];
  return status;
}

// Runs blocks of the fusion on the calling thread, `s.grain` at a time, taking them from
// `next` until none are left: a thread that starts late (the box is busy) does less.
// `buffered`: results written over an operand (RunFusion), computed into scratch too.
Status RunBlocks(const KernelContext& ctx, const Plan& body, const FusionSchedule& s,
                 const std::vector<int>& buffered, int64_t blocks, std::atomic<int64_t>& next) {
  std::vector<int64_t> scratch_offset = s.scratch_offset;
  int64_t scratch_bytes = s.scratch_bytes;
  std::vector<int> copied;  // Buffered results, copied out (plainly) after each block.
  for (int slot : buffered) {
    if (scratch_offset[slot] >= 0) continue;  // Streamed: already in scratch.
    scratch_offset[slot] = scratch_bytes;
    scratch_bytes += (s.block * 16 + 63) / 64 * 64;  // As MakeSchedule's buffers.
    copied.push_back(slot);
  }
  std::shared_ptr<Storage> scratch;
  if (scratch_bytes > 0) {
    if (Status status = AllocateFor(ctx, scratch_bytes, &scratch); !status.ok()) {
      return status;
    }
  }
  // Per slot: where its data is (a block's view adds the block offset for operands and
  // results) and its element width.
  const size_t num_slots = body.slots.size();
  std::vector<char*> base(num_slots, nullptr);
  for (size_t i = 0; i < body.params.size(); ++i) {
    base[body.params[i]] = static_cast<char*>(ctx.ins[i].data);
  }
  for (size_t i = 0; i < body.results.size(); ++i) {
    base[body.results[i]] = static_cast<char*>(ctx.outs[i].data);
  }
  struct Stream {  // A streamed result: its block in scratch, and where it goes.
    const char* block;
    char* out;
    int64_t stride;  // Bytes per row of the fusion.
  };
  std::vector<Stream> streams;
  // Non-temporal stores are weakly ordered: on every way out (an error too, after which
  // the output may be freed and reused), fence them before this thread reports its blocks
  // done, which an ordinary release store does not order.
  struct FenceStreams {
    const std::vector<Stream>& streams;
    ~FenceStreams() {
#if defined(__SSE2__)
      if (!streams.empty()) _mm_sfence();
#endif
    }
  } fence{streams};
  for (int slot : s.streamed) {
    const int64_t width = ByteWidth(body.slots[slot].dtype);
    streams.push_back(
        {static_cast<char*>(scratch->data()) + scratch_offset[slot], base[slot], width * s.row});
  }
  std::vector<Stream> copies;
  for (int slot : copied) {
    const int64_t width = ByteWidth(body.slots[slot].dtype);
    copies.push_back({static_cast<char*>(scratch->data()) + scratch_offset[slot], base[slot],
                      s.view[slot] == View::kPerRow ? width : width * s.row});
  }
  for (size_t i = 0; i < num_slots; ++i) {
    if (scratch_offset[i] >= 0) {
      base[i] = static_cast<char*>(scratch->data()) + scratch_offset[i];
    }
  }
  Dims block_dims = {s.block}, row_dims = {s.block / s.row};
  std::vector<KernelContext> steps;
  steps.reserve(s.steps.size());
  struct Moving {  // A tensor that is a window of an operand or result.
    Tensor* tensor;
    char* base;
    int64_t stride;  // Bytes per row of the fusion.
  };
  std::vector<Moving> moving;
  for (const Step& step : s.steps) {
    KernelContext& inner =
        steps.emplace_back(KernelContext{*step.instr, {}, {}, ctx.launch, {}, {}});
    auto view = [&](int slot) {
      const SlotType& type = body.slots[slot];
      switch (s.view[slot]) {
        case View::kBlock: return Tensor{type.dtype, &block_dims, base[slot]};
        case View::kPerRow: return Tensor{type.dtype, &row_dims, base[slot]};
        default: return Tensor{type.dtype, &type.dims, base[slot]};
      }
    };
    for (int slot : step.ins) inner.ins.push_back(view(slot));
    for (int slot : step.instr->outs) inner.outs.push_back(view(slot));
  }
  // Pointers into `steps` are stable from here on.
  for (size_t i = 0; i < s.steps.size(); ++i) {
    auto track = [&](std::vector<Tensor>& tensors, const std::vector<int>& slots) {
      for (size_t k = 0; k < slots.size(); ++k) {
        const View view = s.view[slots[k]];
        if (view != View::kWhole && scratch_offset[slots[k]] < 0) {
          const int64_t width = ByteWidth(tensors[k].dtype);
          moving.push_back(
              {&tensors[k], base[slots[k]], view == View::kBlock ? width * s.row : width});
        }
      }
    };
    if (s.steps[i].invariant || s.steps[i].elided) continue;
    track(steps[i].ins, s.steps[i].ins);
    track(steps[i].outs, s.steps[i].instr->outs);
  }
  auto run = [&](size_t i, int64_t offset) {
    const Step& step = s.steps[i];
    const KernelContext& k = steps[i];
    const int64_t length = step.per_row ? row_dims[0] : block_dims[0];
    switch (step.kind) {
      case Step::kBroadcast:
        WriteBroadcastSlice(*step.broadcast, k.ins[0].data, k.outs[0].data,
                            step.per_row ? offset / s.row : offset, length);
        return Status();
      case Step::kConcat:
        WriteConcatSlice(*step.concat, k.ins, static_cast<char*>(k.outs[0].data), offset, length);
        return Status();
      case Step::kLocalBroadcast:
        WriteBroadcastSlice(*step.broadcast, k.ins[0].data, k.outs[0].data, 0, length);
        return Status();
      case Step::kRowReduce:
        step.fold(k.ins[0].data, row_dims[0], s.row, k.ins[1].data, k.outs[0].data);
        return Status();
      case Step::kPerRowScalar: return RunPerRow(step, s.row, row_dims[0], steps[i]);
      default: return step.instr->kernel->fn(steps[i]);
    }
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (!s.steps[i].invariant || s.steps[i].elided) continue;
    if (Status status = run(i, 0); !status.ok()) return status;
  }
  for (int64_t first; (first = next.fetch_add(s.grain)) < blocks;) {
    for (int64_t block = first, end = std::min(blocks, first + s.grain); block < end; ++block) {
      const int64_t offset = block * s.block;
      block_dims[0] = std::min(s.block, s.n - offset);
      row_dims[0] = block_dims[0] / s.row;
      const int64_t first_row = offset / s.row;  // Blocks are whole rows.
      for (const Moving& m : moving) m.tensor->data = m.base + first_row * m.stride;
      for (size_t i = 0; i < s.steps.size(); ++i) {
        if (s.steps[i].invariant || s.steps[i].elided) continue;
        if (Status status = run(i, offset); !status.ok()) return status;
      }
      for (const Stream& st : streams) {
        StreamStore(st.out + first_row * st.stride, st.block, row_dims[0] * st.stride);
      }
      for (const Stream& c : copies) {
        std::memcpy(c.out + first_row * c.stride, c.block, row_dims[0] * c.stride);
      }
    }
  }
  return Status();
}

// Results whose storage overlaps an operand's (the executor wrote a donated result over
// its parameter: runtime/executor.cc), as body slots.
std::vector<int> ResultsOverOperands(const KernelContext& ctx, const Plan& body) {
  std::vector<int> aliased;
  for (size_t i = 0; i < ctx.outs.size(); ++i) {
    const char* out = static_cast<const char*>(ctx.outs[i].data);
    const int64_t out_bytes = ctx.outs[i].num_elements() * ByteWidth(ctx.outs[i].dtype);
    for (const Tensor& in : ctx.ins) {
      const char* data = static_cast<const char*>(in.data);
      const int64_t bytes = in.num_elements() * ByteWidth(in.dtype);
      if (out_bytes > 0 && bytes > 0 && out < data + bytes && data < out + out_bytes) {
        aliased.push_back(body.results[i]);
        break;
      }
    }
  }
  return aliased;
}

// Set while a horizontal fusion's task runs a member whole: the horizontal fusion's parts
// are the split (its own MeasuredTime), so the member runs on one part and is not timed.
thread_local bool in_horizontal_task = false;

// RunWorkers, and when `timed`, the workers' summed busy time recorded in `measured`: a
// one-thread equivalent whether the kernel ran on one part or several, so that a split
// run taken warm corrects samples a cold start inflated (first-touch page faults, cold
// caches), and a kernel split from its first call is measured too.
Status RunTimedWorkers(int64_t workers, bool timed, MeasuredTime& measured,
                       const std::function<Status()>& worker) {
  if (!timed) return RunWorkers(workers, worker);
  std::atomic<int64_t> busy{0};
  Status status = RunWorkers(workers, [&] {
    const int64_t start = NowNanos();
    Status result = worker();
    busy.fetch_add(NowNanos() - start, std::memory_order_relaxed);
    return result;
  });
  if (status.ok()) measured.Record(busy.load(std::memory_order_relaxed));
  return status;
}

// Runs the fusion. A result written over an operand is computed block by block into
// scratch and copied out after the whole block ran: every read of the block's operand
// elements comes first, and blocks (whole rows) are independent, so the fusion is
// correct in place. Such a result must be a block or per-row view computed by a step
// (not a parameter passed through), which every result the fusion pass builds is;
// otherwise it goes through a temporary of its own.
Status RunFusion(KernelContext& ctx, const FusionSchedule& s) {
  if (s.n == 0) return Status();  // no elements (MakeSchedule)
  const Plan& body = *s.body;
  std::vector<int> buffered = ResultsOverOperands(ctx, body);
  for (int slot : buffered) {
    const bool is_param =
        std::find(body.params.begin(), body.params.end(), slot) != body.params.end();
    if (!is_param && s.view[slot] != View::kWhole) continue;
    // Rare: run with temporaries for every result, then copy them out.
    std::vector<std::shared_ptr<Storage>> temps(ctx.outs.size());
    std::vector<void*> targets(ctx.outs.size());
    for (size_t i = 0; i < ctx.outs.size(); ++i) {
      const int64_t bytes = ctx.outs[i].num_elements() * ByteWidth(ctx.outs[i].dtype);
      WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, std::max<int64_t>(bytes, 1), &temps[i]));
      targets[i] = ctx.outs[i].data;
      ctx.outs[i].data = temps[i]->data();
    }
    Status status = RunFusion(ctx, s);
    for (size_t i = 0; i < ctx.outs.size(); ++i) {
      ctx.outs[i].data = targets[i];
      if (status.ok()) {
        std::memcpy(targets[i], temps[i]->data(),
                    ctx.outs[i].num_elements() * ByteWidth(ctx.outs[i].dtype));
      }
    }
    return status;
  }
  const int64_t blocks = s.n == 0 ? 0 : (s.n + s.block - 1) / s.block;
  // One task per part the cost model gives the fusion's work, each taking batches of
  // `s.grain` blocks from a shared counter (a part that starts late does less).
  const int64_t batches = (blocks + s.grain - 1) / s.grain;
  const bool nested = in_horizontal_task;
  const int64_t workers =
      nested ? 1
             : std::min<int64_t>(ThreadPool::Global().PartsFor(s.work, kMinPartWork, s.measured),
                                 batches);
  std::atomic<int64_t> next{0};
  return RunTimedWorkers(workers, !nested && batches > 1 && MeasuredTime::Worth(s.work), s.measured,
                         [&] { return RunBlocks(ctx, body, s, buffered, blocks, next); });
}

Status Fusion(KernelContext& ctx) {
  const auto* schedule = static_cast<const FusionSchedule*>(ctx.instr.prepared.get());
  if (schedule == nullptr) return Internal("workshop: unprepared fusion at ", ctx.instr.loc);
  return RunFusion(ctx, *schedule);
}

WORKSHOP_REGISTER_KERNEL("fusion", .fn = Fusion, .writes_over_operands = true,
                         .prepare = PrepareFusion, .check = CheckBodySlots);

// jit_fusion: a fusion the code-generation tier compiled into one native function
// (compiler/codegen/fusions.py, docs/codegen.md "Code generation"). Attributes: those of
// `fusion` (body, row: the interpreter's fallback, prepared as above) plus backend, code,
// symbol, items (rows of row_length elements, or elements when row_length is 0) and work
// (element operations per item). The function, `void f(void** args, int64 begin, int64
// end)` with args = operand pointers then result pointers, computes items [begin, end);
// items are split over the thread pool in chunks of about kParallelGrain operations. If
// the generated code cannot be loaded (no Python or no llvmlite in this process: a
// deserialized executable), the body runs interpreted.
using FusedFn = void (*)(void* const* args, int64_t begin, int64_t end);

struct PreparedJitFusion {
  FusionSchedule fallback;
  GeneratedFunction fn;
  int64_t items = 0;
  int64_t grain = 1;  // Items per chunk.
  int64_t work = 1;   // Element operations per item.
  std::vector<int64_t> in_bytes, out_bytes;
  int64_t row_length = 0;
  mutable MeasuredTime measured;  // The function's time on one thread (not the fallback's).
};

Status PrepareJitFusion(Instr& instr) {
  auto prepared = std::make_shared<PreparedJitFusion>();
  FusionSchedule& s = prepared->fallback;
  s.body = instr.attr<std::shared_ptr<const Plan>>("body");
  if (s.body == nullptr) throw PlanError("null body");
  WORKSHOP_RETURN_IF_ERROR(MakeSchedule(instr, *s.body, &s));
  const Plan& body = *s.body;
  if (body.params.size() != instr.ins.size() || body.results.size() != instr.outs.size()) {
    throw PlanError("body does not match the fusion's operands and results");
  }
  for (int slot : body.params) prepared->in_bytes.push_back(body.slots[slot].byte_size());
  for (int slot : body.results) prepared->out_bytes.push_back(body.slots[slot].byte_size());
  prepared->items = instr.attr<int64_t>("items");
  const int64_t row = prepared->row_length = instr.attr<int64_t>("row_length");
  const int64_t work = instr.attr<int64_t>("work");
  // The items must cover the body's largest slot exactly (row_length 0: one per element).
  if (prepared->items < 0 || work < 1 || row < 0 ||
      prepared->items * std::max<int64_t>(row, 1) != s.n) {
    throw PlanError("jit_fusion items do not match its body");
  }
  prepared->grain = std::max<int64_t>(1, kParallelGrain / work);
  prepared->work = work;
  static std::atomic<bool> warned{false};  // Once per process: the fusions still run.
  prepared->fn = LoadGeneratedFunction(instr, "the " + instr.loc, warned);
  instr.prepared = std::move(prepared);
  return Status();
}

Status JitFusion(KernelContext& ctx) {
  const auto* prepared = static_cast<const PreparedJitFusion*>(ctx.instr.prepared.get());
  if (prepared == nullptr) return Internal("workshop: unprepared jit_fusion at ", ctx.instr.loc);
  if (prepared->fn.fn == nullptr) return RunFusion(ctx, prepared->fallback);
  if (!prepared->fn.Verify()) {
    return Internal("workshop: jit_fusion at ", ctx.instr.loc, ": the code at its function's ",
                    "address is not ", ctx.instr.attr<std::string>("symbol"),
                    " (its tag differs); not calling it");
  }
  // A flat fusion's code reads every lane of a chunk before writing any
  // (compiler/codegen/fusions.py `chunk`), so a result may be written over an operand; a
  // row fusion's later phases read operands again after results were stored: interpreted.
  if (prepared->row_length > 0 && !ResultsOverOperands(ctx, *prepared->fallback.body).empty()) {
    return RunFusion(ctx, prepared->fallback);
  }
  const size_t n_in = prepared->in_bytes.size(), n_out = prepared->out_bytes.size();
  if (ctx.ins.size() != n_in || ctx.outs.size() != n_out) {
    return Internal("workshop: jit_fusion at ", ctx.instr.loc, " operand or result count");
  }
  GeneratedArgs args(n_in + n_out);
  for (size_t i = 0; i < n_in; ++i) {
    if (ctx.ins[i].num_elements() * ByteWidth(ctx.ins[i].dtype) < prepared->in_bytes[i]) {
      return Internal("workshop: jit_fusion at ", ctx.instr.loc, " operand ", i, " is too small");
    }
    args[i] = ctx.ins[i].data;
  }
  for (size_t i = 0; i < n_out; ++i) {
    if (ctx.outs[i].num_elements() * ByteWidth(ctx.outs[i].dtype) < prepared->out_bytes[i]) {
      return Internal("workshop: jit_fusion at ", ctx.instr.loc, " result ", i, " is too small");
    }
    args[n_in + i] = ctx.outs[i].data;
  }
  const FusedFn fn = reinterpret_cast<FusedFn>(prepared->fn.fn);
  void* const* const arg_data = args.data();
  const int64_t items = prepared->items, grain = prepared->grain;
  // As the interpreted fusion: as many parts as the cost model gives the work, each
  // taking batches of `grain` items from a shared counter, so a thread that starts late
  // (a busy machine) does less, instead of the others waiting for its fixed share.
  const int64_t batches = (items + grain - 1) / grain;
  const int64_t work = items * prepared->work;
  const bool nested = in_horizontal_task;
  const int64_t workers =
      nested ? 1
             : std::min<int64_t>(
                   ThreadPool::Global().PartsFor(work, kMinPartWork, prepared->measured), batches);
  if (workers <= 1 && (nested || batches == 1 || !MeasuredTime::Worth(work))) {
    fn(arg_data, 0, items);
    return Status();
  }
  std::atomic<int64_t> next{0};
  return RunTimedWorkers(workers, true, prepared->measured, [&] {
    for (int64_t b; (b = next.fetch_add(1)) < batches;) {
      fn(arg_data, b * grain, std::min(items, (b + 1) * grain));
    }
    return Status();
  });
}

WORKSHOP_REGISTER_KERNEL("jit_fusion", .fn = JitFusion, .writes_over_operands = true,
                         .prepare = PrepareJitFusion, .check = CheckBodySlots);

// horizontal_fusion: independent small fusions run as one kernel (compiler/horizontal.py;
// XLA's horizontal loop fusion, and XLA:CPU's thunk executor running independent thunks
// concurrently). Attribute `body`: a sub-plan whose instructions are fusions and
// jit_fusions that read only the body's parameters and write only its results, each
// result once. Unfused, each member is one kernel call that runs on one thread (too little
// work for a part of its own: PartsFor) and costs its own dispatch; an optimizer update
// over 100 parameter arrays is 300 of them. Here, at prepare time, the items of each flat
// jit_fusion (no rows) are cut into tasks of about kParallelGrain element operations, and
// every other member with less work than a part (kMinPartWork) is one task that runs the
// member's kernel whole; one hand-off to the pool gives all tasks to as many parts as the
// members' total work pays for, each part taking the next task from a shared counter.
// Members with more work run after, one by one, each splitting itself over the pool.
//
// The kernel does not write over operands (no writes_over_operands): a result given the
// storage of another member's dying operand would be written while that member still reads
// it. A donated parameter whose result this kernel makes is then copied in (executor.cc).
struct HorizontalTask {
  int32_t member;
  int64_t begin, end;  // Items of a flat jit_fusion; -1, -1: the whole member.
};

struct PreparedHorizontal {
  std::shared_ptr<const Plan> body;
  // Per member: its instruction in `body`, the outer operand index of each of its operands
  // and the outer result index of each of its results, where its arguments start in the
  // per-call argument array (flat jit_fusions), and whether it runs as tasks of items.
  std::vector<const Instr*> members;
  std::vector<std::vector<int>> operand_of, result_of;
  std::vector<size_t> args_at;
  std::vector<bool> by_items;
  size_t num_args = 0;
  std::vector<HorizontalTask> tasks;
  std::vector<int32_t> alone;     // Members that split themselves, run after the tasks.
  int64_t work = 0;               // Element operations of the tasks.
  mutable MeasuredTime measured;  // The tasks' time on one thread.
};

Status PrepareHorizontal(Instr& instr) {
  auto prepared = std::make_shared<PreparedHorizontal>();
  prepared->body = instr.attr<std::shared_ptr<const Plan>>("body");
  if (prepared->body == nullptr) throw PlanError("null body");
  const Plan& body = *prepared->body;
  if (body.params.size() != instr.ins.size() || body.results.size() != instr.outs.size()) {
    throw PlanError("body does not match the fusion's operands and results");
  }
  std::vector<int> param_index(body.slots.size(), -1), result_index(body.slots.size(), -1);
  for (size_t i = 0; i < body.params.size(); ++i) param_index[body.params[i]] = static_cast<int>(i);
  for (size_t i = 0; i < body.results.size(); ++i) {
    if (result_index[body.results[i]] >= 0) throw PlanError("a body result returned twice");
    result_index[body.results[i]] = static_cast<int>(i);
  }
  std::vector<bool> written(body.results.size(), false);
  const KernelDef* jit_fusion = FindKernel("jit_fusion");
  const KernelDef* fusion = FindKernel("fusion");
  for (const Instr& member : body.instrs) {
    if ((member.kernel != jit_fusion && member.kernel != fusion) || member.prepared == nullptr) {
      throw PlanError("a member is not a prepared fusion or jit_fusion");
    }
    const int index = static_cast<int>(prepared->members.size());
    prepared->members.push_back(&member);
    prepared->args_at.push_back(prepared->num_args);
    std::vector<int>& ops = prepared->operand_of.emplace_back();
    for (int s : member.ins) {
      if (param_index[s] < 0) throw PlanError("a member reads a value another member makes");
      ops.push_back(param_index[s]);
    }
    std::vector<int>& res = prepared->result_of.emplace_back();
    for (int s : member.outs) {
      const int r = result_index[s];
      if (r < 0 || written[r]) throw PlanError("a member's value is not one result of the body");
      written[r] = true;
      res.push_back(r);
    }
    const auto* jit = member.kernel == jit_fusion
                          ? static_cast<const PreparedJitFusion*>(member.prepared.get())
                          : nullptr;
    const bool by_items = jit != nullptr && jit->row_length == 0;
    prepared->by_items.push_back(by_items);
    if (by_items) {
      prepared->num_args += member.ins.size() + member.outs.size();
      for (int64_t b = 0; b < jit->items; b += jit->grain) {
        prepared->tasks.push_back({index, b, std::min(jit->items, b + jit->grain)});
      }
      prepared->work += jit->items * jit->work;
      continue;
    }
    const FusionSchedule& s =
        jit != nullptr ? jit->fallback : *static_cast<const FusionSchedule*>(member.prepared.get());
    if (s.work >= kMinPartWork) {
      prepared->alone.push_back(index);
    } else {
      prepared->tasks.push_back({index, -1, -1});
      prepared->work += s.work;
    }
  }
  if (std::find(written.begin(), written.end(), false) != written.end()) {
    throw PlanError("a body result no member writes");
  }
  instr.prepared = std::move(prepared);
  return Status();
}

Status Horizontal(KernelContext& ctx) {
  const auto* h = static_cast<const PreparedHorizontal*>(ctx.instr.prepared.get());
  if (h == nullptr) return Internal("workshop: unprepared horizontal_fusion at ", ctx.instr.loc);
  if (ctx.ins.size() != h->body->params.size() || ctx.outs.size() != h->body->results.size()) {
    return Internal("workshop: horizontal_fusion at ", ctx.instr.loc, " operand or result count");
  }
  // A member run whole through its own kernel (interpreted fusions, row jit_fusions, and
  // every member when this process has no generated code).
  auto run_whole = [&](size_t m) -> Status {
    const Instr& member = *h->members[m];
    KernelContext member_ctx{member, {}, {}, ctx.launch, {}, {}};
    for (int i : h->operand_of[m]) member_ctx.ins.push_back(ctx.ins[i]);
    for (int r : h->result_of[m]) member_ctx.outs.push_back(ctx.outs[r]);
    return member.kernel->fn(member_ctx);
  };
  bool compiled = true;
  std::vector<FusedFn> fns(h->members.size(), nullptr);
  GeneratedArgs args(h->num_args);
  for (size_t m = 0; m < h->members.size(); ++m) {
    if (!h->by_items[m]) continue;
    const auto* p = static_cast<const PreparedJitFusion*>(h->members[m]->prepared.get());
    if (p->fn.fn == nullptr) {
      compiled = false;
      break;
    }
    if (!p->fn.Verify()) {
      return Internal("workshop: horizontal_fusion at ", ctx.instr.loc, ": the code of member ", m,
                      " is not ", h->members[m]->attr<std::string>("symbol"),
                      " (its tag differs); not calling it");
    }
    fns[m] = reinterpret_cast<FusedFn>(p->fn.fn);
    size_t a = h->args_at[m];
    // The sizes were checked when the plans were prepared: the outer slots against the
    // body's (plan.cc), the body's against each member's own body.
    for (int i : h->operand_of[m]) args[a++] = ctx.ins[i].data;
    for (int r : h->result_of[m]) args[a++] = ctx.outs[r].data;
  }
  if (!compiled) {  // No generated code in this process: each member on its own, as unfused.
    for (size_t m = 0; m < h->members.size(); ++m) WORKSHOP_RETURN_IF_ERROR(run_whole(m));
    return Status();
  }
  void* const* const arg_data = args.data();
  const std::vector<HorizontalTask>& tasks = h->tasks;
  auto run = [&](const HorizontalTask& t) -> Status {
    if (t.begin < 0) {
      const bool outer = in_horizontal_task;
      in_horizontal_task = true;
      Status status = run_whole(t.member);
      in_horizontal_task = outer;
      return status;
    }
    fns[t.member](arg_data + h->args_at[t.member], t.begin, t.end);
    return Status();
  };
  const int64_t parts =
      std::min<int64_t>(ThreadPool::Global().PartsFor(h->work, kMinPartWork, h->measured),
                        static_cast<int64_t>(tasks.size()));
  std::atomic<size_t> next{0};
  // A worker goes on taking tasks after one fails; the first error is returned.
  WORKSHOP_RETURN_IF_ERROR(
      RunTimedWorkers(parts, tasks.size() > 1 && MeasuredTime::Worth(h->work), h->measured, [&] {
        Status first;
        for (size_t k; (k = next.fetch_add(1)) < tasks.size();) {
          Status status = run(tasks[k]);
          if (first.ok()) first = std::move(status);
        }
        return first;
      }));
  for (int32_t m : h->alone) WORKSHOP_RETURN_IF_ERROR(run_whole(m));
  return Status();
}

WORKSHOP_REGISTER_KERNEL("horizontal_fusion", .fn = Horizontal, .prepare = PrepareHorizontal,
                         .check = CheckBodySlots);

}  // namespace
}  // namespace workshop
