// ffi_call: runs a user's XLA FFI handler (jax.ffi.register_ffi_target(name, capsule,
// platform="workshop") + jax.ffi.ffi_call), built against jax.ffi.include_dir().
//
//   ins   the call's operands, any dtype/shape; outs: its results
//   attrs target: str (the registered name); ffi_attrs: bytes, the call's attributes
//         sorted by name, encoded by compiler/rules/ffi.py:
//           u32 count, then per attribute: u32 name length, name, u8 kind
//           (XLA_FFI_AttrType: 1 array, 2 dictionary, 3 scalar, 4 string), u8
//           XLA_FFI_DataType (0 for strings and dictionaries), u32 payload bytes,
//           payload (little-endian values; a dictionary's is this same encoding)
//
// Registration: jax_plugins/workshop/extensions/ffi.py hands the handler's execute pointer to
// WorkshopFfiRegister (ctypes). `prepare` resolves the target once (an unregistered target
// fails the compile, naming it) and decodes the attributes into the XLA_FFI_Attrs a call
// frame points at. Each run builds an XLA_FFI_CallFrame (stage EXECUTE) with one
// XLA_FFI_Buffer per operand and result and calls the handler on the device's thread; an
// XLA_FFI_Error it returns becomes an error with its code (INTERNAL if it has none)
// quoting its message.
//
// Struct sizes are the headers' *_STRUCT_SIZE (up to each struct's last field the
// handler's version knows), which handlers built with ffi.h check exactly.
// The XLA_FFI_Api handed to handlers (ABI: jaxlib/include/xla/ffi/api/c_api.h, 0.3):
// errors, type registration (ids from a counter), device memory (aligned_alloc),
// ThreadPool_Schedule runs the task inline (the API allows the caller's thread),
// NumThreads 1, RunId 0, DeviceOrdinal = partition. Not supported, each an UNIMPLEMENTED
// XLA_FFI_Error: stateful handlers (State_*), execution-context user data, streams,
// asynchronous handlers (futures), registering handlers from inside a handler.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/core/kernel.h"
#include "xla/ffi/api/c_api.h"

struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  std::string message;
};

struct XLA_FFI_ExecutionContext {
  int device_ordinal;
};

namespace workshop {
namespace {

std::mutex& RegistryMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::map<std::string, XLA_FFI_Handler*>& Handlers() {
  static auto* handlers = new std::map<std::string, XLA_FFI_Handler*>();
  return *handlers;
}

XLA_FFI_Error* NewError(XLA_FFI_Error_Code code, std::string message) {
  return new XLA_FFI_Error{code, std::move(message)};
}

XLA_FFI_Error* Unsupported(const char* what) {
  return NewError(XLA_FFI_Error_Code_UNIMPLEMENTED,
                  StrCat("workshop: the XLA FFI ", what, " is not supported"));
}

XLA_FFI_Error* ErrorCreate(XLA_FFI_Error_Create_Args* args) {
  return NewError(args->errc, args->message ? args->message : "");
}
void ErrorGetMessage(XLA_FFI_Error_GetMessage_Args* args) {
  args->message = args->error->message.c_str();
}
void ErrorDestroy(XLA_FFI_Error_Destroy_Args* args) { delete args->error; }
XLA_FFI_Error* HandlerRegister(XLA_FFI_Handler_Register_Args*) {
  return Unsupported("Handler_Register from a handler");
}
XLA_FFI_Error* StreamGet(XLA_FFI_Stream_Get_Args*) { return Unsupported("stream"); }

XLA_FFI_Error* TypeRegister(XLA_FFI_Type_Register_Args* args) {
  static auto* ids = new std::map<std::string, int64_t>();
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::string name(args->name.ptr, args->name.len);
  auto [it, added] = ids->emplace(name, static_cast<int64_t>(ids->size()) + 1);
  if (args->type_id->type_id == 0) {
    args->type_id->type_id = it->second;
  } else if (args->type_id->type_id != it->second) {
    return NewError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    StrCat("workshop: type ", name, " has id ", it->second));
  }
  return nullptr;
}
XLA_FFI_Error* ContextGet(XLA_FFI_ExecutionContext_Get_Args*) {
  return Unsupported("execution context user data");
}
XLA_FFI_Error* StateSet(XLA_FFI_State_Set_Args*) { return Unsupported("handler state"); }
XLA_FFI_Error* StateGet(XLA_FFI_State_Get_Args*) { return Unsupported("handler state"); }

XLA_FFI_Error* MemoryAllocate(XLA_FFI_DeviceMemory_Allocate_Args* args) {
  const size_t align = args->alignment < sizeof(void*) ? sizeof(void*) : args->alignment;
  const size_t size = (args->size + align - 1) / align * align;
  args->data = std::aligned_alloc(align, size == 0 ? align : size);
  if (args->data == nullptr) {
    return NewError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    StrCat("workshop: cannot allocate ", args->size, " bytes"));
  }
  return nullptr;
}
XLA_FFI_Error* MemoryFree(XLA_FFI_DeviceMemory_Free_Args* args) {
  std::free(args->data);
  return nullptr;
}
XLA_FFI_Error* PoolSchedule(XLA_FFI_ThreadPool_Schedule_Args* args) {
  args->task(args->data);
  return nullptr;
}
XLA_FFI_Error* PoolThreads(XLA_FFI_ThreadPool_NumThreads_Args* args) {
  *args->num_threads = 1;
  return nullptr;
}
XLA_FFI_Error* FutureCreate(XLA_FFI_Future_Create_Args*) { return Unsupported("future"); }
XLA_FFI_Error* FutureAvailable(XLA_FFI_Future_SetAvailable_Args*) { return Unsupported("future"); }
XLA_FFI_Error* FutureError(XLA_FFI_Future_SetError_Args*) { return Unsupported("future"); }
XLA_FFI_Error* RunIdGet(XLA_FFI_RunId_Get_Args* args) {
  args->run_id = 0;
  return nullptr;
}
XLA_FFI_Error* OrdinalGet(XLA_FFI_DeviceOrdinal_Get_Args* args) {
  args->device_ordinal = args->ctx ? args->ctx->device_ordinal : 0;
  return nullptr;
}

const XLA_FFI_Api* Api() {
  static const XLA_FFI_Api api = {
      XLA_FFI_Api_STRUCT_SIZE,
      nullptr,
      {XLA_FFI_Api_Version_STRUCT_SIZE, nullptr, XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR},
      nullptr,
      ErrorCreate,
      ErrorGetMessage,
      ErrorDestroy,
      HandlerRegister,
      StreamGet,
      TypeRegister,
      ContextGet,
      StateSet,
      StateGet,
      MemoryAllocate,
      MemoryFree,
      PoolSchedule,
      PoolThreads,
      FutureCreate,
      FutureAvailable,
      FutureError,
      RunIdGet,
      OrdinalGet};
  return &api;
}

XLA_FFI_DataType FfiDType(DType t) {
  switch (t) {
    case DType::kBF16: return XLA_FFI_DataType_BF16;
    case DType::kC64: return XLA_FFI_DataType_C64;
    case DType::kC128: return XLA_FFI_DataType_C128;
    default: return static_cast<XLA_FFI_DataType>(static_cast<int>(t));  // Same codes.
  }
}

// One dictionary of decoded attributes: the call site's, or a nested dictionary value.
// The XLA_FFI_Attrs a call frame (or an enclosing dictionary) holds points into it.
struct AttrSet {
  std::vector<std::string> names;
  std::vector<XLA_FFI_ByteSpan> name_spans;
  std::vector<XLA_FFI_ByteSpan*> name_ptrs;
  std::vector<XLA_FFI_AttrType> types;
  std::vector<std::string> payloads;
  std::vector<XLA_FFI_Scalar> scalars;
  std::vector<XLA_FFI_Array> arrays;
  std::vector<XLA_FFI_ByteSpan> strings;
  std::vector<std::unique_ptr<AttrSet>> dicts;  // Nested dictionaries, owned here.
  std::vector<void*> attrs;
  XLA_FFI_Attrs view{};  // This set as an XLA_FFI_Attrs (its fields point into the above).
};

struct Prepared {
  XLA_FFI_Handler* handler = nullptr;
  AttrSet attrs;
};

// Deep enough for any configuration struct; bounds the recursion on a hostile blob.
constexpr int kMaxAttrDepth = 32;

// Decodes `blob` (the format in the header comment) into `set`. Throws PlanError on a
// truncated or too deeply nested blob.
Status DecodeAttrs(const std::string& blob, AttrSet& set, const std::string& loc, int depth = 0) {
  if (depth > kMaxAttrDepth) throw PlanError("ffi_attrs nested too deep");
  size_t pos = 0;
  auto take = [&](size_t n) -> const char* {
    if (n > blob.size() - pos) throw PlanError("truncated ffi_attrs");
    const char* at = blob.data() + pos;
    pos += n;
    return at;
  };
  auto u32 = [&] {
    uint32_t v;
    std::memcpy(&v, take(4), 4);
    return v;
  };
  const uint32_t count = u32();
  std::vector<uint8_t> kinds, dtypes;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t name_len = u32();
    set.names.emplace_back(take(name_len), name_len);
    kinds.push_back(static_cast<uint8_t>(*take(1)));
    dtypes.push_back(static_cast<uint8_t>(*take(1)));
    const uint32_t size = u32();
    set.payloads.emplace_back(take(size), size);
  }
  // Reserve first: the attrs point into these vectors.
  set.name_spans.reserve(count);
  set.scalars.reserve(count);
  set.arrays.reserve(count);
  set.strings.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    set.name_spans.push_back({set.names[i].data(), set.names[i].size()});
    set.types.push_back(static_cast<XLA_FFI_AttrType>(kinds[i]));
    void* data = set.payloads[i].data();
    const auto dtype = static_cast<XLA_FFI_DataType>(dtypes[i]);
    switch (kinds[i]) {
      case XLA_FFI_AttrType_SCALAR:
        set.scalars.push_back({dtype, data});
        set.attrs.push_back(&set.scalars.back());
        break;
      case XLA_FFI_AttrType_ARRAY: {
        const size_t width = dtype == XLA_FFI_DataType_PRED || dtype == XLA_FFI_DataType_S8 ||
                                     dtype == XLA_FFI_DataType_U8
                                 ? 1
                             : dtype == XLA_FFI_DataType_S16 || dtype == XLA_FFI_DataType_U16 ? 2
                             : dtype == XLA_FFI_DataType_S32 || dtype == XLA_FFI_DataType_U32 ||
                                     dtype == XLA_FFI_DataType_F32
                                 ? 4
                                 : 8;
        set.arrays.push_back({dtype, set.payloads[i].size() / width, data});
        set.attrs.push_back(&set.arrays.back());
        break;
      }
      case XLA_FFI_AttrType_STRING:
        set.strings.push_back({set.payloads[i].data(), set.payloads[i].size()});
        set.attrs.push_back(&set.strings.back());
        break;
      case XLA_FFI_AttrType_DICTIONARY: {
        auto dict = std::make_unique<AttrSet>();
        WORKSHOP_RETURN_IF_ERROR(DecodeAttrs(set.payloads[i], *dict, loc, depth + 1));
        set.attrs.push_back(&dict->view);
        set.dicts.push_back(std::move(dict));
        break;
      }
      default:
        return InvalidArgument("workshop: FFI attribute '", set.names[i], "' of kind ",
                               int(kinds[i]), " at ", loc, " is not supported");
    }
  }
  for (auto& span : set.name_spans) set.name_ptrs.push_back(&span);
  set.view = {XLA_FFI_Attrs_STRUCT_SIZE,   nullptr,
              static_cast<int64_t>(count), set.types.data(),
              set.name_ptrs.data(),        set.attrs.data()};
  return Status();
}

Status Prepare(Instr& instr) {
  const std::string& target = instr.attr<std::string>("target");
  auto p = std::make_shared<Prepared>();
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Handlers().find(target);
    if (it == Handlers().end()) {
      return FailedPrecondition("workshop: FFI target '", target, "' at ", instr.loc,
                                " is not registered for platform workshop");
    }
    p->handler = it->second;
  }
  WORKSHOP_RETURN_IF_ERROR(DecodeAttrs(instr.attr<std::string>("ffi_attrs"), p->attrs, instr.loc));
  instr.prepared = std::move(p);
  return Status();
}

Status Run(KernelContext& ctx) {
  const auto* p = static_cast<const Prepared*>(ctx.instr.prepared.get());
  if (p == nullptr) return Internal("workshop: ffi_call at ", ctx.instr.loc, " not prepared");
  const size_t n_in = ctx.ins.size(), n_out = ctx.outs.size();
  std::vector<std::vector<int64_t>> dims;
  std::vector<XLA_FFI_Buffer> buffers(n_in + n_out);
  dims.reserve(n_in + n_out);
  for (size_t i = 0; i < n_in + n_out; ++i) {
    const Tensor& t = i < n_in ? ctx.ins[i] : ctx.outs[i - n_in];
    dims.emplace_back(t.dims->begin(), t.dims->end());
    buffers[i] = {XLA_FFI_Buffer_STRUCT_SIZE,
                  nullptr,
                  FfiDType(t.dtype),
                  t.data,
                  static_cast<int64_t>(dims.back().size()),
                  dims.back().data()};
  }
  std::vector<XLA_FFI_ArgType> arg_types(n_in, XLA_FFI_ArgType_BUFFER);
  std::vector<XLA_FFI_RetType> ret_types(n_out, XLA_FFI_RetType_BUFFER);
  std::vector<void*> args(n_in), rets(n_out);
  for (size_t i = 0; i < n_in; ++i) args[i] = &buffers[i];
  for (size_t i = 0; i < n_out; ++i) rets[i] = &buffers[n_in + i];
  XLA_FFI_ExecutionContext context{ctx.launch.partition};
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.api = Api();
  frame.ctx = &context;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args = {XLA_FFI_Args_STRUCT_SIZE, nullptr, static_cast<int64_t>(n_in), arg_types.data(),
                args.data()};
  frame.rets = {XLA_FFI_Rets_STRUCT_SIZE, nullptr, static_cast<int64_t>(n_out), ret_types.data(),
                rets.data()};
  frame.attrs = p->attrs.view;  // A copy of the struct; what it points at is the plan's.
  XLA_FFI_Error* error = p->handler(&frame);
  if (error != nullptr) {
    // XLA_FFI_Error_Code numbers absl's codes, as Code does: the handler's code reaches
    // Python unchanged (ffi::Error::InvalidArgument is INVALID_ARGUMENT, as on XLA:CPU).
    const int code = static_cast<int>(error->code);
    Status status(code >= 1 && code <= 16 ? static_cast<Code>(code) : Code::kInternal,
                  StrCat("workshop: FFI target '", ctx.instr.attr<std::string>("target"), "' at ",
                         ctx.instr.loc, " failed: ", error->message));
    delete error;
    return status;
  }
  if (frame.future != nullptr) {
    return Unimplemented("workshop: FFI target at ", ctx.instr.loc,
                         " is asynchronous (returned a future); not supported");
  }
  return Status();
}

WORKSHOP_REGISTER_KERNEL("ffi_call", .fn = Run, .prepare = Prepare);

}  // namespace
}  // namespace workshop

// Registers `handler` (an XLA_FFI_Handler*, the execute stage) under `name`; called by
// jax_plugins/workshop/extensions/ffi.py through ctypes. Re-registering a name replaces it (JAX
// allows registering the same target again). Returns 0.
extern "C" __attribute__((visibility("default"))) int WorkshopFfiRegister(const char* name,
                                                                          void* handler) {
  std::lock_guard<std::mutex> lock(workshop::RegistryMutex());
  workshop::Handlers()[name] = reinterpret_cast<XLA_FFI_Handler*>(handler);
  return 0;
}
