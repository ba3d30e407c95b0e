// gather and scatter.
//
// Both walk the same structure, which the compiler derives from the dimension numbers
// (compiler/rules/gather_scatter.py) so that no dimension bookkeeping happens here: a *batch* of
// index vectors, each choosing where a *window* starts in the operand. Gather copies each
// window out of the operand into the result; scatter combines each window of the updates
// into a copy of the operand (or into the operand itself when the executor finds it dead:
// `reuses_operand0`). "io" below is the gather result or the scatter updates: it
// holds one window per batch position.
//
// Attributes (row-major element strides; see docs/plan.md):
//   batch_shape             sizes of the batch dims (the indices' dims but index_vector_dim)
//   batch_index_strides     indices' stride along each batch dim
//   batch_operand_strides   operand stride a batch dim adds when it is a batching dim, else 0
//   batch_strides           io's stride along each batch dim
//   index_vector_stride     indices' stride between the components of one index vector
//   start_strides           per index component: operand stride of the dim it selects
//   start_limits            per index component: the largest start whose window fits
//   window_shape            window dims, in io's order
//   window_strides          io's stride along each window dim
//   window_operand_strides  operand stride along each window dim
//
// Out-of-range starts follow XLA (and JAX's modes): gather clamps each start into
// [0, limit]; scatter drops the whole window of an update whose start is out of range.
// CheckWalk checks once that the largest offset each walk can reach lies inside its buffer,
// so the loops themselves need no checks.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/core/subplan.h"
#include "kernels/elementwise/element_ops.h"
#include "kernels/indexing/indices.h"
#include "kernels/math/half.h"
#include "kernels/math/simd.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// The attributes, by reference into the plan (reading one that is missing throws PlanError,
// which the executor reports), and the sizes CheckWalk derives from them.
struct Walk {
  explicit Walk(const Instr& instr)
      : batch_shape(instr.attr<IntList>("batch_shape")),
        batch_index_strides(instr.attr<IntList>("batch_index_strides")),
        batch_operand_strides(instr.attr<IntList>("batch_operand_strides")),
        batch_strides(instr.attr<IntList>("batch_strides")),
        index_vector_stride(instr.attr<int64_t>("index_vector_stride")),
        start_strides(instr.attr<IntList>("start_strides")),
        start_limits(instr.attr<IntList>("start_limits")),
        window_shape(instr.attr<IntList>("window_shape")),
        window_strides(instr.attr<IntList>("window_strides")),
        window_operand_strides(instr.attr<IntList>("window_operand_strides")) {}

  const IntList &batch_shape, &batch_index_strides, &batch_operand_strides, &batch_strides;
  const int64_t index_vector_stride;
  const IntList &start_strides, &start_limits;
  const IntList &window_shape, &window_strides, &window_operand_strides;
  int64_t batch_size = 0, window_size = 0;
};

// *acc += Σ (extent[i] - minus) * stride[i]: with minus = 1, the farthest offset a walk
// over `extent` reaches. False on overflow or a negative term.
bool AddSpan(const IntList& extent, const IntList& stride, int64_t minus, int64_t* acc) {
  for (size_t i = 0; i < extent.size(); ++i) {
    int64_t term;
    if (extent[i] - minus < 0 || stride[i] < 0 ||
        __builtin_mul_overflow(extent[i] - minus, stride[i], &term) ||
        __builtin_add_overflow(*acc, term, acc)) {
      return false;
    }
  }
  return true;
}

bool Product(const IntList& dims, int64_t* n) {
  *n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(*n, d, n)) return false;
  }
  return true;
}

// Sets the walk's sizes and checks that every offset it can reach lies in its buffer.
Status CheckWalk(const KernelContext& ctx, const Tensor& operand, const Tensor& indices,
                 const Tensor& io, Walk* w) {
  auto bad = [&](const char* why) {
    return InvalidArgument("workshop: ", ctx.instr.op, " of ",
                           ShapeString(operand.dtype, *operand.dims), " with indices ",
                           ShapeString(indices.dtype, *indices.dims), ": ", why, " at ",
                           ctx.instr.loc);
  };
  const size_t batch_rank = w->batch_shape.size();
  const size_t window_rank = w->window_shape.size();
  if (w->batch_index_strides.size() != batch_rank ||
      w->batch_operand_strides.size() != batch_rank || w->batch_strides.size() != batch_rank ||
      w->start_limits.size() != w->start_strides.size() ||
      w->window_strides.size() != window_rank || w->window_operand_strides.size() != window_rank) {
    return bad("attribute lengths disagree");
  }
  if (!Product(w->batch_shape, &w->batch_size) || !Product(w->window_shape, &w->window_size)) {
    return bad("negative or overflowing batch or window shape");
  }
  if (w->batch_size == 0 || w->window_size == 0) return Status();  // Touches nothing.
  int64_t last_index = 0, last_operand = 0, last_io = 0;
  const int64_t components = static_cast<int64_t>(w->start_strides.size());
  if (components > 0 && (!AddSpan(w->batch_shape, w->batch_index_strides, 1, &last_index) ||
                         !AddSpan({components}, {w->index_vector_stride}, 1, &last_index) ||
                         last_index >= indices.num_elements())) {
    return bad("index walk leaves the indices");
  }
  if (!AddSpan(w->start_limits, w->start_strides, 0, &last_operand) ||
      !AddSpan(w->batch_shape, w->batch_operand_strides, 1, &last_operand) ||
      !AddSpan(w->window_shape, w->window_operand_strides, 1, &last_operand) ||
      last_operand >= operand.num_elements()) {
    return bad("window walk leaves the operand");
  }
  if (!AddSpan(w->batch_shape, w->batch_strides, 1, &last_io) ||
      !AddSpan(w->window_shape, w->window_strides, 1, &last_io) || last_io >= io.num_elements()) {
    return bad("window walk leaves the result or updates");
  }
  return Status();
}

// Fills starts[p] with the operand offset of batch position p's window (row-major batch
// order): clamped into range (gather) or -1 when out of range (scatter drops it).
// `component[k]`: where index component k of the batch position at index offset 0 is
// (IndexComponents).
template <typename I>
void ComputeStarts(const Walk& w, const std::vector<const I*>& component, bool clamp,
                   int64_t* __restrict starts) {
  const I* indices = component[0];
  const size_t components = w.start_strides.size();
  std::vector<std::vector<int64_t>> strides = {w.batch_index_strides, w.batch_operand_strides};
  const std::vector<int64_t> dims = CollapseDims(w.batch_shape, strides);
  const int64_t n = dims.empty() ? 1 : dims.back();
  const int64_t index_step = dims.empty() ? 0 : strides[0].back();
  const int64_t operand_step = dims.empty() ? 0 : strides[1].back();
  if (components == 1 && dims.size() <= 1 && n >= 2 * kParallelGrain) {
    // One batch dim of one index each (segment_sum's 1M segment ids): ranges of it over
    // the pool.
    const int64_t limit = w.start_limits[0], stride = w.start_strides[0];
    ThreadPool::Global().ParallelFor(n, kParallelGrain, [&](int64_t first, int64_t end) {
      for (int64_t i = first; i < end; ++i) {
        int64_t v = IndexValue(indices[i * index_step]);
        if (v < 0 || v > limit) v = clamp ? ClampIndex(v, limit) : -1;
        starts[i] = v < 0 ? -1 : i * operand_step + v * stride;
      }
    });
    return;
  }
  ForEachRow(dims, strides, [&](const std::vector<int64_t>& offsets) {
    if (components == 1) {  // One index per window (x[idx], x.at[idx]): no component loop.
      const int64_t limit = w.start_limits[0], stride = w.start_strides[0];
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = IndexValue(indices[offsets[0] + i * index_step]);
        if (v < 0 || v > limit) v = clamp ? ClampIndex(v, limit) : -1;
        *starts++ = v < 0 ? -1 : offsets[1] + i * operand_step + v * stride;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = offsets[0] + i * index_step;
      int64_t start = offsets[1] + i * operand_step;
      for (size_t k = 0; k < components; ++k) {
        int64_t v = IndexValue(component[k][at]);
        if (v < 0 || v > w.start_limits[k]) {
          if (!clamp) {
            start = -1;
            break;
          }
          v = ClampIndex(v, w.start_limits[k]);
        }
        start += v * w.start_strides[k];
      }
      *starts++ = start;
    }
  });
}

// One operand offset per batch position; uninitialized until ComputeStarts fills it. In
// the memory pool's storage: a fresh allocation of this size (256 KiB for 32768 windows)
// is an mmap whose pages fault in on every call.
struct Starts {
  std::shared_ptr<Storage> storage;
  int64_t* data = nullptr;
  int64_t* get() const { return data; }
  int64_t operator[](int64_t p) const { return data[p]; }
};

// Where each index component is: component k of the batch position at index offset o is
// element o of the array at base[k], all of one integer dtype. One indices operand holds
// component k at k * index_vector_stride past the batch position's offset; a gather with
// `index_parts` K takes its K components as K operands of the batch shape (the compiler
// folds the concatenate of x[i, j]'s index arrays into the gather: idioms.py).
struct IndexSource {
  DType dtype;
  std::vector<const void*> base;

  template <typename I>
  std::vector<const I*> Typed() const {
    std::vector<const I*> typed;
    for (const void* b : base) typed.push_back(static_cast<const I*>(b));
    return typed;
  }
};

IndexSource FromIndices(const Walk& w, const Tensor& indices) {
  IndexSource src{indices.dtype, {}};
  const int64_t width = ByteWidth(indices.dtype);
  for (size_t k = 0; k < std::max<size_t>(w.start_strides.size(), 1); ++k) {
    src.base.push_back(static_cast<const char*>(indices.data) +
                       static_cast<int64_t>(k) * w.index_vector_stride * width);
  }
  return src;
}

Status ComputeStarts(const KernelContext& ctx, const Walk& w, const IndexSource& src, bool clamp,
                     Starts* starts) {
  WORKSHOP_RETURN_IF_ERROR(
      AllocateFor(ctx, w.batch_size * int64_t{sizeof(int64_t)}, &starts->storage));
  starts->data = static_cast<int64_t*>(starts->storage->data());
  return DispatchInt(
      src.dtype,
      [&](auto tag) -> Status {
        ComputeStarts(w, src.Typed<decltype(tag)>(), clamp, starts->get());
        return Status();
      },
      [&] {
        return InvalidArgument("workshop: ", ctx.instr.op, " expects integer indices, got ",
                               DTypeName(src.dtype), " at ", ctx.instr.loc);
      });
}

// The window as rows: row r starts at io offset io[r] and operand offset operand[r] and
// has n elements, io_step and operand_step apart. Computed once per launch, so walking a
// window per batch position costs no allocation or odometer.
struct WindowRows {
  std::vector<int64_t> io, operand;
  int64_t n = 1, io_step = 0, operand_step = 0;
};

WindowRows MakeWindowRows(const Walk& w) {
  std::vector<std::vector<int64_t>> strides = {w.window_strides, w.window_operand_strides};
  const std::vector<int64_t> dims = CollapseDims(w.window_shape, strides);
  WindowRows rows;
  if (!dims.empty()) {
    rows.n = dims.back();
    rows.io_step = strides[0].back();
    rows.operand_step = strides[1].back();
  }
  ForEachRow(dims, strides, [&](const std::vector<int64_t>& offsets) {
    rows.io.push_back(offsets[0]);
    rows.operand.push_back(offsets[1]);
  });
  return rows;
}

// Calls fn(io_offset, operand_offset) for each batch position whose start is not dropped.
template <typename Fn>
void ForEachWindow(const Walk& w, const Starts& starts, Fn&& fn) {
  std::vector<std::vector<int64_t>> strides = {w.batch_strides};
  const std::vector<int64_t> dims = CollapseDims(w.batch_shape, strides);
  const int64_t n = dims.empty() ? 1 : dims.back();
  const int64_t step = dims.empty() ? 0 : strides[0].back();
  const int64_t* start = starts.get();
  ForEachRow(dims, strides, [&](const std::vector<int64_t>& offsets) {
    for (int64_t i = 0; i < n; ++i, ++start) {
      if (*start >= 0) fn(offsets[0] + i * step, *start);
    }
  });
}

// Windows that are one dense run of n >= 2 elements (rows: x[idx] and x.at[idx] on an
// embedding table) at io offset p * io_step for batch position p. Loops over them index
// by position, so they can look ahead.
struct RowWindows {
  int64_t n = 0, io_step = 0;
};

bool AsRowWindows(const Walk& w, const WindowRows& rows, RowWindows* out) {
  if (rows.io.size() != 1 || rows.n < 2 || rows.io_step != 1 || rows.operand_step != 1) {
    return false;
  }
  std::vector<std::vector<int64_t>> strides = {w.batch_strides};
  const std::vector<int64_t> dims = CollapseDims(w.batch_shape, strides);
  if (dims.size() > 1) return false;
  out->n = rows.n;
  out->io_step = dims.empty() ? 0 : strides[0].back();
  return true;
}

// How many windows ahead the row loops prefetch, and how much of each row: rows at random
// places defeat the hardware prefetcher, and a scatter-add otherwise waits on each one
// (65536 rows of 128 f32 into 8192x128: 2.9 ms without, 1.7 ms with, measured). The
// hardware follows a longer row by itself once it has started.
constexpr int64_t kLookahead = 4;
constexpr int64_t kPrefetchBytes = 512;

template <bool kForWrite>
void PrefetchRow(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t b = 0; b < std::min(bytes, kPrefetchBytes); b += 64) {
    __builtin_prefetch(p + b, kForWrite ? 1 : 0, 3);
  }
}

// Row p of the result is the operand's row at starts[p] (clamped, so never -1). Result rows
// are independent, so ranges of them split over the pool (8192 rows of 512 bytes: 215 µs
// on one thread, at memcpy speed, against XLA:CPU's 120 µs on two).
template <typename T>
void GatherRows(const RowWindows& r, int64_t batch, const Starts& starts, const T* operand,
                T* out) {
  const int64_t bytes = r.n * int64_t{sizeof(T)};
  KernelWork work;  // Read and written.
  work.bytes = r.io_step == 0 ? 0.0 : 2.0 * batch * bytes;
  ThreadPool::Global().ParallelFor(batch, work, [&](int64_t first, int64_t end) {
    for (int64_t p = first; p < end; ++p) {
      if (p + kLookahead < end) PrefetchRow<false>(operand + starts[p + kLookahead], bytes);
      std::memcpy(out + p * r.io_step, operand + starts[p], bytes);
    }
  });
}

// Calls fn(std::integral_constant<int64_t, B>) with B = `bytes` when a row of that many
// bytes is a common short one (8 to 256), else with B = 0 (the length known at run time
// only). A copy or combine of a constant length compiles to a few vector moves, where a
// libc memcpy call per 64-byte row was as costly as the rest of the row gather.
template <typename Fn>
void WithRowBytes(int64_t bytes, Fn&& fn) {
  switch (bytes) {
    case 8: return fn(std::integral_constant<int64_t, 8>{});
    case 16: return fn(std::integral_constant<int64_t, 16>{});
    case 32: return fn(std::integral_constant<int64_t, 32>{});
    case 64: return fn(std::integral_constant<int64_t, 64>{});
    case 128: return fn(std::integral_constant<int64_t, 128>{});
    case 256: return fn(std::integral_constant<int64_t, 256>{});
    default: return fn(std::integral_constant<int64_t, 0>{});
  }
}

// A row scatter on several threads splits the result's rows, not the windows: each part
// owns interleaved groups of kOwnerRows rows (so rows that many indices hit spread out),
// scans all starts, and applies, in batch order, the windows that land in its rows. Every
// row then sees its updates in the same order as on one thread, so the bits do not depend
// on the thread count, and each part reads only its own updates.
constexpr int64_t kOwnerRows = 16;
// Batch positions a part collects before applying them: its list of them stays in L1.
constexpr int64_t kOwnerScan = 2048;

// dst[0, n) = combine(dst, src), elementwise; n is kN when kN > 0 (WithRowBytes). Not
// unrolled: GCC otherwise unrolls a constant trip count fully before vectorizing and leaves
// scalar adds (16 vaddss for a row of 16 f32, where the loop is two vaddps). A GCN layer's
// segment_sum of 32768 rows of 16 f32 into 4096, one thread of the 2-core VM: 218 -> 85 µs
// (XLA:CPU 99-134).
template <int64_t kN, typename T, typename Combine>
inline void CombineRow(T* __restrict dst, const T* __restrict src, int64_t n, Combine combine) {
  const int64_t count = kN > 0 ? kN : n;
#pragma GCC unroll 1
  for (int64_t i = 0; i < count; ++i) dst[i] = combine(dst[i], src[i]);
}

// The windows of batch positions `list[0, count)` (in that order), prefetching ahead.
template <int64_t kN, typename T, typename Combine>
WORKSHOP_SIMD_CLONES void ScatterListed(int64_t n, int64_t io_step, const int32_t* list,
                                        int64_t count, const int64_t* starts, const T* updates,
                                        T* out, Combine combine) {
  const int64_t bytes = n * int64_t{sizeof(T)};
  for (int64_t k = 0; k < count; ++k) {
    if (k + kLookahead < count) {
      const int64_t ahead = list[k + kLookahead];
      PrefetchRow<true>(out + starts[ahead], bytes);
      PrefetchRow<false>(updates + ahead * io_step, bytes);
    }
    const int64_t p = list[k];
    CombineRow<kN>(out + starts[p], updates + p * io_step, n, combine);
  }
}

// Every window of `batch`, in batch order, into the rows at `starts` (-1: dropped).
template <int64_t kN, typename T, typename Combine>
WORKSHOP_SIMD_CLONES void ScatterInOrder(int64_t n, int64_t io_step, int64_t batch,
                                         const int64_t* start, const T* updates, T* out,
                                         Combine combine) {
  const int64_t bytes = n * int64_t{sizeof(T)};
  for (int64_t p = 0; p < batch; ++p) {
    // Only the result's rows: the updates are read in order, which the hardware
    // prefetcher follows (32768 rows of 16 f32 into 4096: 153 -> 135 µs, one thread).
    if (p + kLookahead < batch && start[p + kLookahead] >= 0) {
      PrefetchRow<true>(out + start[p + kLookahead], bytes);
    }
    if (start[p] >= 0) CombineRow<kN>(out + start[p], updates + p * io_step, n, combine);
  }
}

// Windows apply in batch order, so for duplicate indices later updates see earlier ones
// (what "set" keeps is the last one, as on XLA:CPU). A start of -1 is a dropped window.
// `row` is the result's row length when every window is a whole row of it (then each
// start is a multiple of n, and no two rows' windows overlap), else 0: one thread.
// Each part collects its own batch positions branch-free, kOwnerScan at a time, and walks
// only those (reading only its own updates, so large scatters split too); it used to walk
// every window and branch on its owner: 32768 windows of 64 B into 4096x16 f32 (a GCN
// layer's segment_sum) on two threads of the loaded 2-core VM, 577-632 -> 275-281 µs.
template <typename T, typename Combine>
Status ScatterRows(const KernelContext& ctx, const RowWindows& r, int64_t batch, int64_t row,
                   const Starts& starts, const T* updates, T* out, Combine combine) {
  const int64_t bytes = r.n * int64_t{sizeof(T)};
  KernelWork work;  // The updates, read once; the rows they add into are mostly in cache.
  work.bytes = static_cast<double>(batch) * static_cast<double>(bytes);
  const int64_t parts = row == r.n && batch < (int64_t{1} << 31)
                            ? std::min<int64_t>(ThreadPool::Global().PartsFor(work), batch)
                            : 1;
  // Rows of a common length combine as constants (WithRowBytes).
  auto with_row_length = [&](auto fn) {
    WithRowBytes(bytes, [&](auto constant) {
      fn(std::integral_constant<int64_t, decltype(constant)::value / int64_t{sizeof(T)}>{});
    });
  };
  if (parts == 1) {  // Every window, in batch order: no lists.
    with_row_length([&](auto length) {
      ScatterInOrder<decltype(length)::value>(r.n, r.io_step, batch, starts.get(), updates, out,
                                              combine);
    });
    return Status();
  }
  std::shared_ptr<Storage> lists;
  WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, parts * kOwnerScan * int64_t{sizeof(int32_t)}, &lists));
  // Groups of 2^shift >= kOwnerRows * n elements; a group may start inside a row, but
  // every window of a row has the same start, so the same owner.
  int shift = 0;
  while ((int64_t{1} << shift) < kOwnerRows * r.n) ++shift;
  const int64_t* start = starts.get();
  auto run = [&](int64_t part) {
    int32_t* list = static_cast<int32_t*>(lists->data()) + part * kOwnerScan;
    for (int64_t lo = 0; lo < batch; lo += kOwnerScan) {
      const int64_t hi = std::min(batch, lo + kOwnerScan);
      int64_t count = 0;
      for (int64_t p = lo; p < hi; ++p) {  // Branch-free: owners are random.
        // Fibonacci hashing of the group onto [0, parts): hot neighbouring rows spread.
        const uint64_t group = static_cast<uint64_t>(start[p]) >> shift;
        const uint64_t hash = (group * 0x9E3779B9u) & 0xFFFFFFFFu;
        const int64_t owner = static_cast<int64_t>((hash * static_cast<uint64_t>(parts)) >> 32);
        list[count] = static_cast<int32_t>(p);
        count += (start[p] >= 0) & (owner == part);
      }
      with_row_length([&](auto length) {
        ScatterListed<decltype(length)::value>(r.n, r.io_step, list, count, start, updates, out,
                                               combine);
      });
    }
  };
  ThreadPool::Global().ParallelFor(parts, 1, [&](int64_t first, int64_t end) {
    for (int64_t part = first; part < end; ++part) run(part);
  });
  return Status();
}

// Row gathers of one index per row along one batch run (x[idx] of an embedding table or of
// node features, the gather side of a GNN's message passing): each index read, clamped and
// its row copied in one pass, without the starts array and second walk of the general path
// (GatherRows), and with rows of a common length copied as constants (WithRowBytes). 32768
// rows of 16 f32 from 4096, one thread of the 2-core VM: about 173 -> 138 µs.
// False when the walk is not of that form.
template <typename T, typename I>
bool GatherRowsDirect(const Walk& w, const WindowRows& rows, const std::vector<const I*>& component,
                      const T* operand, T* out) {
  if (w.start_strides.size() != 1 || rows.io.size() != 1 || rows.n < 2 || rows.io_step != 1 ||
      rows.operand_step != 1) {
    return false;
  }
  std::vector<std::vector<int64_t>> strides = {w.batch_index_strides, w.batch_operand_strides,
                                               w.batch_strides};
  const std::vector<int64_t> dims = CollapseDims(w.batch_shape, strides);
  if (dims.size() > 1) return false;
  const int64_t batch = dims.empty() ? 1 : dims[0];
  const int64_t index_step = dims.empty() ? 0 : strides[0][0];
  const int64_t operand_step = dims.empty() ? 0 : strides[1][0];
  const int64_t out_step = dims.empty() ? 0 : strides[2][0];
  const int64_t limit = w.start_limits[0], stride = w.start_strides[0];
  const I* indices = component[0];
  const T* base = operand + rows.operand[0];
  T* out_base = out + rows.io[0];
  const int64_t bytes = rows.n * int64_t{sizeof(T)};
  KernelWork work;  // Read and written.
  work.bytes = out_step == 0 ? 0.0 : 2.0 * static_cast<double>(batch * bytes);
  WithRowBytes(bytes, [&](auto constant) {
    constexpr int64_t kBytes = decltype(constant)::value;
    ThreadPool::Global().ParallelFor(batch, work, [&](int64_t first, int64_t end) {
      auto row = [&](int64_t p) {
        return base + p * operand_step +
               ClampIndex(IndexValue(indices[p * index_step]), limit) * stride;
      };
      for (int64_t p = first; p < end; ++p) {
        if (p + kLookahead < end) PrefetchRow<false>(row(p + kLookahead), bytes);
        std::memcpy(out_base + p * out_step, row(p), kBytes > 0 ? kBytes : bytes);
      }
    });
  });
  return true;
}

template <typename T>
void GatherWindows(const Walk& w, const WindowRows& rows, const Starts& starts, const T* operand,
                   T* out) {
  const int64_t n = rows.n;
  if (RowWindows r; AsRowWindows(w, rows, &r)) {
    GatherRows(r, w.batch_size, starts, operand, out);
    return;
  }
  const bool dense = rows.io_step == 1 && rows.operand_step == 1;
  if (rows.io.size() == 1 && n == 1) {  // Element gathers (take_along_axis): no row loop.
    ForEachWindow(w, starts, [&](int64_t io, int64_t start) { out[io] = operand[start]; });
    return;
  }
  ForEachWindow(w, starts, [&](int64_t io, int64_t start) {
    for (size_t r = 0; r < rows.io.size(); ++r) {
      T* __restrict dst = out + io + rows.io[r];
      const T* __restrict src = operand + start + rows.operand[r];
      if (dense) {
        std::memcpy(dst, src, n * sizeof(T));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i * rows.io_step] = src[i * rows.operand_step];
      }
    }
  });
}

// Scatter-add of many updates into a small result (jax.ops.segment_sum of a vector or of
// rows, x.at[idx].add), over the pool, reading the indices directly (no starts array: for
// 1M segment ids that array was more traffic than the scatter). Each window is one dense run
// of n elements (n = 1: single elements). The updates are cut into fixed chunks of
// kScatterChunk elements, each summed into a zeroed private copy of the result, and the
// copies are added into the result in chunk order. The chunks depend on the shape only, so
// the bits do not depend on the thread count; each element's sum is blocked (a chunk's
// running sum, then one add per chunk), which rounds less than one running sum over all
// updates. A k-means step's segment_sum of 20000 rows of 16 f32 into 64 took 140 us on one
// thread of the 2-core VM (XLA:CPU 52) and ran on one thread on the 13-core host.
constexpr int64_t kScatterChunk = 1 << 16;
// Largest result copied per chunk: a quarter of a chunk's updates, so that zeroing and
// combining the copies costs less than the scatter.
constexpr int64_t kScatterPrivateMax = kScatterChunk / 4;

// The walk of a chunked scatter-add: batch position p's window of n elements starts at
// updates[p * update_step + io_offset] and lands at out[p * operand_step + v * stride +
// operand_offset] for index v = indices[p * index_step] in [0, limit].
struct ChunkedAdd {
  int64_t batch = 0, n = 1, index_step = 0, operand_step = 0, update_step = 0;
  int64_t io_offset = 0, operand_offset = 0, limit = 0, stride = 0;
};

// acc += the windows of batch positions [lo, hi). In AVX2 too: a row of 16 f32 is then two
// adds, not four.
template <typename T, typename I, typename Op>
WORKSHOP_SIMD_CLONES void AddChunk(const ChunkedAdd& c, const I* indices, const T* updates, T* acc,
                                   int64_t lo, int64_t hi, Op op) {
  for (int64_t p = lo; p < hi; ++p) {
    const int64_t v = IndexValue(indices[p * c.index_step]);
    if (v < 0 || v > c.limit) continue;  // Out of range: the window is dropped.
    T* __restrict dst = acc + p * c.operand_step + v * c.stride + c.operand_offset;
    const T* __restrict src = updates + p * c.update_step + c.io_offset;
    if (c.n == 1) {
      *dst = op(*dst, *src);
    } else {
      for (int64_t j = 0; j < c.n; ++j) dst[j] = op(dst[j], src[j]);
    }
  }
}

// The identity of +: -0 for floats and complex parts (-0 + -0 is -0; +0 would turn an
// element of -0 that no update reaches into +0), 0 for integers.
template <typename T>
T AddIdentity() {
  if constexpr (std::is_floating_point_v<T>) {
    return -T(0);
  } else if constexpr (kIsComplex<T>) {
    using R = typename T::value_type;
    return T(-R(0), -R(0));
  } else {
    return T(0);
  }
}

// The identity of a chunked scatter's combiner: op(identity, u) is u, bits included.
// maximum keeps its first operand on ties and takes the first NaN (elementwise.cc), so
// -inf (the least integer) gives way to every update, -inf itself with the same bits.
template <typename T, typename Op>
T ChunkIdentity() {
  if constexpr (std::is_same_v<Op, Add>) {
    return AddIdentity<T>();
  } else if constexpr (std::is_same_v<Op, Maximum>) {
    return std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity()
                                       : std::numeric_limits<T>::lowest();
  } else {
    static_assert(std::is_same_v<Op, Minimum>, "a chunked scatter of another combiner");
    return std::is_floating_point_v<T> ? std::numeric_limits<T>::infinity()
                                       : std::numeric_limits<T>::max();
  }
}

template <typename T, typename I, typename Op>
Status ScatterAddChunked(const KernelContext& ctx, const ChunkedAdd& c, const I* indices,
                         const T* updates, T* out, int64_t out_elements, Op op) {
  const int64_t per_chunk = std::max<int64_t>(1, kScatterChunk / c.n);  // Windows.
  const int64_t chunks = (c.batch + per_chunk - 1) / per_chunk;
  // From the memory pool, as the starts are: a fresh allocation of this size is an mmap
  // whose pages fault in on every call.
  std::shared_ptr<Storage> storage;
  WORKSHOP_RETURN_IF_ERROR(
      AllocateFor(ctx, chunks * out_elements * static_cast<int64_t>(sizeof(T)), &storage));
  T* const partial = static_cast<T*>(storage->data());
  KernelWork work;  // The updates, read once; each chunk's copy zeroed and read back.
  work.bytes = static_cast<double>(c.batch * c.n + 2 * chunks * out_elements) * sizeof(T);
  ThreadPool::Global().ParallelFor(chunks, work, [&](int64_t first, int64_t end) {
    for (int64_t k = first; k < end; ++k) {
      T* acc = partial + k * out_elements;
      std::fill(acc, acc + out_elements, ChunkIdentity<T, Op>());
      AddChunk(c, indices, updates, acc, k * per_chunk, std::min(c.batch, (k + 1) * per_chunk), op);
    }
  });
  ThreadPool::Global().ParallelFor(out_elements, std::max<int64_t>(1, kParallelGrain / chunks),
                                   [&](int64_t first, int64_t end) {
                                     for (int64_t e = first; e < end; ++e) {
                                       T sum = partial[e];
                                       for (int64_t k = 1; k < chunks; ++k)
                                         sum = op(sum, partial[k * out_elements + e]);
                                       out[e] = op(out[e], sum);
                                     }
                                   });
  return Status();
}

// Runs an "add", "maximum" or "minimum" scatter by AddChunk (one chunk) or
// ScatterAddChunked (two or more, into a small result) when its walk fits: one index per
// window, each window one dense run, the batch one strided dim. *done says whether it ran.
// maximum and minimum are exact in any bracketing that keeps the updates in order (the
// first of equal values and the first NaN win), so the chunks give the sequential bits
// (jax.ops.segment_max of 100000 rows of 8 into 100: 4x XLA:CPU's time through the
// general walk).
Status TryScatterAddChunked(const KernelContext& ctx, const Walk& w, const Tensor& indices,
                            const Tensor& updates, const Tensor& out, const std::string& body,
                            bool* done) {
  *done = false;
  if (w.start_strides.size() != 1) return Status();
  ChunkedAdd c;
  if (w.window_size > 1) {
    const WindowRows rows = MakeWindowRows(w);
    if (rows.io.size() != 1 || rows.io_step != 1 || rows.operand_step != 1) return Status();
    c.n = rows.n;
    c.io_offset = rows.io[0];
    c.operand_offset = rows.operand[0];
  }
  // One chunk is added straight into the result, in batch order: what the ordered paths
  // below do (the same bits), without their starts array. Two or more need a small result;
  // they take the chunks on one thread too, so the bits do not depend on the thread count.
  const int64_t per_chunk = std::max<int64_t>(1, kScatterChunk / c.n);
  const bool one_chunk = w.batch_size <= per_chunk;
  if (!one_chunk && out.num_elements() > kScatterPrivateMax) return Status();
  std::vector<std::vector<int64_t>> strides = {w.batch_index_strides, w.batch_operand_strides,
                                               w.batch_strides};
  const std::vector<int64_t> dims = CollapseDims(w.batch_shape, strides);
  if (dims.size() != 1) return Status();
  c.batch = dims[0];
  c.index_step = strides[0][0];
  c.operand_step = strides[1][0];
  c.update_step = strides[2][0];
  c.limit = w.start_limits[0];
  c.stride = w.start_strides[0];
  auto run = [&](auto op) -> Status {
    using Op = decltype(op);
    return DispatchAllOrComplex(
        out.dtype,
        [&](auto tag) -> Status {
          using T = decltype(tag);
          constexpr bool kOrdered = std::is_same_v<Op, Add> || std::is_arithmetic_v<T>;
          if constexpr (!std::is_same_v<T, bool> && kOrdered && Op::template kSupports<T>) {
            return DispatchInt(
                indices.dtype,
                [&](auto index_tag) -> Status {
                  *done = true;
                  if (one_chunk) {
                    AddChunk(c, indices.as<decltype(index_tag)>(), updates.as<T>(), out.as<T>(), 0,
                             c.batch, op);
                    return Status();
                  }
                  return ScatterAddChunked(ctx, c, indices.as<decltype(index_tag)>(),
                                           updates.as<T>(), out.as<T>(), out.num_elements(), op);
                },
                [] { return Status(); });  // ComputeStarts reports the index dtype.
          } else {
            return Status();
          }
        },
        [] { return Status(); });
  };
  if (body == "add") return run(Add{});
  if (body == "maximum") return run(Maximum{});
  if (body == "minimum") return run(Minimum{});
  return Status();
}

// Windows apply in batch order, as in ScatterRows.
// `out` is the result: windows as long as its last dim are whole rows of it (a window of
// n dense elements cannot start inside a row of n).
template <typename T, typename Combine>
Status ScatterWindows(const KernelContext& ctx, const Walk& w, const WindowRows& rows,
                      const Starts& starts, const T* updates, const Tensor& out_tensor,
                      Combine combine) {
  const int64_t n = rows.n;
  T* out = out_tensor.as<T>();
  if (RowWindows r; AsRowWindows(w, rows, &r)) {
    const int64_t row = out_tensor.dims->empty() ? 0 : out_tensor.dims->back();
    return ScatterRows(ctx, r, w.batch_size, row, starts, updates, out, combine);
  }
  const bool dense = rows.io_step == 1 && rows.operand_step == 1;
  if (rows.io.size() == 1 && n == 1) {
    ForEachWindow(w, starts, [&](int64_t io, int64_t start) {
      out[start] = combine(out[start], updates[io]);
    });
    return Status();
  }
  ForEachWindow(w, starts, [&](int64_t io, int64_t start) {
    for (size_t r = 0; r < rows.io.size(); ++r) {
      T* __restrict dst = out + start + rows.operand[r];
      const T* __restrict src = updates + io + rows.io[r];
      if (dense) {
        for (int64_t i = 0; i < n; ++i) dst[i] = combine(dst[i], src[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          T& d = dst[i * rows.operand_step];
          d = combine(d, src[i * rows.io_step]);
        }
      }
    }
  });
  return Status();
}

// Element gathers of one index per result element along one batch run (x[idx] on a
// vector, a column of a matrix, searchsorted's probes): one pass reading each index and
// writing its element, without the offsets array and second walk of the general path
// (a 4096-element gather of f32 took 13 µs that way, three quarters of it the walk).
// False when the walk is not of that form. Large runs split over the pool.
// Up to kMaxElementIndex index components (img[y, x]: two) are read per element; more
// take the general walk.
constexpr size_t kMaxElementIndex = 4;

template <typename T, typename I>
bool GatherElements(const Walk& w, const std::vector<const I*>& component, const T* operand,
                    T* out) {
  const size_t components = w.start_strides.size();
  if (components < 1 || components > kMaxElementIndex || w.window_size != 1) return false;
  std::vector<std::vector<int64_t>> strides = {w.batch_index_strides, w.batch_operand_strides,
                                               w.batch_strides};
  // One batch dim, or two (take_along_axis: rows of the operand, and positions in each
  // row, whose index and operand strides do not merge).
  const std::vector<int64_t> dims = CollapseDims(w.batch_shape, strides);
  if (dims.size() > 2) return false;
  const int64_t n = dims.empty() ? 1 : dims.back();
  const int64_t rows = dims.size() == 2 ? dims[0] : 1;
  const int64_t index_step = dims.empty() ? 0 : strides[0].back();
  const int64_t operand_step = dims.empty() ? 0 : strides[1].back();
  const int64_t out_step = dims.empty() ? 0 : strides[2].back();
  const int64_t index_row = dims.size() == 2 ? strides[0][0] : 0;
  const int64_t operand_row = dims.size() == 2 ? strides[1][0] : 0;
  const int64_t out_row = dims.size() == 2 ? strides[2][0] : 0;
  const int64_t limit = w.start_limits[0], stride = w.start_strides[0];
  // Elements [first, end) of row r.
  auto run_row = [&](int64_t r, int64_t first, int64_t end) {
    const T* src = operand + r * operand_row;
    T* dst = out + r * out_row;
    if (components == 1) {
      const I* idx = component[0] + r * index_row;
      for (int64_t i = first; i < end; ++i) {
        const int64_t v = ClampIndex(IndexValue(idx[i * index_step]), limit);
        dst[i * out_step] = src[i * operand_step + v * stride];
      }
      return;
    }
    // Each component clamped on its own, as ComputeStarts clamps a start.
    const I* idx[kMaxElementIndex];
    for (size_t d = 0; d < components; ++d) idx[d] = component[d] + r * index_row;
    for (int64_t i = first; i < end; ++i) {
      int64_t at = i * operand_step;
      for (size_t d = 0; d < components; ++d) {
        const int64_t v = IndexValue(idx[d][i * index_step]);
        at += ClampIndex(v, w.start_limits[d]) * w.start_strides[d];
      }
      dst[i * out_step] = src[at];
    }
  };
  // The index components read and the element written stream; the element read lands at
  // random, so it moves a cache line. Counted as such, the cost model splits a gather of
  // 100000 points (img[y, x]) where one thread took 5 ns an element on the 13-core host.
  constexpr double kLineBytes = 64;
  KernelWork work;
  work.bytes = (static_cast<double>(components) * sizeof(I) + sizeof(T) + kLineBytes) *
               static_cast<double>(rows * n);
  ThreadPool& pool = ThreadPool::Global();
  if (rows == 1) {
    pool.ParallelFor(n, work, [&](int64_t first, int64_t end) { run_row(0, first, end); });
  } else {
    pool.ParallelFor(rows, work, [&](int64_t first, int64_t end) {
      for (int64_t r = first; r < end; ++r) run_row(r, 0, n);
    });
  }
  return true;
}

// gather(operand, indices) -> result; with attribute `index_parts` K, gather(operand,
// part_0, ..., part_{K-1}) where part k holds index component k (IndexSource).
Status Gather(KernelContext& ctx) {
  const Tensor& operand = ctx.ins[0];
  const Tensor& indices = ctx.ins[1];
  const Tensor& out = ctx.outs[0];
  if (out.dtype != operand.dtype) return UnsupportedDType(ctx, out.dtype);
  Walk w(ctx.instr);
  const auto parts_attr = ctx.instr.attrs.find("index_parts");
  const int64_t parts =
      parts_attr == ctx.instr.attrs.end() ? 0 : ctx.instr.attr<int64_t>("index_parts");
  if (parts != 0) {
    // The parts share a dtype and a shape; the walk checks the first, with no vector step.
    bool same = parts == static_cast<int64_t>(w.start_strides.size()) && parts >= 2 &&
                static_cast<int64_t>(ctx.ins.size()) == 1 + parts && w.index_vector_stride == 0;
    for (int64_t k = 2; same && k <= parts; ++k) {
      same = ctx.ins[k].dtype == indices.dtype && *ctx.ins[k].dims == *indices.dims;
    }
    if (!same) {
      return InvalidArgument("workshop: gather with ", parts,
                             " index parts needs as many components, one operand each, of one "
                             "dtype and shape, at ",
                             ctx.instr.loc);
    }
  } else if (ctx.ins.size() != 2) {
    return InvalidArgument("workshop: gather takes (operand, indices) at ", ctx.instr.loc);
  }
  Status s = CheckWalk(ctx, operand, indices, out, &w);
  if (!s.ok() || w.batch_size == 0 || w.window_size == 0) return s;
  IndexSource src = FromIndices(w, indices);
  if (parts != 0) {
    src.base.clear();
    for (int64_t k = 1; k <= parts; ++k) src.base.push_back(ctx.ins[k].data);
  }
  bool done = false;
  const WindowRows rows = MakeWindowRows(w);
  DispatchInt(
      src.dtype,
      [&](auto index_tag) {
        using I = decltype(index_tag);
        const std::vector<const I*> component = src.Typed<I>();
        DispatchByteWidth(
            ByteWidth(operand.dtype),
            [&](auto tag) {
              using T = decltype(tag);
              done = GatherElements(w, component, operand.as<T>(), out.as<T>()) ||
                     GatherRowsDirect(w, rows, component, operand.as<T>(), out.as<T>());
            },
            [] {});
      },
      [] {});
  if (done) return Status();
  Starts starts;
  s = ComputeStarts(ctx, w, src, /*clamp=*/true, &starts);
  if (!s.ok()) return s;
  return DispatchByteWidth(
      ByteWidth(operand.dtype),
      [&](auto tag) -> Status {
        using T = decltype(tag);
        GatherWindows(w, rows, starts, operand.as<T>(), out.as<T>());
        return Status();
      },
      [&] { return UnsupportedDType(ctx, operand.dtype); });
}

// scatter(operand, indices, updates) -> operand with the updates combined in by `body`:
// "set" (the update replaces the element) or a DispatchReducer combiner.
Status Scatter(KernelContext& ctx) {
  const Tensor& operand = ctx.ins[0];
  const Tensor& indices = ctx.ins[1];
  const Tensor& updates = ctx.ins[2];
  const Tensor& out = ctx.outs[0];
  const std::string& body = ctx.instr.attr<std::string>("body");
  if (out.dtype != operand.dtype || updates.dtype != operand.dtype || *out.dims != *operand.dims) {
    return InvalidArgument("workshop: scatter of ", ShapeString(operand.dtype, *operand.dims),
                           " with updates ", ShapeString(updates.dtype, *updates.dims),
                           " cannot produce ", ShapeString(out.dtype, *out.dims), " at ",
                           ctx.instr.loc);
  }
  const int64_t width = ByteWidth(operand.dtype);
  if (out.data != operand.data) {  // Else the executor gave us the operand to update.
    StridedCopy(out.data, operand.data, width, {operand.num_elements()}, {width});  // Parallel.
  }
  // Every window into an empty operand is out of range and dropped: the result is the
  // (empty) operand, as on XLA:CPU, whatever the updates (the walk check would refuse it).
  if (operand.num_elements() == 0) return Status();
  Walk w(ctx.instr);
  Status s = CheckWalk(ctx, operand, indices, updates, &w);
  if (!s.ok() || w.batch_size == 0 || w.window_size == 0) return s;
  if (body == "add" || body == "maximum" || body == "minimum") {
    bool done = false;
    s = TryScatterAddChunked(ctx, w, indices, updates, out, body, &done);
    if (!s.ok() || done) return s;
  }
  Starts starts;
  s = ComputeStarts(ctx, w, FromIndices(w, indices), /*clamp=*/false, &starts);
  if (!s.ok()) return s;
  const WindowRows rows = MakeWindowRows(w);
  auto unsupported = [&] {
    return Unimplemented("workshop: scatter with update computation '", body, "' on ",
                         DTypeName(operand.dtype), " is not supported at ", ctx.instr.loc);
  };
  if (body == "set") {
    return DispatchByteWidth(
        width,
        [&](auto tag) -> Status {
          using T = decltype(tag);
          return ScatterWindows(ctx, w, rows, starts, updates.as<T>(), out,
                                [](T, T update) { return update; });
        },
        unsupported);
  }
  return DispatchReducer(
      body,
      [&](auto op) -> Status {
        using Op = decltype(op);
        return DispatchEvery(
            operand.dtype,
            [&](auto tag) -> Status {
              using T = decltype(tag);
              if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
                // Combined in f32 and rounded once per update, as XLA:CPU computes f16.
                if constexpr (Op::template kSupports<float>) {
                  return ScatterWindows(ctx, w, rows, starts, updates.as<T>(), out,
                                        [op](T x, T update) {
                                          const float r = op(ToFloat(x), ToFloat(update));
                                          if constexpr (std::is_same_v<T, Float16>) {
                                            return ToFloat16(r);
                                          } else {
                                            return ToBFloat16(r);
                                          }
                                        });
                }
                return unsupported();
              } else if constexpr (Op::template kSupports<T>) {
                return ScatterWindows(ctx, w, rows, starts, updates.as<T>(), out, op);
              } else {
                return unsupported();
              }
            },
            unsupported);
      },
      unsupported);
}

// scatter with any update computation (x.at[i].apply(f)): `body` is a lane plan over
// (current, update, captures...). Element pairs are taken in batch order and cut into
// runs in which no operand element repeats; each run is one body call over all its
// lanes, so an element updated twice sees its first update, as in sequential order.
Status ScatterGeneral(KernelContext& ctx) {
  const Tensor& operand = ctx.ins[0];
  const Tensor& indices = ctx.ins[1];
  const Tensor& updates = ctx.ins[2];
  // manages_outputs, to be handed the captures' storage for the body (ctx.in_storage).
  const int64_t width = ByteWidth(operand.dtype), update_width = ByteWidth(updates.dtype);
  std::shared_ptr<Storage> out;
  WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, operand.num_elements() * width, &out));
  std::memcpy(out->data(), operand.data, operand.num_elements() * width);
  ctx.out_storage = {out};
  // As in Scatter: every window into an empty operand is out of range and dropped.
  if (operand.num_elements() == 0) return Status();
  Walk w(ctx.instr);
  Status s = CheckWalk(ctx, operand, indices, updates, &w);
  if (!s.ok() || w.batch_size == 0 || w.window_size == 0) return s;
  Starts starts;
  WORKSHOP_RETURN_IF_ERROR(
      ComputeStarts(ctx, w, FromIndices(w, indices), /*clamp=*/false, &starts));
  const WindowRows rows = MakeWindowRows(w);
  // At most one (dst, src) pair per update element, one run number per operand element.
  ScratchCharge scratch;
  WORKSHOP_RETURN_IF_ERROR(
      scratch.Charge(ctx, static_cast<int64_t>(sizeof(int64_t)) *
                              (2 * updates.num_elements() + operand.num_elements())));
  std::vector<int64_t> dst, src;  // element offsets into out and updates, in order
  dst.reserve(updates.num_elements());
  src.reserve(updates.num_elements());
  ForEachWindow(w, starts, [&](int64_t io, int64_t start) {
    for (size_t r = 0; r < rows.io.size(); ++r) {
      for (int64_t i = 0; i < rows.n; ++i) {
        dst.push_back(start + rows.operand[r] + i * rows.operand_step);
        src.push_back(io + rows.io[r] + i * rows.io_step);
      }
    }
  });
  const Plan& body = SubPlan(ctx, "body");
  const StorageList captures(ctx.in_storage.begin() + 3, ctx.in_storage.end());
  std::vector<int64_t> run_of(operand.num_elements(), -1);
  char* o = static_cast<char*>(out->data());
  const char* u = static_cast<const char*>(updates.data);
  for (size_t first = 0, runs = 0; first < dst.size(); ++runs) {
    size_t end = first;
    while (end < dst.size() && run_of[dst[end]] != static_cast<int64_t>(runs)) {
      run_of[dst[end++]] = static_cast<int64_t>(runs);
    }
    const int64_t lanes = static_cast<int64_t>(end - first);
    StorageList args(2);
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, lanes * width, &args[0]));
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, lanes * update_width, &args[1]));
    char* current = static_cast<char*>(args[0]->data());
    char* update = static_cast<char*>(args[1]->data());
    for (int64_t j = 0; j < lanes; ++j) {
      std::memcpy(current + j * width, o + dst[first + j] * width, width);
      std::memcpy(update + j * update_width, u + src[first + j] * update_width, update_width);
    }
    args.insert(args.end(), captures.begin(), captures.end());
    StorageList result;
    WORKSHOP_RETURN_IF_ERROR(RunSubPlan(ctx, WithLanes(body, lanes), std::move(args), &result));
    if (result.size() != 1 || result[0]->size() < static_cast<size_t>(lanes * width)) {
      throw PlanError("the body must return one value of the operand's dtype");
    }
    const char* r = static_cast<const char*>(result[0]->data());
    for (int64_t j = 0; j < lanes; ++j) {
      std::memcpy(o + dst[first + j] * width, r + j * width, width);
    }
    first = end;
  }
  return Status();
}

WORKSHOP_REGISTER_KERNEL("gather", Gather);
WORKSHOP_REGISTER_KERNEL("scatter_general", ScatterGeneral, /*aliases_operand=*/false,
                         /*manages_outputs=*/true);
WORKSHOP_REGISTER_KERNEL("scatter", Scatter, /*aliases_operand=*/false,
                         /*manages_outputs=*/false, /*reuses_operand0=*/true);

}  // namespace
}  // namespace workshop
