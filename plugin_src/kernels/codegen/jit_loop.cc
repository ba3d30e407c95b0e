// jit_loop: a while loop the code-generation tier compiled into one native function
// (jax_plugins/workshop/compiler/codegen, docs/codegen.md "Code generation").
//
// ins = initial values (one per output), captures; attrs: cond, body (the loop as
// sub-plans, exactly as for `while`), backend, code, symbol. When the plan is prepared
// (at compile time, or when a serialized executable is loaded) the generated source is
// compiled, or found in the process's cache, through the Python side; the kernel then
// calls `void symbol(void** args)` with args = operand pointers, then result pointers.
// The function loads the operands into registers, runs cond and body until cond is
// false and stores the results. With attr `scratch` (bytes; compiler/codegen
// loops.memory_plan) the loop keeps values too big for registers in memory: args then
// end with a pointer to that many bytes, allocated here once per run. If compiling fails (no
// Python, no llvmlite in this process), the loop runs interpreted, as `while`.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/codegen/generated_code.h"
#include "kernels/core/attr_check.h"
#include "kernels/core/kernel.h"
#include "kernels/core/subplan.h"
#include "kernels/math/vector_math.h"

namespace workshop {
namespace {

// args: operand pointers, then result pointers; calls: the table of `CallSite`s below.
using LoopFn = void (*)(void* const* args, const void* const* calls);

// An instruction of cond or body the generated code runs by calling its kernel
// (WorkshopJitRun): reduce, dot_general, dynamic_slice, ... (compiler/codegen loops.RUN).
struct CallSite {
  const Instr* instr;
  const Plan* plan;  // cond or body: the slot types of the instruction's operands
};

// Kernels that manage their outputs a generated loop may still call (RunManaged): a
// case whose branches it cannot compute, and in a loop with values in memory a nested
// loop (compiler/codegen loops.memory_plan).
bool IsManagedCallSite(const std::string& op) {
  return op == "case" || op == "while" || op == "jit_loop";
}

struct PreparedLoop {
  GeneratedFunction fn;
  std::vector<int64_t> in_bytes, out_bytes;
  std::vector<CallSite> sites;
  std::vector<const void*> calls;  // &sites[i], what the generated code indexes
  int64_t scratch = -1;            // Bytes of scratch passed after the results; -1: none.
};

Status PrepareJitLoop(Instr& instr) {
  const auto& cond = instr.attr<std::shared_ptr<const Plan>>("cond");
  const auto& body = instr.attr<std::shared_ptr<const Plan>>("body");
  if (cond == nullptr || body == nullptr) throw PlanError("null cond or body");
  if (body->params.size() != instr.ins.size() || cond->params.size() != instr.ins.size() ||
      body->results.size() != instr.outs.size()) {
    throw PlanError("cond/body do not match the loop's operands and results");
  }
  auto prepared = std::make_shared<PreparedLoop>();
  // attr calls: [[region (0 cond, 1 body), instruction index], ...] in the order the
  // generated code numbers its call sites.
  if (auto it = instr.attrs.find("calls"); it != instr.attrs.end()) {
    const auto* calls = std::get_if<std::vector<IntList>>(&it->second);
    if (calls == nullptr) throw PlanError("mistyped attribute 'calls'");
    for (const IntList& call : *calls) {
      if (call.size() != 2 || (call[0] != 0 && call[0] != 1)) throw PlanError("bad call site");
      const Plan& region = call[0] == 0 ? *cond : *body;
      if (call[1] < 0 || static_cast<size_t>(call[1]) >= region.instrs.size() ||
          region.instrs[call[1]].kernel == nullptr ||
          (region.instrs[call[1]].kernel->manages_outputs &&
           !IsManagedCallSite(region.instrs[call[1]].op)) ||
          region.instrs[call[1]].kernel->aliases_operand) {
        throw PlanError("call site is not a plain kernel, a case or a loop");
      }
      prepared->sites.push_back(CallSite{&region.instrs[call[1]], &region});
    }
    for (const CallSite& site : prepared->sites) prepared->calls.push_back(&site);
  }
  for (int slot : body->params) prepared->in_bytes.push_back(body->slots[slot].byte_size());
  for (int slot : body->results) prepared->out_bytes.push_back(body->slots[slot].byte_size());
  if (auto it = instr.attrs.find("scratch"); it != instr.attrs.end()) {
    const auto* bytes = std::get_if<int64_t>(&it->second);
    if (bytes == nullptr || *bytes < 0) throw PlanError("bad attribute 'scratch'");
    prepared->scratch = *bytes;
  }
  // The code addresses its scratch at offsets up to the size its symbol names
  // (compiler/codegen _try_loop): an attribute that disagrees (an edited executable)
  // would let it write past the block.
  const std::string& symbol = instr.attr<std::string>("symbol");
  const size_t at = symbol.find("_scratch");
  int64_t named = -1;
  if (at != std::string::npos) {
    named = 0;
    size_t i = at + 8;
    for (; i < symbol.size() && symbol[i] >= '0' && symbol[i] <= '9' && named < (1LL << 50); ++i) {
      named = named * 10 + (symbol[i] - '0');
    }
    if (i == at + 8 || i >= symbol.size() || symbol[i] != '_') named = -2;
  }
  if (named != prepared->scratch) {
    throw PlanError("attribute 'scratch' is not the size the generated code's symbol names");
  }
  static std::atomic<bool> warned{false};  // Once per process: the loops still run.
  prepared->fn = LoadGeneratedFunction(instr, "the loop at " + instr.loc, warned);
  instr.prepared = std::move(prepared);
  return Status();
}

// The argument array of a generated function (operand pointers, then result pointers),
// after checking that the code at its address carries its symbol's tag and that every
// operand holds the bytes the code reads; results are allocated. `args` holds
// in_bytes.size() + out_bytes.size() entries. `what` names the kernel
// in errors ("jit_loop", "jit_block").
Status GeneratedCallArgs(KernelContext& ctx, const char* what, const GeneratedFunction& fn,
                         const std::vector<int64_t>& in_bytes,
                         const std::vector<int64_t>& out_bytes, GeneratedArgs& args) {
  if (!fn.Verify()) {
    return Internal("workshop: ", what, " at ", ctx.instr.loc, ": the code at its function's ",
                    "address is not ", ctx.instr.attr<std::string>("symbol"),
                    " (its tag differs); not calling it");
  }
  const size_t n_in = in_bytes.size(), n_out = out_bytes.size();
  if (ctx.in_storage.size() != n_in) throw PlanError("operand count");
  for (size_t i = 0; i < n_in; ++i) {
    const auto& storage = ctx.in_storage[i];
    if (storage == nullptr || static_cast<int64_t>(storage->size()) < in_bytes[i]) {
      return Internal("workshop: ", what, " at ", ctx.instr.loc, " operand ", i, " is too small");
    }
    args[i] = storage->data();
  }
  ctx.out_storage.resize(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, out_bytes[i], &ctx.out_storage[i]));
    args[n_in + i] = ctx.out_storage[i]->data();
  }
  return Status();
}

// The generated loop running on this thread, for the call sites it calls back
// (WorkshopJitRun): the launch whose partition and rendezvous a case's branch runs with,
// and the first error of a call site, which the loop reports once its function returns
// (the generated code leaves the loop at the first failed call; its results are then
// discarded).
struct RunningLoop {
  const LaunchContext* launch = nullptr;
  Status error;
};
thread_local RunningLoop* running_loop = nullptr;

Status JitLoop(KernelContext& ctx) {
  const auto* prepared = static_cast<const PreparedLoop*>(ctx.instr.prepared.get());
  if (prepared == nullptr || prepared->fn.fn == nullptr) return RunWhile(ctx);
  const size_t n_args = prepared->in_bytes.size() + prepared->out_bytes.size();
  GeneratedArgs args(n_args + (prepared->scratch >= 0 ? 1 : 0));
  WORKSHOP_RETURN_IF_ERROR(GeneratedCallArgs(ctx, "jit_loop", prepared->fn, prepared->in_bytes,
                                             prepared->out_bytes, args));
  // The values the loop keeps in memory, one block for the whole run (charged to the
  // device's memory like any buffer).
  std::shared_ptr<Storage> scratch;
  if (prepared->scratch >= 0) {
    WORKSHOP_RETURN_IF_ERROR(AllocateFor(ctx, std::max<int64_t>(prepared->scratch, 1), &scratch));
    args[n_args] = scratch->data();
  }
  RunningLoop running{&ctx.launch, Status()};
  RunningLoop* const outer = running_loop;  // a loop inside a case inside a loop
  running_loop = &running;
  reinterpret_cast<LoopFn>(prepared->fn.fn)(args.data(), prepared->calls.data());
  running_loop = outer;
  return running.error;
}

// jit_block: straight-line small ops of an interpreted loop body or branch (threefry
// hashes, index bookkeeping) compiled into one function `void symbol(void** args)`, args
// = operand pointers, then result pointers (compiler/codegen compile_blocks). ins/outs
// are the block's; attr body: the same instructions as a sub-plan (params = ins, results
// = outs), which runs interpreted when the code is unavailable.
struct PreparedBlock {
  GeneratedFunction fn;
  std::vector<int64_t> in_bytes, out_bytes;
};

Status PrepareJitBlock(Instr& instr) {
  const auto& body = instr.attr<std::shared_ptr<const Plan>>("body");
  if (body == nullptr) throw PlanError("null body");
  if (body->params.size() != instr.ins.size() || body->results.size() != instr.outs.size()) {
    throw PlanError("the body does not match the block's operands and results");
  }
  auto prepared = std::make_shared<PreparedBlock>();
  for (int slot : body->params) prepared->in_bytes.push_back(body->slots[slot].byte_size());
  for (int slot : body->results) prepared->out_bytes.push_back(body->slots[slot].byte_size());
  static std::atomic<bool> warned{false};  // Once per process: the blocks still run.
  prepared->fn = LoadGeneratedFunction(instr, "the block at " + instr.loc, warned);
  instr.prepared = std::move(prepared);
  return Status();
}

Status JitBlock(KernelContext& ctx) {
  const auto* prepared = static_cast<const PreparedBlock*>(ctx.instr.prepared.get());
  if (prepared == nullptr || prepared->fn.fn == nullptr) {
    const Plan& body = SubPlan(ctx, "body");
    return RunSubPlan(ctx, body, ctx.in_storage, &ctx.out_storage);
  }
  GeneratedArgs args(prepared->in_bytes.size() + prepared->out_bytes.size());
  WORKSHOP_RETURN_IF_ERROR(GeneratedCallArgs(ctx, "jit_block", prepared->fn, prepared->in_bytes,
                                             prepared->out_bytes, args));
  reinterpret_cast<void (*)(void* const*)>(prepared->fn.fn)(args.data());
  return Status();
}

}  // namespace

// Calls back into the interpreter's kernels from generated code, for the ops the tier does
// not emit itself (transcendentals, rounding, remainder, power: compiler/codegen
// loops.py CALLED): the generated loop stores the operands to its stack, calls the
// kernel on the same n elements as the interpreted loop would, and loads the result,
// so the bits are the interpreter's by construction. The code generator resolves
// `WorkshopJitKernelHandle(op)` once per op and process and links it by symbol, so
// cached object code stays valid in the next process.
extern "C" __attribute__((visibility("default"))) const void* WorkshopJitKernelHandle(
    const char* op) {
  return FindKernel(op);
}

// The plugin's own vector functions that generated fusions call (f32 log and cos:
// kernels/math/vector_math.h OwnVectorFunction), by vector-ABI name; nullptr if unknown.
extern "C" __attribute__((visibility("default"))) const void* WorkshopJitVectorFunction(
    const char* name) {
  return name == nullptr ? nullptr : OwnVectorFunction(name);
}

extern "C" __attribute__((visibility("default"))) int WorkshopJitCall(const void* kernel,
                                                                      int in_dtype, int out_dtype,
                                                                      int num_ins, void* const* ins,
                                                                      void* out, int64_t n) {
  static const Instr* const instr = [] {
    auto* i = new Instr;
    i->op = "generated loop callback";
    i->loc = "jit_loop";
    return i;
  }();
  static const LaunchContext launch;
  thread_local Dims dims(1);
  dims[0] = n;
  // The operand lists live on between calls (the call is per op per iteration: a
  // malloc each time was a third of a scalar tanh's cost).
  thread_local std::vector<Tensor> ins_scratch, outs_scratch;
  KernelContext ctx{*instr, std::move(ins_scratch), std::move(outs_scratch), launch, {}, {}};
  ctx.ins.clear();
  ctx.outs.clear();
  for (int i = 0; i < num_ins; ++i) {
    ctx.ins.push_back(Tensor{static_cast<DType>(in_dtype), &dims, ins[i]});
  }
  ctx.outs.push_back(Tensor{static_cast<DType>(out_dtype), &dims, out});
  int result = 1;
  try {
    result = static_cast<const KernelDef*>(kernel)->fn(ctx).ok() ? 0 : 1;
  } catch (...) {  // Never unwind through generated code.
  }
  ins_scratch = std::move(ctx.ins);
  outs_scratch = std::move(ctx.outs);
  return result;
}

namespace {

// A case (compiler/codegen loops.interpreted_case) or a nested loop at a call site: its
// operands, at the generated code's pointers, become Storage views the kernel runs on,
// as the interpreter's would; each result is then copied to its pointer unless it is
// there already (a branch passing a resident value through). The views stay referenced
// here until the kernel is done, so no kernel inside updates one in place (a resident
// operand is the loop's own operand buffer, or read later in the step): a result is
// always a fresh Storage or one of the views.
Status RunManaged(KernelContext& ctx, const Plan& plan, void* const* ins, void* const* outs) {
  const Instr& instr = ctx.instr;
  StorageList views;
  for (size_t i = 0; i < instr.ins.size(); ++i) {
    views.push_back(Storage::View(ins[i], plan.slots[instr.ins[i]].byte_size(), nullptr));
  }
  ctx.in_storage = views;
  WORKSHOP_RETURN_IF_ERROR(instr.kernel->fn(ctx));
  if (ctx.out_storage.size() != instr.outs.size()) throw PlanError(instr.op + " result count");
  // A result that is another result's destination (a branch swapping two resident values)
  // is copied aside first, so no copy reads what an earlier one wrote.
  std::vector<std::vector<char>> aside(instr.outs.size());
  for (size_t j = 0; j < instr.outs.size(); ++j) {
    const auto& result = ctx.out_storage[j];
    const int64_t bytes = plan.slots[instr.outs[j]].byte_size();
    if (result == nullptr || static_cast<int64_t>(result->size()) < bytes) {
      throw PlanError(instr.op + " result smaller than its slot");
    }
    for (size_t k = 0; k < instr.outs.size(); ++k) {
      if (k != j && result->data() == outs[k] && result->data() != outs[j]) {
        const char* data = static_cast<const char*>(result->data());
        aside[j].assign(data, data + bytes);
      }
    }
  }
  for (size_t j = 0; j < instr.outs.size(); ++j) {
    const int64_t bytes = plan.slots[instr.outs[j]].byte_size();
    const void* from = aside[j].empty() ? ctx.out_storage[j]->data() : aside[j].data();
    if (from != outs[j]) std::memcpy(outs[j], from, static_cast<size_t>(bytes));
  }
  ctx.out_storage.clear();
  return Status();
}

}  // namespace

// Runs call site `site` (a CallSite) on operand and result pointers, with the slot types
// of its plan: the interpreter's kernel on the interpreter's shapes, or a case's branch.
// Returns 0, or 1 after recording the error for the running loop (JitLoop reports it).
extern "C" __attribute__((visibility("default"))) int WorkshopJitRun(const void* site,
                                                                     void* const* ins,
                                                                     void* const* outs) {
  static const LaunchContext no_launch;
  const LaunchContext& launch = running_loop != nullptr && running_loop->launch != nullptr
                                    ? *running_loop->launch
                                    : no_launch;
  const auto* call = static_cast<const CallSite*>(site);
  const Instr& instr = *call->instr;
  const Plan& plan = *call->plan;
  if (instr.kernel->manages_outputs) {  // a case or a loop (IsManagedCallSite)
    KernelContext ctx{instr, {}, {}, launch, {}, {}};
    for (size_t i = 0; i < instr.ins.size(); ++i) {
      const SlotType& type = plan.slots[instr.ins[i]];
      ctx.ins.push_back(Tensor{type.dtype, &type.dims, ins[i]});
    }
    Status status;
    try {
      status = RunManaged(ctx, plan, ins, outs);
    } catch (const std::exception& e) {  // Never unwind through generated code.
      status =
          Internal("workshop: ", instr.op, " at ", instr.loc, " in a generated loop: ", e.what());
    } catch (...) {
      status = Internal("workshop: ", instr.op, " at ", instr.loc, " in a generated loop failed");
    }
    if (status.ok()) return 0;
    if (running_loop != nullptr && running_loop->error.ok()) running_loop->error = status;
    return 1;
  }
  thread_local std::vector<Tensor> ins_scratch, outs_scratch;
  KernelContext ctx{instr, std::move(ins_scratch), std::move(outs_scratch), launch, {}, {}};
  ctx.ins.clear();
  ctx.outs.clear();
  for (size_t i = 0; i < instr.ins.size(); ++i) {
    const SlotType& type = plan.slots[instr.ins[i]];
    ctx.ins.push_back(Tensor{type.dtype, &type.dims, ins[i]});
  }
  for (size_t i = 0; i < instr.outs.size(); ++i) {
    const SlotType& type = plan.slots[instr.outs[i]];
    ctx.outs.push_back(Tensor{type.dtype, &type.dims, outs[i]});
  }
  Status status;
  try {
    status = instr.kernel->fn(ctx);
  } catch (const std::exception& e) {  // Never unwind through generated code.
    status =
        Internal("workshop: ", instr.op, " at ", instr.loc, " in a generated loop: ", e.what());
  } catch (...) {
    status = Internal("workshop: ", instr.op, " at ", instr.loc, " in a generated loop failed");
  }
  ins_scratch = std::move(ctx.ins);
  outs_scratch = std::move(ctx.outs);
  if (status.ok()) return 0;
  if (running_loop != nullptr && running_loop->error.ok()) running_loop->error = status;
  return 1;
}

WORKSHOP_REGISTER_KERNEL("jit_loop", .fn = JitLoop, .manages_outputs = true,
                         .prepare = PrepareJitLoop);
WORKSHOP_REGISTER_KERNEL("jit_block", .fn = JitBlock, .manages_outputs = true,
                         .prepare = PrepareJitBlock, .check = CheckBodySlots);

}  // namespace workshop
