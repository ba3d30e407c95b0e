// The bridge from PJRT_Client_Compile to the Python compiler.
//
// jaxlib calls Compile on one of its own threads with the GIL released; we take the GIL
// (PyGILState_Ensure), call jax_plugins.workshop.compiler.compile_program and convert the
// returned Executable into a Program once, so execution never needs Python.
#pragma once

#include <chrono>
#include <string>

#include "runtime/plan.h"
#include "runtime/status.h"

namespace workshop {

// `code`/`format` are PJRT_Program's fields, `options` the serialized CompileOptionsProto.
// Python exceptions become errors: ValueError -> INVALID_ARGUMENT, NotImplementedError ->
// UNIMPLEMENTED, anything else -> INTERNAL, with the exception's message. Fails with
// FAILED_PRECONDITION when the process has no Python interpreter.
Status CompileWithPython(const std::string& code, const std::string& format,
                         const std::string& options, int num_devices, Program* program);

// CompileWithPython for PJRT_Compile (a topology, no client), which jaxlib may call on a
// thread of its own while the thread that asked for the compile holds the GIL and waits
// for it (jax::CompileWithTopology, when JAX cross-compiles through a real client): the
// GIL would never come. When this thread does not hold the GIL, another thread takes it
// and compiles; if it cannot within CompileGilWait() this returns DEADLINE_EXCEEDED
// saying so (that thread is left waiting, and gives the GIL straight back once it gets it).
Status CompileWithPythonBounded(const std::string& code, const std::string& format,
                                const std::string& options, int num_devices, Program* program);

// How long CompileWithPythonBounded waits for the GIL: 30 s, or WORKSHOP_COMPILE_GIL_WAIT_S
// seconds (tests use a short wait).
std::chrono::milliseconds CompileGilWait();

// Re-targets a compiled program to the device assignment in `options` (a serialized
// CompileOptionsProto, e.g. the overridden options of PJRT_Executable_DeserializeAndLoad):
// sets program->device_assignment(_proto). Fails with INVALID_ARGUMENT if the options ask
// for a different replica or partition count, or devices the client doesn't have.
Status RetargetWithPython(const std::string& options, int num_devices, Program* program);

// The address of `symbol` in `code` compiled by the code-generation tier's `backend`
// (jax_plugins.workshop.compiler.codegen.load: llvmlite's JIT, or g++ into a cached shared
// library), kept alive for the life of the process; null, with the reason in `error`, when
// there is no Python interpreter or compiling fails (the caller then interprets).
void* LoadGeneratedCode(const std::string& backend, const std::string& code,
                        const std::string& symbol, std::string* error);

}  // namespace workshop
