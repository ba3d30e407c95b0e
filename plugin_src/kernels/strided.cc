#include "kernels/strided.h"

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"

namespace workshop {

std::vector<int64_t> CollapseDims(std::vector<int64_t> dims,
                                  std::vector<std::vector<int64_t>>& strides) {
  for (int64_t d : dims) {
    if (d == 0) {  // Empty: one zero-length dim, so callers' loops do nothing.
      for (auto& s : strides) s = {0};
      return {0};
    }
  }
  std::vector<int64_t> out_dims;
  std::vector<std::vector<int64_t>> out_strides(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool mergeable = !out_dims.empty();
    for (size_t k = 0; k < strides.size() && mergeable; ++k) {
      mergeable = out_strides[k].back() == strides[k][d] * dims[d];
    }
    if (mergeable) {
      out_dims.back() *= dims[d];
      for (size_t k = 0; k < strides.size(); ++k) out_strides[k].back() = strides[k][d];
    } else {
      out_dims.push_back(dims[d]);
      for (size_t k = 0; k < strides.size(); ++k) out_strides[k].push_back(strides[k][d]);
    }
  }
  strides = std::move(out_strides);
  return out_dims;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims, int64_t unit) {
  std::vector<int64_t> strides(dims.size());
  int64_t stride = unit;
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= dims[d];
  }
  return strides;
}

std::vector<int64_t> ReducedOutputStrides(const std::vector<int64_t>& dims,
                                          const std::vector<int64_t>& reduced) {
  std::vector<int64_t> strides(dims.size(), 0);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) == reduced.end()) {
      strides[d] = stride;
      stride *= dims[d];
    }
  }
  return strides;
}

namespace {

template <typename T>
void CopyRows(char* dst, const char* src, const std::vector<int64_t>& dims,
              const std::vector<std::vector<int64_t>>& strides) {
  const int64_t n = dims.empty() ? 1 : dims.back();
  const int64_t dst_step = dims.empty() ? 0 : strides[0].back();
  const int64_t src_step = dims.empty() ? 0 : strides[1].back();
  ForEachRow(dims, strides, [&](const std::vector<int64_t>& offsets) {
    char* d = dst + offsets[0];
    const char* s = src + offsets[1];
    if (src_step == static_cast<int64_t>(sizeof(T)) && dst_step == src_step) {
      std::memcpy(d, s, n * sizeof(T));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(d + i * dst_step, s + i * src_step, sizeof(T));
    }
  });
}

}  // namespace

void StridedCopy(void* dst, const void* src, int64_t elem_size,
                 const std::vector<int64_t>& dims, const std::vector<int64_t>& src_strides) {
  StridedCopy(dst, RowMajorStrides(dims, elem_size), src, src_strides, elem_size, dims);
}

void StridedCopy(void* dst, const std::vector<int64_t>& dst_strides, const void* src,
                 const std::vector<int64_t>& src_strides, int64_t elem_size,
                 const std::vector<int64_t>& dims) {
  std::vector<std::vector<int64_t>> strides = {dst_strides, src_strides};
  std::vector<int64_t> collapsed = CollapseDims(dims, strides);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  DispatchByteWidth(
      elem_size,
      [&](auto tag) { CopyRows<decltype(tag)>(d, s, collapsed, strides); },
      [] {});
}

}  // namespace workshop
