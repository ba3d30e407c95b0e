// Buffer assignment: every temporary of a plan gets a byte offset in one arena, so that a
// call takes one block for all of them (RunPlan) and the plan's temporary memory is known
// when it is prepared (PJRT_Executable_GetCompiledMemoryStats).
//
// As XLA's BufferAssignment with its heap simulator (xla/service/buffer_assignment.cc,
// heap_simulator.cc, GlobalDecreasingSizeBestFitHeap): a storage's live range runs from
// the instruction that defines it to the last instruction that frees a slot naming it
// (reshape and bitcast_convert name their operand's storage); storages sorted by size,
// largest first, each placed at the lowest 64-byte-aligned offset where it overlaps no
// placed storage whose live range meets its own.
//
// Only storages whose lifetime the plan fully determines take part. Left to the memory
// pool: parameters and results (their storage outlives the call), outputs of in-place
// kernels (`reuses_operand0`: output 0 may be operand 0's storage) and their operand 0
// (it may become that output), and anything a kernel that manages its outputs (while,
// case, sort_general, jit_loop, ...) produces or reads (it may hand the storage on to a
// sub-plan or return it as its own result).
#pragma once

#include "runtime/plan.h"

namespace workshop {

// Fills plan.arena_offset (one per slot) and plan.arena_bytes. Plans are validated first
// (PreparePlan): slot indices are in range and every instruction has its kernel.
void AssignBuffers(Plan& plan);

}  // namespace workshop
