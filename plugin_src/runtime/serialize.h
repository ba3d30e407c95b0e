// Executable serialization (PJRT_Executable_Serialize / DeserializeAndLoad), which is what
// JAX's persistent compilation cache stores.
//
// The blob holds the compiled Program (plan, device assignment, metadata) *and* the
// PJRT_Program plus compile options it came from, behind a header naming the format
// version and the plugin build:
//
//   header: str "WSEX"  u32 format version  u64 body size  u32 CRC-32 of the body
//   body:   str build id  str source code, format, options
//           u8 has_plan  [Program fields, Plan (recursively, for sub-plans)]
//
// Blobs come from disk (JAX's cache, AOT files) and other machines, so loading trusts
// nothing: a wrong size or checksum is rejected before parsing, and a parsed plan passes
// the same validation as a freshly compiled one (PrepareProgram) before it can run.
//
// Integers are little-endian, strings and lists are u64-length-prefixed. A blob written by
// this very build loads the plan directly (no Python, no recompilation). Kernel attributes
// are not versioned, so a blob from any other build is recompiled from its source instead;
// a blob that is not ours, of another format version, truncated, or failing its checksum
// or validation is INVALID_ARGUMENT naming what was wrong.
#pragma once

#include <string>
#include <string_view>

#include "runtime/plan.h"
#include "runtime/status.h"

namespace workshop {

std::string SerializeProgram(const Program& program);

// What a blob holds. `has_plan` is false when it was written by another build (or another
// format version): `program` then has only the source_* fields set.
struct SerializedProgram {
  Program program;
  bool has_plan = false;
};

Status DeserializeProgram(std::string_view blob, SerializedProgram* out);

// Identifies this build of the plugin (version and compile time of serialize.cc).
const std::string& BuildId();

}  // namespace workshop
