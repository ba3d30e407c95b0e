// The kernel interface and registry.
//
// A kernel implements one StableHLO op (by name, as the Python compiler emits it) for every
// dtype it supports. It receives its operands and freshly allocated, dense row-major outputs
// whose shapes the compiler has already inferred, so kernels never allocate and never infer.
// (The one exception to "fresh": `reuses_operand0` below.)
// Adding an op: one WORKSHOP_REGISTER_KERNEL in the family's .cc file (see docs/architecture.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/dtype.h"
#include "runtime/plan.h"
#include "runtime/status.h"

namespace workshop {

class Rendezvous;

struct Tensor {
  DType dtype;
  const Dims* dims;
  void* data;

  int64_t num_elements() const { return NumElements(*dims); }
  int64_t rank() const { return static_cast<int64_t>(dims->size()); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Where in the launch this kernel runs: collectives need it.
struct LaunchContext {
  int partition = 0;
  Rendezvous* rendezvous = nullptr;  // Shared by the launch's partitions.
};

struct KernelContext {
  const Instr& instr;
  std::vector<Tensor> ins;
  std::vector<Tensor> outs;  // Empty for kernels that manage their outputs.
  const LaunchContext& launch;
  // The operands' storage, for kernels that pass operands on to a sub-plan (while, case).
  std::vector<std::shared_ptr<Storage>> in_storage;
  // Kernels with `manages_outputs` store one Storage per output here instead of writing
  // into preallocated `outs`.
  std::vector<std::shared_ptr<Storage>> out_storage;
};

using KernelFn = Status (*)(KernelContext&);

struct KernelDef {
  KernelFn fn;
  // The output is the input's bytes reinterpreted (reshape): the executor shares the
  // operand's storage instead of allocating and calling `fn`.
  bool aliases_operand = false;
  // The kernel produces its outputs' storage itself (control flow: the results of a
  // sub-plan become the outputs without a copy).
  bool manages_outputs = false;
  // Output 0 has operand 0's dtype and shape and the kernel is correct when output 0 *is*
  // operand 0 (`ctx.outs[0].data == ctx.ins[0].data`: it then skips copying the operand
  // and updates in place; scatter, dynamic_update_slice). The executor passes operand 0's
  // storage as output 0 only when no one else can observe it: the operand dies here, is no
  // other operand of the instruction, and its Storage has no other owner (not a caller's
  // buffer, unless donated). Other operands never alias output 0, so `__restrict` between
  // output 0 and operands 1.. still holds.
  bool reuses_operand0 = false;
  // Any output may be given the storage of an operand of the same dtype and shape that dies
  // at this instruction (a donated parameter whose result this is: runtime/executor.cc):
  // the kernel reads all of an output element's inputs before writing it (fusion.cc).
  bool writes_over_operands = false;
  // A two-operand elementwise kernel that also takes either operand as one element
  // repeated against the other's n: fusion.cc then skips writing a block of a broadcast
  // scalar or per-row value. Plans never give one-element operands to other kernels.
  bool scalar_operands = false;
  // Runs once per instruction when its plan is prepared (at compile or deserialize time,
  // after the instruction's sub-plans): checks what needs no data and stores what every
  // run would otherwise recompute in `instr.prepared`. An error fails the compile.
  Status (*prepare)(Instr& instr) = nullptr;
  // Checks, when a plan is prepared (before `prepare`, with the plan's liveness checks),
  // the attributes the kernel indexes memory with against the instruction's operand and
  // result shapes, so a crafted or resealed serialized plan cannot make it read or write
  // out of bounds: INVALID_ARGUMENT. Built from kernels/core/attr_check.h; defined beside
  // the kernel. plan.cc keeps only the checks every op shares (slot types from optable).
  Status (*check)(const Plan& plan, const Instr& instr) = nullptr;
  // Work per element in units of a simple elementwise op (an add: about 0.07 ns per f32 in
  // L1), for sizing a fusion's batches of blocks: a composite
  // (kernels/elementwise/gelu.cc) does many.
  int64_t work = 1;
};

// The kernel registered under `op`, or null.
const KernelDef* FindKernel(const std::string& op);

struct KernelRegistration {
  KernelRegistration(const char* op, KernelDef def);
};

#define WORKSHOP_KERNEL_CONCAT_(a, b) a##b
#define WORKSHOP_KERNEL_CONCAT(a, b) WORKSHOP_KERNEL_CONCAT_(a, b)
#define WORKSHOP_REGISTER_KERNEL(op, ...)                                                          \
  static ::workshop::KernelRegistration WORKSHOP_KERNEL_CONCAT(kernel_registration_, __COUNTER__)( \
      op, ::workshop::KernelDef{__VA_ARGS__})

// Checks `instr` against the op table (optable.h): a kernel the table lacks, or a dtype of
// its typed value the table does not list, fails the plan's preparation, at compile time.
Status CheckOpTable(const Instr& instr, const std::vector<SlotType>& slots);

// The op table's `same_type` of kernel `op` (optable.py): the operand whose element type
// every result has, or -1 (none, or an op the table lacks).
int SameTypeOperand(const std::string& op);

// The standard error for a dtype a kernel does not implement.
Status UnsupportedDType(const KernelContext& ctx, DType dtype);

}  // namespace workshop
