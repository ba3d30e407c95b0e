#include "runtime/python_gate.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

namespace workshop {
namespace {

struct Gate {
  std::mutex mu;
  std::condition_variable idle;
  int active = 0;
  bool closed = false;
  std::vector<PyObject*> released;  // References waiting for a thread with the GIL.
};

Gate& TheGate() {
  static auto* gate = new Gate();  // Never destroyed: workers may outlive statics.
  return *gate;
}

}  // namespace

PythonGate::Entry::Entry() {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
  Gate& gate = TheGate();
  std::lock_guard<std::mutex> lock(gate.mu);
  if (gate.closed) return;
  ++gate.active;
  ok_ = true;
}

PythonGate::Entry::~Entry() {
  if (!ok_) return;
  Gate& gate = TheGate();
  std::lock_guard<std::mutex> lock(gate.mu);
  if (--gate.active == 0) gate.idle.notify_all();
}

int PythonGate::Close(double timeout_s) {
  Gate& gate = TheGate();
  std::unique_lock<std::mutex> lock(gate.mu);
  gate.closed = true;
  gate.idle.wait_for(lock, std::chrono::duration<double>(timeout_s),
                     [&] { return gate.active == 0; });
  return gate.active;
}

bool PythonGate::closed() {
  Gate& gate = TheGate();
  std::lock_guard<std::mutex> lock(gate.mu);
  return gate.closed;
}

void ReleasePythonReference(PyObject* object) {
  // Once the gate is closed or finalization began the reference is leaked: late in
  // finalization PyGILState_Check answers 1 on any thread (its key is gone).
  if (object == nullptr || !Py_IsInitialized() || _Py_IsFinalizing()) return;
  Gate& gate = TheGate();
  std::unique_lock<std::mutex> lock(gate.mu);
  if (gate.closed) return;
  if (!PyGILState_Check()) {
    gate.released.push_back(object);
    return;
  }
  lock.unlock();
  Py_DECREF(object);
}

void DrainReleasedPythonReferences() {
  std::vector<PyObject*> released;
  {
    Gate& gate = TheGate();
    std::lock_guard<std::mutex> lock(gate.mu);
    released.swap(gate.released);
  }
  // Outside the lock: a decref may run a destructor that releases another reference.
  for (PyObject* object : released) Py_DECREF(object);
}

}  // namespace workshop

// jax_plugins.workshop.extensions.callbacks calls this (ctypes, which releases the GIL)
// from its exit hook, after the programs with host callbacks have finished.
extern "C" __attribute__((visibility("default"))) int WorkshopClosePython(double timeout_s) {
  return workshop::PythonGate::Close(timeout_s);
}
