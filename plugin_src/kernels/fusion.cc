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
// What stays the same from block to block is worked out once per body (FusionSchedule,
// cached) and done once per thread:
// * a broadcast writes just the block's slice of its result (BroadcastSlice), never the
//   whole N elements;
// * a step whose result is the same in every block ("invariant": a broadcast whose
//   pattern repeats with the block length, e.g. of a scalar or of a row of gamma, and
//   elementwise steps over invariant values only) runs once, before the first block;
// * intermediates share buffers once they are dead, so a long chain stays in L1;
// * the kernel contexts are built once per thread; a block only moves data pointers.
#include <atomic>
#include <complex>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "kernels/kernel.h"
#include "kernels/strided.h"
#include "kernels/subplan.h"
#include "runtime/thread_pool.h"

namespace workshop {
namespace {

// At most 1024 elements per block: an f32 intermediate is 4 KiB, so a chain's live
// intermediates and its hoisted invariant values (a gelu has four constants) fit in L1
// together, and the block is still long enough for the per-kernel dispatch to vanish
// against the loop. Shorter when that makes column broadcasts invariant.
constexpr int64_t kMaxBlock = 1024;

// How to write elements [offset, offset + length) of a broadcast_in_dim's row-major
// result: the result's dims with size-1 and contiguous dims merged, and the operand's
// element stride along each (0 along repeated dims).
struct BroadcastSlice {
  std::vector<int64_t> dims, strides;
  int64_t elem_size = 0;

  // The smallest period p such that element i and i + p always read the same operand
  // element (N if the pattern does not repeat inside the result).
  int64_t Period() const {
    int64_t period = 1, inner = 1;
    for (size_t d = dims.size(); d-- > 0;) {
      inner *= dims[d];
      if (strides[d] != 0) period = std::lcm(period, inner);
    }
    return period;
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
    const T* from = src + base + column * inner_stride;
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

struct Step {
  const Instr* instr;
  std::unique_ptr<BroadcastSlice> broadcast;  // Set for broadcast_in_dim.
  bool invariant = false;                     // Runs once per thread, not per block.
};

// Everything about a body that does not depend on the data: computed once per body.
struct FusionSchedule {
  int64_t n = 0;      // Elements of every tiled slot.
  int64_t block = 0;  // Elements per block (the last block may be shorter).
  int64_t grain = 1;  // Blocks a thread takes at a time; fewer than two batches: no threads.
  std::vector<Step> steps;
  std::vector<bool> tiled;             // Per slot: N elements, viewed per block.
  std::vector<int64_t> scratch_offset;  // Per slot: byte offset in the scratch; -1: none.
  int64_t scratch_bytes = 0;
};

BroadcastSlice MakeBroadcastSlice(const SlotType& in, const SlotType& out,
                                  const IntList& dims) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.dims);
  std::vector<std::vector<int64_t>> strides = {RowMajorStrides(out.dims),
                                               std::vector<int64_t>(out.dims.size(), 0)};
  // Output dims the operand does not map to, or maps a size-1 dim to, repeat: stride 0.
  for (size_t i = 0; i < dims.size(); ++i) {
    if (in.dims[i] == out.dims[dims[i]]) strides[1][dims[i]] = in_strides[i];
  }
  BroadcastSlice slice;
  slice.dims = CollapseDims(out.dims, strides);
  slice.strides = std::move(strides[1]);
  if (slice.dims.empty()) {  // One element.
    slice.dims = {1};
    slice.strides = {0};
  }
  slice.elem_size = ByteWidth(out.dtype);
  return slice;
}

Status MakeSchedule(const KernelContext& ctx, const Plan& body, FusionSchedule* schedule) {
  FusionSchedule& s = *schedule;
  const size_t num_slots = body.slots.size();
  auto bad = [&](const Instr& instr, const char* why) {
    return InvalidArgument("workshop: ", instr.op, " at ", instr.loc, " cannot be fused (",
                           why, ") in ", ctx.instr.loc);
  };
  if (body.results.empty()) return InvalidArgument("workshop: empty fusion ", ctx.instr.loc);
  s.n = NumElements(body.slots[body.results[0]].dims);
  s.tiled.resize(num_slots);
  for (size_t i = 0; i < num_slots; ++i) s.tiled[i] = NumElements(body.slots[i].dims) == s.n;
  std::vector<bool> is_param(num_slots), is_result(num_slots);
  for (int p : body.params) is_param[p] = true;
  for (int r : body.results) is_result[r] = true;

  // Broadcasts, and the block length that makes the most of them invariant.
  int64_t period = 1;
  for (const Instr& instr : body.instrs) {
    Step step{&instr, nullptr, false};
    if (instr.outs.size() != 1 || !s.tiled[instr.outs[0]]) {
      return bad(instr, "its result is not the fusion's size");
    }
    if (instr.op == "broadcast_in_dim") {
      if (instr.ins.size() != 1) return bad(instr, "not one operand");
      const SlotType& in = body.slots[instr.ins[0]];
      const SlotType& out = body.slots[instr.outs[0]];
      const IntList& dims = instr.attr<IntList>("dims");
      bool ok = in.dtype == out.dtype && dims.size() == in.dims.size() &&
                ByteWidth(in.dtype) <= 16 && (!s.tiled[instr.ins[0]] || s.n == 1);
      for (size_t i = 0; ok && i < dims.size(); ++i) {
        ok = dims[i] >= 0 && dims[i] < static_cast<int64_t>(out.dims.size()) &&
             (in.dims[i] == 1 || in.dims[i] == out.dims[dims[i]]);
      }
      if (!ok) return bad(instr, "not a broadcast of a smaller operand");
      step.broadcast = std::make_unique<BroadcastSlice>(MakeBroadcastSlice(in, out, dims));
      const int64_t p = step.broadcast->Period();
      if (p <= kMaxBlock && std::lcm(period, p) <= kMaxBlock) period = std::lcm(period, p);
    } else {
      // Scalars (select's predicate, clamp's bounds) are read whole; all else per block.
      for (int in : instr.ins) {
        if (!s.tiled[in] && NumElements(body.slots[in].dims) != 1) {
          return bad(instr, "an operand is neither the fusion's size nor a scalar");
        }
      }
    }
    s.steps.push_back(std::move(step));
  }
  s.block = std::max<int64_t>(1, std::min(s.n, kMaxBlock - kMaxBlock % period));

  // Invariant steps: their result, a temporary, is the same slice in every block.
  std::vector<bool> invariant(num_slots);
  for (size_t i = 0; i < num_slots; ++i) invariant[i] = !s.tiled[i];
  for (Step& step : s.steps) {
    const int out = step.instr->outs[0];
    if (is_result[out]) continue;
    if (step.broadcast) {
      step.invariant = s.block % step.broadcast->Period() == 0 || s.block == s.n;
    } else {
      step.invariant = true;
      for (int in : step.instr->ins) step.invariant = step.invariant && invariant[in];
    }
    invariant[out] = step.invariant;
  }

  // Scratch buffers for the temporaries: invariant ones keep theirs; the others take a
  // free buffer and give it back after their last reader (never sharing one between an
  // instruction's operand and result: kernels take __restrict pointers).
  std::vector<int> last_use(num_slots, -1);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    for (int in : s.steps[i].instr->ins) last_use[in] = static_cast<int>(i);
  }
  const int64_t buffer_bytes = (s.block * 16 + 63) / 64 * 64;  // Any dtype, 64-aligned.
  std::vector<int64_t> free_buffers;
  s.scratch_offset.assign(num_slots, -1);
  for (size_t i = 0; i < s.steps.size(); ++i) {
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
    for (int in : s.steps[i].instr->ins) {
      if (last_use[in] == static_cast<int>(i) && s.scratch_offset[in] >= 0 && !invariant[in]) {
        free_buffers.push_back(s.scratch_offset[in]);
        last_use[in] = -1;  // An operand read twice is freed once.
      }
    }
    if (last_use[out] < 0 && s.scratch_offset[out] >= 0 && !s.steps[i].invariant) {
      free_buffers.push_back(s.scratch_offset[out]);  // Dead on arrival.
    }
  }

  // A batch carries about kParallelGrain elements' worth of kernel work (a long chain
  // splits earlier than a single kernel), so a thread hand-off pays for itself.
  int64_t per_block = 0;
  for (const Step& step : s.steps) per_block += step.invariant ? 0 : 1;
  s.grain = std::max<int64_t>(1, kParallelGrain / (s.block * std::max<int64_t>(per_block, 1)));
  return Status();
}

// The schedule of `body`, computed on first use. Keyed on the body's address; the weak
// pointer tells a live body from a new one that reuses a freed body's address.
Status GetSchedule(const KernelContext& ctx, std::shared_ptr<const FusionSchedule>* out) {
  const auto& body = ctx.instr.attr<std::shared_ptr<const Plan>>("body");
  struct Entry {
    std::weak_ptr<const Plan> body;
    std::shared_ptr<const FusionSchedule> schedule;
  };
  static std::mutex mu;
  static auto* cache = new std::unordered_map<const Plan*, Entry>();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(body.get());
    if (it != cache->end() && it->second.body.lock() == body) {
      *out = it->second.schedule;
      return Status();
    }
  }
  auto schedule = std::make_shared<FusionSchedule>();
  if (Status status = MakeSchedule(ctx, *body, schedule.get()); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(*cache, [](const auto& entry) { return entry.second.body.expired(); });
  (*cache)[body.get()] = Entry{body, schedule};
  *out = std::move(schedule);
  return Status();
}

// Runs blocks of the fusion on the calling thread, `s.grain` at a time, taking them from
// `next` until none are left: a thread that starts late (the box is busy) does less.
Status RunBlocks(const KernelContext& ctx, const Plan& body, const FusionSchedule& s,
                 int64_t blocks, std::atomic<int64_t>& next) {
  std::shared_ptr<Storage> scratch;
  if (s.scratch_bytes > 0) {
    if (Status status = AllocateFor(ctx, s.scratch_bytes, &scratch); !status.ok()) {
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
  for (size_t i = 0; i < num_slots; ++i) {
    if (s.scratch_offset[i] >= 0) {
      base[i] = static_cast<char*>(scratch->data()) + s.scratch_offset[i];
    }
  }
  Dims block_dims = {s.block};
  std::vector<KernelContext> steps;
  steps.reserve(s.steps.size());
  struct Moving {  // A tensor that is a window of an operand or result.
    Tensor* tensor;
    char* base;
    int64_t width;
  };
  std::vector<Moving> moving;
  for (const Step& step : s.steps) {
    KernelContext& inner =
        steps.emplace_back(KernelContext{*step.instr, {}, {}, ctx.launch, {}, {}});
    auto view = [&](int slot) {
      const SlotType& type = body.slots[slot];
      if (!s.tiled[slot]) return Tensor{type.dtype, &type.dims, base[slot]};
      return Tensor{type.dtype, &block_dims, base[slot]};
    };
    for (int slot : step.instr->ins) inner.ins.push_back(view(slot));
    for (int slot : step.instr->outs) inner.outs.push_back(view(slot));
  }
  // Pointers into `steps` are stable from here on.
  for (size_t i = 0; i < s.steps.size(); ++i) {
    auto track = [&](std::vector<Tensor>& tensors, const std::vector<int>& slots) {
      for (size_t k = 0; k < slots.size(); ++k) {
        if (s.tiled[slots[k]] && s.scratch_offset[slots[k]] < 0) {
          moving.push_back({&tensors[k], base[slots[k]], ByteWidth(tensors[k].dtype)});
        }
      }
    };
    if (s.steps[i].invariant) continue;
    track(steps[i].ins, s.steps[i].instr->ins);
    track(steps[i].outs, s.steps[i].instr->outs);
  }
  auto run = [&](size_t i, int64_t offset) {
    if (const BroadcastSlice* b = s.steps[i].broadcast.get()) {
      WriteBroadcastSlice(*b, steps[i].ins[0].data, steps[i].outs[0].data, offset,
                          block_dims[0]);
      return Status();
    }
    return s.steps[i].instr->kernel->fn(steps[i]);
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (!s.steps[i].invariant) continue;
    if (Status status = run(i, 0); !status.ok()) return status;
  }
  for (int64_t first; (first = next.fetch_add(s.grain)) < blocks;) {
    for (int64_t block = first, end = std::min(blocks, first + s.grain); block < end; ++block) {
      const int64_t offset = block * s.block;
      block_dims[0] = std::min(s.block, s.n - offset);
      for (const Moving& m : moving) m.tensor->data = m.base + offset * m.width;
      for (size_t i = 0; i < s.steps.size(); ++i) {
        if (s.steps[i].invariant) continue;
        if (Status status = run(i, offset); !status.ok()) return status;
      }
    }
  }
  return Status();
}

Status Fusion(KernelContext& ctx) {
  std::shared_ptr<const FusionSchedule> schedule;
  if (Status status = GetSchedule(ctx, &schedule); !status.ok()) return status;
  const Plan& body = SubPlan(ctx, "body");
  const FusionSchedule& s = *schedule;
  const int64_t blocks = s.n == 0 ? 0 : (s.n + s.block - 1) / s.block;
  // One task per thread that has work, each taking batches of `s.grain` blocks.
  const int64_t batches = (blocks + s.grain - 1) / s.grain;
  const int64_t workers = std::min<int64_t>(ThreadPool::Global().num_threads(), batches);
  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  Status error;
  ThreadPool::Global().ParallelFor(workers, 1, [&](int64_t, int64_t) {
    Status status = RunBlocks(ctx, body, s, blocks, next);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.ok()) error = std::move(status);
    }
  });
  return error;
}

WORKSHOP_REGISTER_KERNEL("fusion", Fusion);

}  // namespace
}  // namespace workshop
