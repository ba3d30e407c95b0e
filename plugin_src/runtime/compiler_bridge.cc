#include "runtime/compiler_bridge.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/float_mode.h"
#include "runtime/python_gate.h"

namespace py = pybind11;

namespace workshop {
namespace {

constexpr const char* kCompilerModule = "jax_plugins.workshop.compiler";

// RAII for PyGILState_Ensure/Release: safe whether or not this thread already holds the GIL.
class GilState {
 public:
  GilState() : state_(PyGILState_Ensure()) {}
  ~GilState() { PyGILState_Release(state_); }
  GilState(const GilState&) = delete;
  GilState& operator=(const GilState&) = delete;

 private:
  PyGILState_STATE state_;
};

Plan ToPlan(const py::handle& plan);

Attr ToAttr(const py::handle& value) {
  // bool before int: Python's bool is an int subclass.
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value)) {
    return value.cast<int64_t>();
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::bytes>(value) || py::isinstance<py::str>(value)) {
    return value.cast<std::string>();
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
    if (seq.size() > 0 && !py::isinstance<py::int_>(seq[0])) {
      return value.cast<std::vector<IntList>>();
    }
    return value.cast<IntList>();
  }
  return std::make_shared<const Plan>(ToPlan(value));
}

Plan ToPlan(const py::handle& py_plan) {
  Plan plan;
  for (const py::handle& slot : py_plan.attr("slots")) {
    auto [dtype, dims] = slot.cast<std::pair<int, IntList>>();
    plan.slots.push_back(SlotType{static_cast<DType>(dtype), dims});
  }
  plan.params = py_plan.attr("params").cast<std::vector<int>>();
  plan.results = py_plan.attr("results").cast<std::vector<int>>();
  plan.frees = py_plan.attr("frees").cast<std::vector<std::vector<int>>>();
  for (const py::handle& py_instr : py_plan.attr("instrs")) {
    Instr instr;
    instr.op = py_instr.attr("op").cast<std::string>();
    instr.ins = py_instr.attr("ins").cast<std::vector<int>>();
    instr.outs = py_instr.attr("outs").cast<std::vector<int>>();
    instr.loc = py_instr.attr("loc").cast<std::string>();
    for (const auto& [key, value] : py_instr.attr("attrs").cast<py::dict>()) {
      instr.attrs.emplace(key.cast<std::string>(), ToAttr(value));
    }
    plan.instrs.push_back(std::move(instr));
  }
  return plan;
}

Status FromPythonError(const py::error_already_set& e) {
  Code code = Code::kInternal;
  if (e.matches(PyExc_ValueError)) code = Code::kInvalidArgument;
  if (e.matches(PyExc_NotImplementedError)) code = Code::kUnimplemented;
  std::string message = py::str(e.value());
  if (code == Code::kInternal) message = StrCat(py::str(e.type().attr("__name__")), ": ", message);
  return Status(code, message);
}

}  // namespace

Status CompileWithPython(const std::string& code, const std::string& format,
                         const std::string& options, int num_devices, Program* program) {
  if (!Py_IsInitialized()) {
    return FailedPrecondition("workshop: compiling needs a Python interpreter with ",
                              kCompilerModule, " importable");
  }
  PythonGate::Entry entry;
  if (!entry.ok()) return FailedPrecondition("workshop: cannot compile: Python is exiting");
  GilState gil;
  DrainReleasedPythonReferences();
  ScopedIeeeSubnormals ieee;  // The caller's thread may flush subnormals: see float_mode.h.
  try {
    py::object executable =
        py::module_::import(kCompilerModule)
            .attr("compile_program")(py::bytes(code), format, py::bytes(options), num_devices);
    program->name = executable.attr("name").cast<std::string>();
    program->plan = ToPlan(executable.attr("plan"));
    program->num_replicas = executable.attr("num_replicas").cast<int>();
    program->num_partitions = executable.attr("num_partitions").cast<int>();
    program->device_assignment =
        executable.attr("device_assignment").cast<std::vector<std::vector<int>>>();
    program->device_assignment_proto =
        executable.attr("device_assignment_proto").cast<std::string>();
    program->donations = executable.attr("donations").cast<std::vector<std::pair<int, int>>>();
    program->fingerprint = executable.attr("fingerprint").cast<std::string>();
    program->text = executable.attr("text").cast<std::string>();
    program->parameter_memory_kinds =
        executable.attr("parameter_memory_kinds").cast<std::vector<std::string>>();
    program->output_memory_kinds =
        executable.attr("output_memory_kinds").cast<std::vector<std::string>>();
    program->parameter_layouts =
        executable.attr("parameter_layouts").cast<std::vector<MinorToMajor>>();
    program->output_layouts = executable.attr("output_layouts").cast<std::vector<MinorToMajor>>();
    program->optimized_program = executable.attr("optimized_program").cast<std::string>();
    program->cost_analysis =
        executable.attr("cost_analysis").cast<std::vector<std::pair<std::string, double>>>();
  } catch (py::error_already_set& e) {
    return FromPythonError(e);
  } catch (const py::cast_error& e) {
    return Internal("workshop: the compiler returned a malformed plan: ", e.what());
  }
  program->source_code = code;
  program->source_format = format;
  program->source_options = options;
  return PrepareProgram(*program);
}

std::chrono::milliseconds CompileGilWait() {
  static const std::chrono::milliseconds wait = [] {
    const char* text = std::getenv("WORKSHOP_COMPILE_GIL_WAIT_S");
    double seconds = text != nullptr ? std::strtod(text, nullptr) : 0.0;
    if (!(seconds > 0.0 && seconds < 86400.0)) seconds = 30.0;
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }();
  return wait;
}

Status CompileWithPythonBounded(const std::string& code, const std::string& format,
                                const std::string& options, int num_devices, Program* program) {
  if (!Py_IsInitialized()) {
    return FailedPrecondition("workshop: compiling needs a Python interpreter with ",
                              kCompilerModule, " importable");
  }
  // This thread holds the GIL (a compile-only client calls on the caller's thread): no wait.
  if (PyGILState_Check()) return CompileWithPython(code, format, options, num_devices, program);
  struct Job {
    std::mutex mu;
    std::condition_variable cv;
    bool started = false, done = false, abandoned = false;
    Status status;
  };
  auto job = std::make_shared<Job>();
  // The references below stay valid: once the job has started, this thread waits for it
  // to finish; an abandoned job never reads them.
  std::thread([job, &code, &format, &options, num_devices, program] {
    // The interpreter may be exiting by the time an abandoned job gets here.
    PythonGate::Entry entry;
    if (!entry.ok()) {
      {
        std::lock_guard<std::mutex> lock(job->mu);
        job->status = FailedPrecondition("workshop: cannot compile: Python is exiting");
        job->started = job->done = true;
      }
      job->cv.notify_all();
      return;
    }
    const PyGILState_STATE state = PyGILState_Ensure();
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->abandoned) {
        PyGILState_Release(state);
        return;
      }
      job->started = true;
    }
    job->cv.notify_all();
    Status status = CompileWithPython(code, format, options, num_devices, program);
    PyGILState_Release(state);
    {
      std::lock_guard<std::mutex> lock(job->mu);
      job->status = std::move(status);
      job->done = true;
    }
    job->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(job->mu);
  const std::chrono::milliseconds wait = CompileGilWait();
  if (!job->cv.wait_for(lock, wait, [&] { return job->started; })) {
    job->abandoned = true;
    return Status(
        Code::kDeadlineExceeded,
        StrCat(
            "workshop: PJRT_Compile waited ", wait.count() / 1000.0,
            " s for the Python GIL, which the compiler needs: the caller holds it while it waits "
            "for this compile (jaxlib's jax::CompileWithTopology does, when JAX cross-compiles "
            "for a topology through a real client); compile through the compile-only client "
            "(jax_plugins.workshop makes JAX do that for platform 'workshop') or release the GIL"));
  }
  job->cv.wait(lock, [&] { return job->done; });
  return job->status;
}

Status RetargetWithPython(const std::string& options, int num_devices, Program* program) {
  if (!Py_IsInitialized()) {
    return FailedPrecondition(
        "workshop: reading compile options needs a Python interpreter "
        "with ",
        kCompilerModule, " importable");
  }
  PythonGate::Entry entry;
  if (!entry.ok()) return FailedPrecondition("workshop: cannot load: Python is exiting");
  GilState gil;
  DrainReleasedPythonReferences();
  try {
    py::object parsed = py::module_::import(kCompilerModule)
                            .attr("parse_options")(py::bytes(options), num_devices,
                                                   program->num_replicas, program->num_partitions);
    const int replicas = parsed.attr("num_replicas").cast<int>();
    const int partitions = parsed.attr("num_partitions").cast<int>();
    if (replicas != program->num_replicas || partitions != program->num_partitions) {
      return InvalidArgument("workshop: ", program->name, " was compiled for ",
                             program->num_replicas, " replicas x ", program->num_partitions,
                             " partitions; the compile options ask for ", replicas, " x ",
                             partitions);
    }
    program->device_assignment =
        parsed.attr("device_assignment").cast<std::vector<std::vector<int>>>();
    program->device_assignment_proto = parsed.attr("device_assignment_proto").cast<std::string>();
  } catch (py::error_already_set& e) {
    return FromPythonError(e);
  } catch (const py::cast_error& e) {
    return Internal("workshop: the compiler returned malformed options: ", e.what());
  }
  return Status();
}

void* LoadGeneratedCode(const std::string& backend, const std::string& code,
                        const std::string& symbol, std::string* error) {
  if (!Py_IsInitialized()) {
    *error = "no Python interpreter";
    return nullptr;
  }
  PythonGate::Entry entry;
  if (!entry.ok()) {
    *error = "the Python interpreter is exiting";
    return nullptr;
  }
  GilState gil;
  DrainReleasedPythonReferences();
  try {
    const uintptr_t address = py::module_::import("jax_plugins.workshop.compiler.codegen")
                                  .attr("load")(backend, code, symbol)
                                  .cast<uintptr_t>();
    return reinterpret_cast<void*>(address);
  } catch (py::error_already_set& e) {
    *error = FromPythonError(e).message();
  } catch (const py::cast_error& e) {
    *error = e.what();
  }
  return nullptr;
}

}  // namespace workshop
