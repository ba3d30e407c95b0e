// The runtime's pieces: dtypes, events, queues, the collectives' rendezvous, the compile
// callback into compiler.py and the plan executor.
#include "runtime.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <tuple>

namespace py = pybind11;

namespace __NAME__ {

// The element types this plugin stores. Kernels take a subset (kernels.cc).
const DType kDTypes[] = {
    {"pred", PJRT_Buffer_Type_PRED, 1}, {"s8", PJRT_Buffer_Type_S8, 1},
    {"s16", PJRT_Buffer_Type_S16, 2},   {"s32", PJRT_Buffer_Type_S32, 4},
    {"s64", PJRT_Buffer_Type_S64, 8},   {"u8", PJRT_Buffer_Type_U8, 1},
    {"u16", PJRT_Buffer_Type_U16, 2},   {"u32", PJRT_Buffer_Type_U32, 4},
    {"u64", PJRT_Buffer_Type_U64, 8},   {"f16", PJRT_Buffer_Type_F16, 2},
    {"bf16", PJRT_Buffer_Type_BF16, 2}, {"f32", PJRT_Buffer_Type_F32, 4},
    {"f64", PJRT_Buffer_Type_F64, 8},
};

const DType& LookUp(PJRT_Buffer_Type type) {
  for (const DType& d : kDTypes) {
    if (d.type == type) return d;
  }
  Fail(PJRT_Error_Code_UNIMPLEMENTED, "__NAME__: element type ", static_cast<int>(type),
       " (PJRT_Buffer_Type) is not supported");
}

const DType& LookUp(const std::string& name) {
  for (const DType& d : kDTypes) {
    if (d.name == name) return d;
  }
  Fail(PJRT_Error_Code_UNIMPLEMENTED, "__NAME__: element type ", name, " is not supported");
}

int64_t Shape::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// ---- Events.

std::shared_ptr<Event> Event::Ready() {
  auto event = std::make_shared<Event>();
  event->Set();
  return event;
}

void Event::Set(std::optional<Error> error) {
  std::vector<std::function<void(const std::optional<Error>&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
    error_ = std::move(error);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& callback : callbacks) callback(error_);  // outside the lock: they may re-enter
}

std::optional<Error> Event::Await() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return ready_; });
  return error_;
}

bool Event::IsReady() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

std::optional<Error> Event::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Event::OnReady(std::function<void(const std::optional<Error>&)> callback) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(error_);
}

// ---- Queues.

Queue::Queue()
    : worker_([this] {
        std::unique_lock<std::mutex> lock(mu_);
        while (true) {
          cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
          if (tasks_.empty()) return;  // stopping, and everything queued has run
          std::function<void()> task = std::move(tasks_.front());
          tasks_.pop_front();
          lock.unlock();
          task();  // tasks report their errors through events; they do not throw
          lock.lock();
        }
      }) {}

Queue::~Queue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Queue::Enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

// ---- Rendezvous: a barrier over the launch's participants.

void Rendezvous::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t generation = generation_;
  if (++arrived_ == static_cast<int>(slots_.size())) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  }
  if (aborted_) throw *aborted_;
}

const std::vector<const std::byte*>& Rendezvous::Exchange(int rank, const std::byte* data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[rank] = data;
  }
  Wait();
  return slots_;
}

void Rendezvous::Abort(const Error& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) aborted_ = error;
  cv_.notify_all();
}

// ---- Compiling: compiler.py, called under the GIL.

namespace {

// PyGILState_Ensure/Release: right whether or not this thread holds the GIL already (JAX
// compiles from Python threads holding it; the C++ harness from threads without).
class GilState {
 public:
  GilState() : state_(PyGILState_Ensure()) {}
  ~GilState() { PyGILState_Release(state_); }
  GilState(const GilState&) = delete;
  GilState& operator=(const GilState&) = delete;

 private:
  PyGILState_STATE state_;
};

Shape ToShape(const std::pair<std::string, std::vector<int64_t>>& value) {
  return Shape{LookUp(value.first).type, value.second};
}

}  // namespace

std::shared_ptr<const Program> Compile(const std::string& code, const std::string& format,
                                       const std::string& options, int num_devices) {
  if (!Py_IsInitialized()) {
    Fail(PJRT_Error_Code_FAILED_PRECONDITION, "__NAME__: compiling needs a Python "
         "interpreter (the compiler is jax_plugins.__NAME__.compiler)");
  }
  auto program = std::make_shared<Program>();
  {
    GilState gil;
    try {
      py::dict kernels;
      for (const auto& [name, dtypes] : KernelTable()) kernels[py::str(name)] = dtypes;
      py::dict plan = py::module_::import("jax_plugins.__NAME__.compiler")
                          .attr("compile")(py::bytes(code), format, py::bytes(options),
                                           num_devices, kernels);
      program->name = plan["name"].cast<std::string>();
      program->text = plan["text"].cast<std::string>();
      program->device_assignment = plan["device_assignment"].cast<std::string>();
      program->num_replicas = plan["num_replicas"].cast<int>();
      program->num_partitions = plan["num_partitions"].cast<int>();
      program->device_ids = plan["device_ids"].cast<std::vector<int>>();
      for (const auto& value :
           plan["values"].cast<std::vector<std::pair<std::string, std::vector<int64_t>>>>()) {
        program->values.push_back(ToShape(value));
      }
      program->num_params = plan["num_params"].cast<int>();
      using PyStep = std::tuple<std::string, int, std::vector<int>, std::string,
                                std::vector<std::vector<int>>>;
      for (auto& [kernel, out, ins, data, groups] : plan["steps"].cast<std::vector<PyStep>>()) {
        program->steps.push_back(Step{kernel, out, ins, data, groups});
      }
      program->outputs = plan["outputs"].cast<std::vector<int>>();
      program->donated = plan["donated"].cast<std::vector<int>>();
    } catch (const py::error_already_set& e) {
      // ValueError: the caller's program or options; NotImplementedError: what this
      // plugin cannot run. Both name what was wrong.
      const PJRT_Error_Code code = e.matches(PyExc_ValueError) ? PJRT_Error_Code_INVALID_ARGUMENT
                                   : e.matches(PyExc_NotImplementedError)
                                       ? PJRT_Error_Code_UNIMPLEMENTED
                                       : PJRT_Error_Code_INTERNAL;
      Fail(code, py::str(e.value()).cast<std::string>());
    } catch (const py::cast_error& e) {
      Fail(PJRT_Error_Code_INTERNAL, "__NAME__: compiler.py returned a malformed plan: ",
           e.what());
    }
  }
  // Support is decided here, never at execute time: every step has its kernel.
  for (Step& step : program->steps) {
    step.kernel = FindKernel(step.kernel_name, program->values.at(step.out).type);
    if (step.kernel == nullptr) {
      Fail(PJRT_Error_Code_UNIMPLEMENTED, "__NAME__: no kernel ", step.kernel_name, " for ",
           LookUp(program->values[step.out].type).name);
    }
  }
  program->fingerprint = Cat(std::hex, std::hash<std::string>()(
      Cat(program->text, program->device_assignment)));
  for (int out : program->outputs) {
    const Shape& shape = program->values.at(out);
    program->output_types.push_back(shape.type);
    program->output_dim_sizes.push_back(shape.dims.size());
    program->output_dims.insert(program->output_dims.end(), shape.dims.begin(),
                                shape.dims.end());
    program->output_kinds.push_back("device");
    program->output_kind_sizes.push_back(6);
  }
  return program;
}

// ---- Running a plan.

void RunPlan(const Program& program, std::vector<Tensor> params, std::vector<Tensor> outputs,
         KernelContext& context) {
  // REAL ACCELERATOR: the device binary is launched on the queue; values live in device
  // memory that the compiler assigned. Here every intermediate gets host memory.
  std::vector<Tensor> values(program.values.size());
  std::vector<std::vector<std::byte>> scratch(program.values.size());
  for (int i = 0; i < program.num_params; ++i) values[i] = params[i];
  for (const Step& step : program.steps) {
    const Shape& shape = program.values[step.out];
    scratch[step.out].resize(shape.bytes());
    values[step.out] = Tensor{&shape, scratch[step.out].data()};
    std::vector<Tensor> ins;
    for (int in : step.ins) ins.push_back(values[in]);
    step.kernel(step, ins, values[step.out], context);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::memcpy(outputs[i].data, values[program.outputs[i]].data, outputs[i].shape->bytes());
  }
}

void CopyStrided(const std::byte* src, const int64_t* byte_strides, const Shape& shape,
                 std::byte* dst) {
  const size_t element = LookUp(shape.type).size;
  if (byte_strides == nullptr || shape.dims.empty()) {
    std::memcpy(dst, src, shape.bytes());
    return;
  }
  // Walks the destination in row-major order, advancing a source offset per dim.
  const size_t rank = shape.dims.size();
  std::vector<int64_t> index(rank, 0);
  const int64_t n = shape.elements();
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * element, src + offset, element);
    for (size_t d = rank; d-- > 0;) {
      offset += byte_strides[d];
      if (++index[d] < shape.dims[d]) break;
      offset -= byte_strides[d] * shape.dims[d];
      index[d] = 0;
    }
  }
}

}  // namespace __NAME__
