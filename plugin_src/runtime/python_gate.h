// Entering Python from threads Python does not own (device workers, jaxlib's threads),
// safely at any time, interpreter shutdown included.
//
// CPython ends a thread that asks for the GIL once finalization has begun (take_gil calls
// pthread_exit). On a C++ thread that unwinds through frames that must not throw (a
// destructor, a noexcept function) and the process aborts: "terminate called without an
// active exception" (jax#16637, #23501: a program holding a host callback destroyed on a
// worker at exit). So:
//  * PythonGate: every entry into Python from such a thread holds a PythonGate::Entry.
//    The plugin's exit hook (jax_plugins.workshop.extensions.callbacks, atexit, before
//    the interpreter finalizes) closes the gate, waiting (bounded) for entries in
//    progress; a closed gate refuses entry, so nothing asks for the GIL afterwards.
//  * ReleasePythonReference: a destructor never takes the GIL. It drops the reference
//    at once when this thread holds the GIL; otherwise queues it, and the next entry that
//    holds the GIL (a compile, a callback) drops the queued ones. Queued references left
//    at exit are leaked on purpose (the process is ending).
#pragma once

#include <Python.h>

namespace workshop {

class PythonGate {
 public:
  // Enters if the interpreter is usable and the gate open; ok() says whether it did.
  // Take the GIL only after ok(). Nested entries on one thread are fine.
  class Entry {
   public:
    Entry();
    ~Entry();
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    bool ok() const { return ok_; }

   private:
    bool ok_ = false;
  };

  // Refuses new entries and waits up to `timeout_s` for those in progress; returns how
  // many are still in progress. Idempotent. Call without the GIL (others may need it).
  static int Close(double timeout_s);
  static bool closed();
};

// Drops a strong reference to `object` without ever waiting for the GIL (see above).
void ReleasePythonReference(PyObject* object);

// Drops the references ReleasePythonReference queued. Call with the GIL held.
void DrainReleasedPythonReferences();

}  // namespace workshop
