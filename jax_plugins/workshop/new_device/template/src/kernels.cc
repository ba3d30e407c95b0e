// The kernels: one function per (kernel name, dtype), looked up when a program compiles.
//
// A kernel gets its step (runtime.h: Step), its input tensors and its output tensor, all
// of the shapes compiler.py checked; it must not fail (what it cannot do is refused at
// compile time, by compiler.py's rule or by the missing entry in kKernels).
//
// REAL ACCELERATOR: these are the device's kernels (or the compiler generates them); the
// table is what the compiler may target.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#include "runtime.h"

namespace __NAME__ {
namespace {

template <typename T, typename Op>
void Binary(const Step&, const std::vector<Tensor>& ins, Tensor& out, KernelContext&) {
  const T* a = reinterpret_cast<const T*>(ins[0].data);
  const T* b = reinterpret_cast<const T*>(ins[1].data);
  T* o = reinterpret_cast<T*>(out.data);
  for (int64_t i = 0, n = out.shape->elements(); i < n; ++i) o[i] = Op()(a[i], b[i]);
}

template <typename T, typename Op>
void Unary(const Step&, const std::vector<Tensor>& ins, Tensor& out, KernelContext&) {
  const T* a = reinterpret_cast<const T*>(ins[0].data);
  T* o = reinterpret_cast<T*>(out.data);
  for (int64_t i = 0, n = out.shape->elements(); i < n; ++i) o[i] = Op()(a[i]);
}

// f32, s32 or pred (compiler.py's rule checks) -> To. Float -> int saturates and takes
// NaN to 0, as XLA does (a plain cast is undefined behaviour there).
template <typename To>
To From(float x) {
  if constexpr (std::is_integral_v<To>) {
    if (x != x) return 0;
    if (x <= static_cast<float>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (x >= static_cast<float>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  }
  return static_cast<To>(x);
}

template <typename To>
void Convert(const Step&, const std::vector<Tensor>& ins, Tensor& out, KernelContext&) {
  To* o = reinterpret_cast<To*>(out.data);
  const int64_t n = out.shape->elements();
  switch (ins[0].shape->type) {
    case PJRT_Buffer_Type_F32:
      for (int64_t i = 0; i < n; ++i) o[i] = From<To>(reinterpret_cast<const float*>(ins[0].data)[i]);
      break;
    case PJRT_Buffer_Type_S32:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(reinterpret_cast<const int32_t*>(ins[0].data)[i]);
      break;
    default:  // PRED: one byte, 0 or 1
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(ins[0].data[i] != std::byte{0});
  }
}

// Any dtype: the step's constant bytes, or the input's bytes (reshape).
void Constant(const Step& step, const std::vector<Tensor>&, Tensor& out, KernelContext&) {
  std::memcpy(out.data, step.data.data(), out.shape->bytes());
}
void Copy(const Step&, const std::vector<Tensor>& ins, Tensor& out, KernelContext&) {
  std::memcpy(out.data, ins[0].data, out.shape->bytes());
}

// out[i0, ..., in] = i_d for the dimension d in the step's data (an int64).
template <typename T>
void Iota(const Step& step, const std::vector<Tensor>&, Tensor& out, KernelContext&) {
  int64_t dimension;
  std::memcpy(&dimension, step.data.data(), sizeof(dimension));
  const std::vector<int64_t>& dims = out.shape->dims;
  int64_t inner = 1;  // elements per step of `dimension`
  for (size_t d = dimension + 1; d < dims.size(); ++d) inner *= dims[d];
  T* o = reinterpret_cast<T*>(out.data);
  for (int64_t i = 0, n = out.shape->elements(); i < n; ++i) o[i] = T((i / inner) % dims[dimension]);
}

// The input's row-major strides in bytes.
std::vector<int64_t> ByteStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.dims.size());
  int64_t stride = LookUp(shape.type).size;
  for (size_t d = shape.dims.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape.dims[d];
  }
  return strides;
}

std::vector<int64_t> Int64s(const std::string& data) {
  std::vector<int64_t> values(data.size() / sizeof(int64_t));
  std::memcpy(values.data(), data.data(), data.size());
  return values;
}

// Any dtype. The input's dim i is the output's dim step.data[i] (int64s); the output's
// other dims, and those an input dim of size 1 maps to, repeat the input (stride 0).
void BroadcastInDim(const Step& step, const std::vector<Tensor>& ins, Tensor& out,
                    KernelContext&) {
  const std::vector<int64_t> mapping = Int64s(step.data), in = ByteStrides(*ins[0].shape);
  std::vector<int64_t> strides(out.shape->dims.size(), 0);
  for (size_t i = 0; i < mapping.size(); ++i) {
    if (ins[0].shape->dims[i] != 1) strides[mapping[i]] = in[i];
  }
  CopyStrided(ins[0].data, strides.data(), *out.shape, out.data);
}

// Any dtype. out[i] = in[start + i * stride] per dim; step.data holds the starts, then
// the strides (int64s).
void Slice(const Step& step, const std::vector<Tensor>& ins, Tensor& out, KernelContext&) {
  const std::vector<int64_t> values = Int64s(step.data), in = ByteStrides(*ins[0].shape);
  const size_t rank = in.size();
  std::vector<int64_t> strides(rank);
  const std::byte* base = ins[0].data;
  for (size_t d = 0; d < rank; ++d) {
    base += values[d] * in[d];
    strides[d] = values[rank + d] * in[d];
  }
  CopyStrided(base, strides.data(), *out.shape, out.data);
}

// psum: every device of a replica group gets the sum of the group's inputs, added in the
// group's order (the same on every device, so all get bit-identical results).
template <typename T>
void AllReduceSum(const Step& step, const std::vector<Tensor>& ins, Tensor& out,
                  KernelContext& context) {
  const std::vector<const std::byte*>& all = context.rendezvous->Exchange(context.rank,
                                                                          ins[0].data);
  T* o = reinterpret_cast<T*>(out.data);
  const int64_t n = out.shape->elements();
  for (const std::vector<int>& group : step.groups) {
    if (std::find(group.begin(), group.end(), context.rank) == group.end()) continue;
    for (int64_t i = 0; i < n; ++i) o[i] = T(0);
    for (int member : group) {
      const T* in = reinterpret_cast<const T*>(all[member]);
      for (int64_t i = 0; i < n; ++i) o[i] += in[i];
    }
  }
  context.rendezvous->Done();  // the others may still be reading our input
}

// New functions go above this line.

constexpr PJRT_Buffer_Type kAny = PJRT_Buffer_Type_INVALID;  // byte-moving kernels
constexpr PJRT_Buffer_Type F32 = PJRT_Buffer_Type_F32;
constexpr PJRT_Buffer_Type S32 = PJRT_Buffer_Type_S32;

struct Entry {
  const char* name;
  PJRT_Buffer_Type type;
  Kernel kernel;
};

// The kernels this device has: what compiler.py may use, per dtype.
const Entry kKernels[] = {
    {"add", F32, Binary<float, std::plus<>>},
    {"add", S32, Binary<int32_t, std::plus<>>},
    {"multiply", F32, Binary<float, std::multiplies<>>},
    {"multiply", S32, Binary<int32_t, std::multiplies<>>},
    {"all_reduce_sum", F32, AllReduceSum<float>},
    {"all_reduce_sum", S32, AllReduceSum<int32_t>},
    {"convert", F32, Convert<float>},
    {"convert", S32, Convert<int32_t>},
    {"iota", F32, Iota<float>},
    {"iota", S32, Iota<int32_t>},
    {"constant", kAny, Constant},
    {"copy", kAny, Copy},
    {"broadcast_in_dim", kAny, BroadcastInDim},
    {"slice", kAny, Slice},
    // New kernels go above this line.
};

}  // namespace

Kernel FindKernel(const std::string& name, PJRT_Buffer_Type type) {
  for (const Entry& e : kKernels) {
    if (name == e.name && (e.type == type || e.type == kAny)) return e.kernel;
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::vector<std::string>>> KernelTable() {
  std::vector<std::pair<std::string, std::vector<std::string>>> table;
  for (const Entry& e : kKernels) {
    // One row per name, wherever its entries are: a dtype added at the marker line joins
    // the entries above instead of replacing them (the compile callback gets a dict).
    auto row = std::find_if(table.begin(), table.end(),
                            [&](const auto& r) { return r.first == e.name; });
    if (row == table.end()) row = table.insert(table.end(), {e.name, {}});
    row->second.push_back(e.type == kAny ? "any" : LookUp(e.type).name);
  }
  return table;
}

}  // namespace __NAME__
