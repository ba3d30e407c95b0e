// What the jit_loop and jit_fusion kernels share about the functions the code-generation
// tier generates (compiler/codegen, docs/codegen.md "Code generation"): loading one when its
// plan is prepared, and the argument array it is called with.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
//
// Each prepared instruction holds its own GeneratedFunction: the address and the tag the
// function must carry. llvm functions carry their symbol's 64-bit hash (the 16 hex digits
// ending workshop_loop_<hash> / workshop_fusion_<hash>) as prefix data, the 8 bytes just
// before the entry (compiler/codegen with_tag). The tag is checked here and, by
// Verify(), before every call: a plan never jumps to code other than the function it
// names (were the address stale or another function's, the call is an error instead).
// gcc functions, each in its own shared library that stays loaded, have no tag.
struct GeneratedFunction {
  void* fn = nullptr;
  uint64_t tag = 0;
  bool tagged = false;

  // The tag in front of `fn` (prefix data); a plain load, cheap enough for every call.
  static uint64_t TagAt(const void* fn) {
    uint64_t tag;
    std::memcpy(&tag, static_cast<const char*>(fn) - sizeof(tag), sizeof(tag));
    return tag;
  }
  bool Verify() const { return fn != nullptr && (!tagged || TagAt(fn) == tag); }
};

// The tag of generated function `symbol`: the 16 hex digits after its last '_'.
inline bool SymbolTag(const std::string& symbol, uint64_t* tag) {
  const size_t underscore = symbol.rfind('_');
  if (underscore == std::string::npos || symbol.size() - underscore - 1 != 16) return false;
  uint64_t value = 0;
  for (size_t i = underscore + 1; i < symbol.size(); ++i) {
    const char c = symbol[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  *tag = value;
  return true;
}

inline GeneratedFunction LoadGeneratedFunction(const Instr& instr, const std::string& what,
                                               std::atomic<bool>& warned) {
  const std::string& backend = instr.attr<std::string>("backend");
  const std::string& symbol = instr.attr<std::string>("symbol");
  GeneratedFunction out;
  std::string error;
  if (backend == "llvm" && !SymbolTag(symbol, &out.tag)) {
    error = "its symbol '" + symbol + "' carries no tag";
  } else {
    out.tagged = backend == "llvm";
    out.fn = LoadGeneratedCode(backend, instr.attr<std::string>("code"), symbol, &error);
    if (out.fn != nullptr && !out.Verify()) {
      out.fn = nullptr;
      error = "the function loaded for " + symbol + " does not carry its tag";
    }
  }
  if (out.fn == nullptr && !warned.exchange(true)) {
    std::fprintf(stderr,
                 "workshop: generated code for %s is unavailable (%s); "
                 "interpreting it\n",
                 what.c_str(), error.c_str());
  }
  return out;
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
