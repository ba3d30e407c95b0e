#include "runtime/buffer_assignment.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/core/kernel.h"
#include "runtime/memory_pool.h"

namespace workshop {
namespace {

constexpr int64_t kAlign = static_cast<int64_t>(MemoryPool::kAlignment);

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Interval {
  int storage;  // The owning slot.
  int64_t size;
  int start, end;  // Instruction indices, inclusive.
  int64_t offset = -1;
};

}  // namespace

void AssignBuffers(Plan& plan) {
  const int num_slots = static_cast<int>(plan.slots.size());
  const int num_instrs = static_cast<int>(plan.instrs.size());
  plan.arena_offset.assign(num_slots, -1);
  plan.arena_bytes = 0;

  // Which storage each slot names (slots are defined once, in order).
  std::vector<int> owner(num_slots);
  for (int s = 0; s < num_slots; ++s) owner[s] = s;
  std::vector<bool> eligible(num_slots, true);
  std::vector<int> start(num_slots, -1), end(num_slots, -1);
  std::vector<bool> defined(num_slots, false), freed(num_slots, false);
  for (int s : plan.params) eligible[s] = false;
  for (int i = 0; i < num_instrs; ++i) {
    const Instr& instr = plan.instrs[i];
    const KernelDef* kernel = instr.kernel;
    for (int o : instr.outs) defined[o] = true;
    if (kernel != nullptr && kernel->aliases_operand && !instr.ins.empty() &&
        instr.outs.size() == 1) {
      owner[instr.outs[0]] = owner[instr.ins[0]];
      continue;
    }
    const bool keeps = kernel == nullptr || kernel->manages_outputs;
    for (size_t k = 0; k < instr.outs.size(); ++k) {
      const int o = instr.outs[k];
      start[o] = i;
      if (keeps || (k == 0 && kernel->reuses_operand0)) eligible[o] = false;
    }
    for (size_t k = 0; k < instr.ins.size(); ++k) {
      if (keeps || (k == 0 && kernel->reuses_operand0)) eligible[owner[instr.ins[k]]] = false;
    }
  }
  for (int s : plan.results) eligible[owner[s]] = false;
  for (int i = 0; i < num_instrs; ++i) {
    for (int s : plan.frees[i]) {
      end[owner[s]] = std::max(end[owner[s]], i);
      freed[s] = true;
    }
  }
  // A slot never freed (a dead value the compiler kept) holds its storage to the end.
  for (int s = 0; s < num_slots; ++s) {
    if (defined[s] && !freed[s]) end[owner[s]] = num_instrs;
  }

  std::vector<Interval> intervals;
  for (int s = 0; s < num_slots; ++s) {
    if (owner[s] != s || !eligible[s] || start[s] < 0) continue;
    const int64_t size = plan.slots[s].byte_size();
    if (size <= 0) continue;
    intervals.push_back(Interval{s, AlignUp(size), start[s], std::max(end[s], start[s])});
  }
  std::stable_sort(intervals.begin(), intervals.end(),
                   [](const Interval& a, const Interval& b) { return a.size > b.size; });
  std::vector<const Interval*> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, offset + size) of overlapping.
  for (Interval& iv : intervals) {
    busy.clear();
    for (const Interval* p : placed) {
      if (p->start <= iv.end && iv.start <= p->end)
        busy.emplace_back(p->offset, p->offset + p->size);
    }
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap between busy ranges that holds it, else the end.
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo - cursor >= iv.size && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    iv.offset = best >= 0 ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, iv.offset + iv.size);
    placed.push_back(&iv);
  }
  for (const Interval& iv : intervals) plan.arena_offset[iv.storage] = iv.offset;
}

}  // namespace workshop
