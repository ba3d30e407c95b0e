// What the jit_loop and jit_fusion kernels share about the functions the code-generation
// tier generates (compiler/codegen, docs/codegen.md "Code generation"): loading one when its
// plan is prepared, and the argument array it is called with.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/compiler_bridge.h"
#include "runtime/plan.h"

namespace workshop {

// The address of `instr`'s generated function (attributes backend, code, symbol), compiled
// or found in the process's cache through the Python side; null when that fails (no
// Python or no llvmlite in this process: a deserialized executable), and then, the first
// time `warned` sees a failure, one line on stderr naming `what` (e.g. "the loop at
// <loc>") and the reason. The caller interprets instead.
inline void* LoadGeneratedFunction(const Instr& instr, const std::string& what,
                                   std::atomic<bool>& warned) {
  std::string error;
  void* fn = LoadGeneratedCode(instr.attr<std::string>("backend"), instr.attr<std::string>("code"),
                               instr.attr<std::string>("symbol"), &error);
  if (fn == nullptr && !warned.exchange(true)) {
    std::fprintf(stderr,
                 "workshop: generated code for %s is unavailable (%s); "
                 "interpreting it\n",
                 what.c_str(), error.c_str());
  }
  return fn;
}

// The `void** args` of a generated function: operand pointers, then result pointers. Up
// to kInline of them live in the object (on the caller's stack: a call allocates
// nothing in the common case), more on the heap.
class GeneratedArgs {
 public:
  explicit GeneratedArgs(size_t n) {
    if (n > kInline) {
      heap_.resize(n);
      data_ = heap_.data();
    }
  }
  GeneratedArgs(const GeneratedArgs&) = delete;  // data_ may point into this object
  GeneratedArgs& operator=(const GeneratedArgs&) = delete;

  void*& operator[](size_t i) { return data_[i]; }
  void** data() { return data_; }

 private:
  static constexpr size_t kInline = 32;
  void* inline_[kInline];
  std::vector<void*> heap_;
  void** data_ = inline_;
};

}  // namespace workshop
