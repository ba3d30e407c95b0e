// Whether the calling thread is running a host callback (kernels/callback.cc).
//
// A program launched from inside a callback (the Python function calls jax.jit on a
// workshop device and waits for the result) must run on that thread: queued on a device
// worker it would wait behind the program that is suspended in the callback, which waits
// for it (a deadlock). XLA:CPU's client makes the same exception
// (ThisThreadIsInsideHostCallback() in xla/pjrt/cpu/cpu_client.cc: such a launch executes
// inline). LoadedExecutable::Execute reads it; see docs/extensions.md "Host callbacks".
#pragma once

namespace workshop {

// Depth of nested host callbacks on this thread (a callback may launch a program whose own
// callback launches another).
inline thread_local int host_callback_depth = 0;

inline bool InsideHostCallback() { return host_callback_depth > 0; }

struct ScopedHostCallback {
  ScopedHostCallback() { ++host_callback_depth; }
  ~ScopedHostCallback() { --host_callback_depth; }
  ScopedHostCallback(const ScopedHostCallback&) = delete;
  ScopedHostCallback& operator=(const ScopedHostCallback&) = delete;
};

}  // namespace workshop
