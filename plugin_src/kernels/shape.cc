// Data-movement kernels: constant, iota, reshape, copy, broadcast_in_dim, transpose,
// slice, concatenate. All but iota move bytes without looking at their type, through
// StridedCopy (convert is in convert.cc).
#include <algorithm>
#include <cstring>

#include "kernels/core/attr_check.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"

namespace workshop {
namespace {

std::vector<int64_t> ByteStrides(const Tensor& t) {
  std::vector<int64_t> strides = RowMajorStrides(*t.dims);
  for (int64_t& s : strides) s *= ByteWidth(t.dtype);
  return strides;
}

// A constant's bytes, made once when its plan is prepared and shared by every run, as
// XLA:CPU keeps constants in buffers of their own that no run writes: a program that closes
// over a weight matrix (jax.jit(lambda x: x @ W), W a numpy array) no longer copies it on
// each call. Sharing is safe because every writer checks ownership first: an in-place
// kernel takes operand 0 only when nothing else holds its Storage (executor.cc
// TakeOperand0), and a program result still held elsewhere is copied
// (executable.cc RunPartitionPlan); the Storage kept here is that other holder.
struct PreparedConstant {
  std::shared_ptr<Storage> storage;
};

Status CheckConstantData(const Instr& instr, DType dtype, const Dims& dims, size_t* size) {
  const std::string& data = instr.attr<std::string>("data");
  *size = static_cast<size_t>(NumElements(dims) * ByteWidth(dtype));
  if (data.size() != *size) {
    return InvalidArgument("workshop: constant of ", ShapeString(dtype, dims), " has ", data.size(),
                           " bytes of data, expected ", *size, " at ", instr.loc);
  }
  return Status();
}

Status Constant(KernelContext& ctx) {
  const auto* prepared = static_cast<const PreparedConstant*>(ctx.instr.prepared.get());
  if (ctx.outs.empty()) {  // Run by the executor: the shared bytes (manages_outputs).
    if (prepared == nullptr || prepared->storage == nullptr) {
      return Internal("workshop: constant at ", ctx.instr.loc, " was not prepared");
    }
    ctx.out_storage.push_back(prepared->storage);
    return Status();
  }
  // Run with an output of its own (a block of a fusion body): a copy.
  const Tensor& out = ctx.outs[0];
  size_t size = 0;
  WORKSHOP_RETURN_IF_ERROR(CheckConstantData(ctx.instr, out.dtype, *out.dims, &size));
  std::memcpy(out.data, ctx.instr.attr<std::string>("data").data(), size);
  return Status();
}

Status Iota(KernelContext& ctx) {
  const Tensor& out = ctx.outs[0];
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  const Dims& dims = *out.dims;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= dims[d];
  for (size_t d = dim + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t extent = dims[dim];
  return DispatchNumeric(
      out.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        // Every block of the dims before `dim` holds the same values: the first is
        // written (a plain counting loop where `dim` is the last, which GCC vectorizes:
        // threefry's counters of 256x256, 21 -> 6 us) and copied to the others.
        T* p = out.as<T>();
        const int64_t block = extent * inner;
        if (outer == 0 || block == 0) return Status();
        if (inner == 1) {
          for (int64_t i = 0; i < extent; ++i) p[i] = static_cast<T>(i);
        } else {
          for (int64_t i = 0; i < extent; ++i) {
            std::fill(p + i * inner, p + (i + 1) * inner, static_cast<T>(i));
          }
        }
        for (int64_t o = 1; o < outer; ++o) {
          std::memcpy(p + o * block, p, static_cast<size_t>(block) * sizeof(T));
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, out.dtype); });
}

// reshape and copy: row-major bytes are unchanged.
Status Copy(KernelContext& ctx) {
  std::memcpy(ctx.outs[0].data, ctx.ins[0].data,
              ctx.outs[0].num_elements() * ByteWidth(ctx.outs[0].dtype));
  return Status();
}

Status BroadcastInDim(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const Tensor& out = ctx.outs[0];
  const IntList& dims = ctx.instr.attr<IntList>("dims");
  const std::vector<int64_t> in_strides = ByteStrides(in);
  // Output dims the operand does not map to, or maps a size-1 dim to, repeat: stride 0.
  std::vector<int64_t> src_strides(out.rank(), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    if ((*in.dims)[i] == (*out.dims)[dims[i]]) src_strides[dims[i]] = in_strides[i];
  }
  StridedCopy(out.data, in.data, ByteWidth(in.dtype), *out.dims, src_strides);
  return Status();
}

Status Transpose(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const IntList& perm = ctx.instr.attr<IntList>("perm");
  const std::vector<int64_t> in_strides = ByteStrides(in);
  std::vector<int64_t> src_strides(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) src_strides[d] = in_strides[perm[d]];
  StridedCopy(ctx.outs[0].data, in.data, ByteWidth(in.dtype), *ctx.outs[0].dims, src_strides);
  return Status();
}

Status Slice(KernelContext& ctx) {
  const Tensor& in = ctx.ins[0];
  const IntList& start = ctx.instr.attr<IntList>("start");
  const IntList& stride = ctx.instr.attr<IntList>("stride");
  std::vector<int64_t> src_strides = ByteStrides(in);
  int64_t offset = 0;
  for (size_t d = 0; d < src_strides.size(); ++d) {
    offset += start[d] * src_strides[d];
    src_strides[d] *= stride[d];
  }
  StridedCopy(ctx.outs[0].data, static_cast<const char*>(in.data) + offset, ByteWidth(in.dtype),
              *ctx.outs[0].dims, src_strides);
  return Status();
}

// Each operand is a run of `outer` blocks, one per index of the dims before `dim`; the
// output interleaves the operands' blocks.
Status Concatenate(KernelContext& ctx) {
  const Tensor& out = ctx.outs[0];
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= (*out.dims)[d];
  if (outer == 0) return Status();
  const int64_t width = ByteWidth(out.dtype);
  const int64_t out_block = out.num_elements() / outer * width;
  char* dst = static_cast<char*>(out.data);
  for (const Tensor& in : ctx.ins) {
    const int64_t block = in.num_elements() / outer * width;
    if (block == 0) continue;
    // As a strided copy of [outer, block] elements: typed, split over the pool, whole
    // when the blocks are contiguous. A memcpy per block cost a call per element when the
    // blocks are single elements (two index columns joined for img[y, x]: 0.5 ms for
    // 100000 rows).
    StridedCopy(dst, {out_block, width}, in.data, {block, width}, width, {outer, block / width});
    dst += block;
  }
  return Status();
}

// The shared bytes, allocated once, charged to no device's memory statistics (as the
// executable's code is not); 64-byte aligned as every Storage.
Status PrepareConstant(Instr& instr) {
  const std::string& data = instr.attr<std::string>("data");
  auto prepared = std::make_shared<PreparedConstant>();
  prepared->storage = Storage::Allocate(std::max<size_t>(data.size(), 1), nullptr);
  if (prepared->storage == nullptr) {
    return ResourceExhausted("workshop: out of memory holding the constant at ", instr.loc, " (",
                             data.size(), " bytes)");
  }
  std::memcpy(prepared->storage->data(), data.data(), data.size());
  instr.prepared = std::move(prepared);
  return Status();
}

Status CheckConstant(const Plan& plan, const Instr& instr) {
  if (!instr.ins.empty() || instr.outs.size() != 1) {
    return InvalidArgument("workshop: constant at ", instr.loc, " has operands or not one result");
  }
  const SlotType& type = plan.slots[instr.outs[0]];
  size_t size = 0;
  return CheckConstantData(instr, type.dtype, type.dims, &size);
}

WORKSHOP_REGISTER_KERNEL("constant", .fn = Constant, .manages_outputs = true,
                         .prepare = PrepareConstant, .check = CheckConstant);
// The checks of the attributes these kernels index with (KernelDef::check).
Status CheckIota(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  return c.Axis("dim", c.Out(0));
}

Status CheckConcatenate(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  return c.Axis("dim", c.In(0));
}

// `perm` maps the operand's dimensions onto the result's, each once.
Status CheckTranspose(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  const Dims *in0 = c.In(0), *out0 = c.Out(0);
  if (in0 == nullptr || out0 == nullptr) return Status();
  const IntList* perm = c.List("perm");
  if (perm == nullptr) return Status();
  std::vector<bool> seen(in0->size(), false);
  if (perm->size() != in0->size() || out0->size() != in0->size()) {
    return c.Fail("attribute 'perm' has ", perm->size(), " entries for rank ", in0->size());
  }
  for (size_t d = 0; d < perm->size(); ++d) {
    const int64_t p = (*perm)[d];
    if (p < 0 || p >= static_cast<int64_t>(in0->size()) || seen[p] || (*out0)[d] != (*in0)[p]) {
      return c.Fail("attribute 'perm' is not a permutation from ", ShapeString(DType::kF32, *in0),
                    " to ", ShapeString(DType::kF32, *out0));
    }
    seen[p] = true;
  }
  return Status();
}

// `dims` maps each operand dimension to a result dimension of its size (or it is 1).
Status CheckBroadcastInDim(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  const Dims *in0 = c.In(0), *out0 = c.Out(0);
  if (in0 == nullptr || out0 == nullptr) return Status();
  const IntList* dims = c.List("dims");
  if (dims == nullptr) return Status();
  if (dims->size() != in0->size()) {
    return c.Fail("attribute 'dims' has ", dims->size(), " entries for rank ", in0->size());
  }
  for (size_t i = 0; i < dims->size(); ++i) {
    const int64_t d = (*dims)[i];
    if (d < 0 || d >= static_cast<int64_t>(out0->size()) ||
        ((*in0)[i] != 1 && (*in0)[i] != (*out0)[d])) {
      return c.Fail("attribute 'dims' does not map the operand's dimensions into the result's");
    }
  }
  return Status();
}

// start/limit/stride slice each operand dimension into the result's.
Status CheckSlice(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  const Dims *in0 = c.In(0), *out0 = c.Out(0);
  if (in0 == nullptr || out0 == nullptr) return Status();
  const IntList *start = c.List("start"), *limit = c.List("limit"), *stride = c.List("stride");
  if (start == nullptr || limit == nullptr || stride == nullptr) return Status();
  const size_t rank = in0->size();
  if (start->size() != rank || limit->size() != rank || stride->size() != rank ||
      out0->size() != rank) {
    return c.Fail("start/limit/stride do not have one entry per dimension");
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t b = (*start)[d], e = (*limit)[d], k = (*stride)[d];
    if (b < 0 || b > e || e > (*in0)[d] || k < 1 || (*out0)[d] != (e - b + k - 1) / k) {
      return c.Fail("start/limit/stride of dimension ", d, " do not slice ", (*in0)[d],
                    " elements into ", (*out0)[d]);
    }
  }
  return Status();
}

WORKSHOP_REGISTER_KERNEL("iota", .fn = Iota, .check = CheckIota);
WORKSHOP_REGISTER_KERNEL("reshape", Copy, /*aliases_operand=*/true);
WORKSHOP_REGISTER_KERNEL("copy", Copy);
WORKSHOP_REGISTER_KERNEL("broadcast_in_dim", .fn = BroadcastInDim, .check = CheckBroadcastInDim);
WORKSHOP_REGISTER_KERNEL("transpose", .fn = Transpose, .check = CheckTranspose);
WORKSHOP_REGISTER_KERNEL("slice", .fn = Slice, .check = CheckSlice);
WORKSHOP_REGISTER_KERNEL("concatenate", .fn = Concatenate, .check = CheckConcatenate);

}  // namespace
}  // namespace workshop
