// Plan: the compiled program the executor runs, produced by the Python compiler
// (jax_plugins/workshop/compiler, see docs/plan.md "The plan") and converted once, at
// compile time, into these structs by compiler_bridge.cc.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace workshop {

struct Plan;
struct KernelDef;

using IntList = std::vector<int64_t>;
using Attr = std::variant<int64_t, double, std::string, IntList, std::vector<IntList>,
                          std::shared_ptr<const Plan>>;

// Thrown by Instr::attr when the compiler did not emit an attribute a kernel needs; the
// executor turns it into an INVALID_ARGUMENT naming the op and its location.
struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Instr {
  std::string op;  // StableHLO op name without "stablehlo.", e.g. "add".
  const KernelDef* kernel = nullptr;
  std::vector<int> ins, outs;  // Slot indices.
  // Transparent comparison: kernels look attributes up by string literal on every call,
  // which must not build a std::string each time.
  std::map<std::string, Attr, std::less<>> attrs;
  std::string loc;  // Source location, quoted in errors.
  // What the kernel's `prepare` (kernels/core/kernel.h) derived from this instruction once,
  // when the plan was prepared: the fusion kernel's block schedule. Null for most kernels.
  std::shared_ptr<const void> prepared;

  template <typename T>
  const T& attr(std::string_view name) const {
    auto it = attrs.find(name);
    if (it == attrs.end() || !std::holds_alternative<T>(it->second)) {
      throw PlanError("missing or mistyped attribute '" + std::string(name) + "'");
    }
    return std::get<T>(it->second);
  }
};

// PJRT_Buffer_Type_TOKEN: main's token results (no elements) have it; DType has no
// enumerator for it because no kernel computes on it.
inline constexpr DType kTokenDType = static_cast<DType>(23);

struct SlotType {
  DType dtype;
  Dims dims;
  int64_t byte_size() const { return NumElements(dims) * ByteWidth(dtype); }
};

struct Plan {
  std::vector<SlotType> slots;
  std::vector<int> params;
  std::vector<int> results;
  std::vector<Instr> instrs;
  std::vector<std::vector<int>> frees;  // frees[i]: slots last used by instrs[i].
  // Buffer assignment (runtime/buffer_assignment.h), made when the plan is prepared: each
  // slot's byte offset in the call's one arena of `arena_bytes`, or -1 for a slot whose
  // storage comes from elsewhere (parameters, results, in-place updates, storage a kernel
  // keeps or forwards). Empty: no arena (a resized copy, WithLanes).
  std::vector<int64_t> arena_offset;
  int64_t arena_bytes = 0;
};

// Everything PJRT needs to know about one compiled module.
struct Program {
  std::string name;
  Plan plan;  // The per-partition program.
  int num_replicas = 1;
  int num_partitions = 1;
  std::vector<std::vector<int>> device_assignment;  // [replica][partition] -> device id.
  std::string device_assignment_proto;              // Serialized DeviceAssignmentProto.
  std::vector<std::pair<int, int>> donations;       // (parameter, result) pairs.
  std::string fingerprint;
  std::string text;  // StableHLO text of the module.
  // Memory kind ("device", "pinned_host") of each parameter and result.
  std::vector<std::string> parameter_memory_kinds, output_memory_kinds;
  // Device layout of each parameter and result (local shapes), as the program asked for
  // them (`mhlo.layout_mode`) or the compiler chose (auto); empty entries: row-major.
  // Arguments in another layout are converted on the way in.
  std::vector<MinorToMajor> parameter_layouts, output_layouts;
  // MLIR text of the per-partition program with its shardings (OptimizedProgram, as_text).
  std::string optimized_program;
  // PJRT_Executable_GetCostAnalysis properties ("flops", "bytes accessed", ...).
  std::vector<std::pair<std::string, double>> cost_analysis;
  // The PJRT_Program and options it was compiled from: a serialized executable carries
  // them so a different build of the plugin can recompile instead of trusting the plan.
  std::string source_code, source_format, source_options;
};

// Binds every instruction (and sub-plan instruction) to its kernel and checks every slot
// index, so a malformed plan (from the compiler or a serialized executable) is an error
// here rather than an out-of-bounds access at run time. `name` is quoted in errors.
Status PreparePlan(Plan& plan, const std::string& name);

// PreparePlan for the program's plan, plus the program-level invariants Execute relies on:
// donations and memory kinds name existing parameters and results, and the device
// assignment is num_replicas x num_partitions, layouts are permutations of their slot's
// dims. Memory kinds left empty mean "device", layouts left empty row-major.
Status PrepareProgram(Program& program);

}  // namespace workshop
