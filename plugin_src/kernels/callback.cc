// host_callback: calls a Python function from a running program (jax.pure_callback,
// jax.experimental.io_callback, jax.debug.callback / jax.debug.print).
//
//   ins   the callback's array operands, any dtype and shape (tokens are not passed: the
//         compiler orders side effects by keeping instructions in program order)
//   outs  its array results, any dtype and shape
//   attrs callback_id: int, the key of a live
//         jax_plugins.workshop.extensions.callbacks.HostCallback
//         (the lowering registered it; see docs/extensions.md "Host callbacks")
//
// `prepare` resolves the id to the HostCallback object once, when the plan is prepared
// (compile, or deserialize in the same process), and holds a strong reference for as long
// as the plan lives, so the executable never calls a freed object; an id that is not alive
// (an executable serialized by another process) fails there, at compile/load time.
//
// Running: takes the GIL (PyGILState_Ensure: works whether the calling thread is a device
// worker or jaxlib's thread, with or without the GIL), hands the HostCallback read-only
// memoryviews of the operands and their shapes in this program (it copies them into numpy arrays,
// checks the user's results against the declared shapes and dtypes and returns C-contiguous
// buffers), copies the results into the outputs after checking their byte sizes, and releases the
// memoryviews so no Python object keeps pointing into buffers the executor frees. A Python
// exception becomes an INTERNAL error quoting it: JAX raises it as JaxRuntimeError. Python runs
// with IEEE subnormals (the workers flush them: runtime/float_mode.h), as it would on any Python
// thread. A single-device program the callback launches on a workshop device runs on this thread
// (runtime/host_callback_scope.h), as under XLA:CPU.
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <string>

#include "kernels/core/kernel.h"
#include "runtime/float_mode.h"
#include "runtime/host_callback_scope.h"
#include "runtime/python_gate.h"

namespace py = pybind11;

namespace workshop {
namespace {

constexpr const char* kCallbackModule = "jax_plugins.workshop.extensions.callbacks";

// A strong reference to the HostCallback. The last owner of a program may be any thread
// at any time (a device worker at interpreter exit): the destructor never waits for the
// GIL (runtime/python_gate.h).
struct CallbackRef {
  PyObject* object = nullptr;
  std::string name;

  ~CallbackRef() { ReleasePythonReference(object); }
};

std::string PythonErrorText(const py::error_already_set& e) {
  return StrCat(py::str(e.type().attr("__name__")).cast<std::string>(), ": ",
                py::str(e.value()).cast<std::string>());
}

Status Prepare(Instr& instr) {
  const int64_t id = instr.attr<int64_t>("callback_id");
  PythonGate::Entry entry;
  if (!entry.ok()) {
    return FailedPrecondition("workshop: host callback ", id, " at ", instr.loc,
                              " needs a Python interpreter (none, or it is exiting)");
  }
  py::gil_scoped_acquire gil;
  DrainReleasedPythonReferences();
  try {
    py::object callback = py::module_::import(kCallbackModule).attr("lookup")(id);
    auto ref = std::make_shared<CallbackRef>();
    ref->name = py::str(callback.attr("name")).cast<std::string>();
    ref->object = callback.release().ptr();
    instr.prepared = std::move(ref);
  } catch (py::error_already_set& e) {
    return FailedPrecondition("workshop: host callback ", id, " at ", instr.loc, ": ",
                              PythonErrorText(e));
  }
  return Status();
}

Status Run(KernelContext& ctx) {
  const auto* ref = static_cast<const CallbackRef*>(ctx.instr.prepared.get());
  if (ref == nullptr) {
    return Internal("workshop: host callback at ", ctx.instr.loc, " was not prepared");
  }
  PythonGate::Entry entry;
  if (!entry.ok()) {
    return FailedPrecondition("workshop: host callback '", ref->name, "' at ", ctx.instr.loc,
                              " cannot run: the Python interpreter is shutting down");
  }
  ScopedIeeeSubnormals ieee;
  py::gil_scoped_acquire gil;
  DrainReleasedPythonReferences();
  const std::string where = StrCat("workshop: host callback '", ref->name, "' at ", ctx.instr.loc);
  py::list views;
  py::list shapes;  // The program's shapes: a partitioned callback's are its shards'.
  Status status;
  try {
    for (const Tensor& t : ctx.ins) {
      const int64_t bytes = t.num_elements() * ByteWidth(t.dtype);
      PyObject* view = PyMemoryView_FromMemory(static_cast<char*>(t.data), bytes, PyBUF_READ);
      if (view == nullptr) throw py::error_already_set();
      views.append(py::reinterpret_steal<py::object>(view));
      py::tuple shape(t.dims->size());
      for (size_t d = 0; d < t.dims->size(); ++d) shape[d] = (*t.dims)[d];
      shapes.append(shape);
    }
    py::object results;
    {
      ScopedHostCallback inside;  // Programs the callback launches run on this thread.
      results = py::reinterpret_borrow<py::object>(ref->object)(views, shapes);
    }
    py::sequence seq = results.cast<py::sequence>();
    if (seq.size() != ctx.outs.size()) {
      status = Internal(where, " returned ", seq.size(), " results, expected ", ctx.outs.size());
    }
    for (size_t i = 0; status.ok() && i < ctx.outs.size(); ++i) {
      const Tensor& out = ctx.outs[i];
      const int64_t bytes = out.num_elements() * ByteWidth(out.dtype);
      py::buffer_info info = seq[i].cast<py::buffer>().request();
      const int64_t got = info.size * info.itemsize;
      bool contiguous = true;
      for (py::ssize_t d = info.ndim - 1, stride = info.itemsize; d >= 0; --d) {
        if (info.shape[d] > 1 && info.strides[d] != stride) contiguous = false;
        stride *= info.shape[d];
      }
      if (got != bytes || !contiguous) {
        status = Internal(where, ": result ", i, " has ", got, " bytes",
                          contiguous ? "" : " (not contiguous)", ", expected ", bytes, " for ",
                          ShapeString(out.dtype, *out.dims));
        break;
      }
      if (bytes > 0) std::memcpy(out.data, info.ptr, bytes);
    }
  } catch (py::error_already_set& e) {
    status = Internal(where, " raised ", PythonErrorText(e));
  } catch (const py::cast_error& e) {
    status = Internal(where, " returned something that is not a sequence of buffers: ", e.what());
  }
  // Anything still holding a view would read freed memory later: refuse instead.
  for (const py::handle& view : views) {
    if (PyObject* r = PyObject_CallMethod(view.ptr(), "release", nullptr)) {
      Py_DECREF(r);
    } else {
      PyErr_Clear();
      if (status.ok()) {
        status = Internal(where, " kept a reference to an operand's memory");
      }
    }
  }
  return status;
}

WORKSHOP_REGISTER_KERNEL("host_callback", .fn = Run, .prepare = Prepare);

}  // namespace
}  // namespace workshop
