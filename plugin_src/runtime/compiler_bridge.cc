#include "runtime/compiler_bridge.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kernels/kernel.h"
#include "runtime/float_mode.h"

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

// Binds every instruction to its kernel and checks slot indices, so that a malformed plan is
// a compile error rather than an out-of-bounds access at run time.
Status Validate(const Plan& plan, const std::string& name) {
  const int num_slots = static_cast<int>(plan.slots.size());
  auto bad_slot = [&](int s) { return s < 0 || s >= num_slots; };
  for (int s : plan.params) {
    if (bad_slot(s)) return Internal("workshop: plan of ", name, " has a bad parameter slot");
  }
  for (int s : plan.results) {
    if (bad_slot(s)) return Internal("workshop: plan of ", name, " has a bad result slot");
  }
  if (plan.frees.size() != plan.instrs.size()) {
    return Internal("workshop: plan of ", name, " has ", plan.frees.size(), " free lists for ",
                    plan.instrs.size(), " instructions");
  }
  for (size_t i = 0; i < plan.instrs.size(); ++i) {
    const Instr& instr = plan.instrs[i];
    for (const std::vector<int>* slots : {&instr.ins, &instr.outs, &plan.frees[i]}) {
      for (int s : *slots) {
        if (bad_slot(s)) return Internal("workshop: '", instr.op, "' at ", instr.loc,
                                         " refers to slot ", s, " of ", num_slots);
      }
    }
    for (const auto& [key, attr] : instr.attrs) {
      if (auto* sub = std::get_if<std::shared_ptr<const Plan>>(&attr)) {
        WORKSHOP_RETURN_IF_ERROR(Validate(**sub, name));
      }
    }
  }
  return Status();
}

Status BindKernels(Plan& plan) {
  for (Instr& instr : plan.instrs) {
    instr.kernel = FindKernel(instr.op);
    if (instr.kernel == nullptr) {
      return Unimplemented("workshop: no kernel for op 'stablehlo.", instr.op, "' at ",
                           instr.loc);
    }
    if (instr.kernel->aliases_operand && (instr.ins.empty() || instr.outs.size() != 1)) {
      return Internal("workshop: '", instr.op, "' at ", instr.loc, " must have one operand");
    }
    for (auto& [key, attr] : instr.attrs) {
      if (auto* sub = std::get_if<std::shared_ptr<const Plan>>(&attr)) {
        auto copy = std::make_shared<Plan>(**sub);
        WORKSHOP_RETURN_IF_ERROR(BindKernels(*copy));
        attr = std::shared_ptr<const Plan>(std::move(copy));
      }
    }
  }
  return Status();
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
  GilState gil;
  ScopedIeeeSubnormals ieee;  // The caller's thread may flush subnormals: see float_mode.h.
  try {
    py::object executable = py::module_::import(kCompilerModule)
                                .attr("compile_program")(py::bytes(code), format,
                                                         py::bytes(options), num_devices);
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
  } catch (py::error_already_set& e) {
    return FromPythonError(e);
  } catch (const py::cast_error& e) {
    return Internal("workshop: the compiler returned a malformed plan: ", e.what());
  }
  WORKSHOP_RETURN_IF_ERROR(Validate(program->plan, program->name));
  return BindKernels(program->plan);
}

}  // namespace workshop
