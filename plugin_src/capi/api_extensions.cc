// The Layouts and MemoryDescriptions extensions (declarations in extensions.h).
//
// Layouts: buffers are dense, row-major by default or in the dimension order a program or
// transfer asked for, so a layout is a minor_to_major permutation; it serializes to the
// text form of an xla::Layout, e.g. "{1,0}" (row-major rank 2), "{0,1}" (column-major) or
// "{}" for a scalar, which is what jaxlib parses.
#include <cstring>
#include <iterator>

#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {
namespace {

PJRT_Layouts_MemoryLayout* NewLayout(MinorToMajor minor_to_major) {
  return new PJRT_Layouts_MemoryLayout{std::move(minor_to_major)};
}

// The two memory kinds' descriptions, shared by every device description. Allocated as
// handles (tagged, check.h) and never freed.
constexpr size_t kNumMemoryDescriptions = 2;
const PJRT_MemoryDescription* const* MemoryDescriptionList() {
  static const PJRT_MemoryDescription* const kList[kNumMemoryDescriptions] = {
      new PJRT_MemoryDescription{MemoryKind::kDevice},
      new PJRT_MemoryDescription{MemoryKind::kPinnedHost}};
  return kList;
}

}  // namespace

PJRT_Error* Layouts_MemoryLayout_Destroy(PJRT_Layouts_MemoryLayout_Destroy_Args* args) {
  if (args->layout->owned_by_executable) {
    return ToPjrt(
        InvalidArgument("PJRT_Layouts_MemoryLayout_Destroy: the layout belongs to "
                        "its executable (a parameter or output layout) and lives "
                        "as long as it"));
  }
  delete args->layout;
  return nullptr;
}

PJRT_Error* Layouts_MemoryLayout_Serialize(PJRT_Layouts_MemoryLayout_Serialize_Args* args) {
  const MinorToMajor& order = args->layout->minor_to_major;
  auto* serialized = new PJRT_Layouts_SerializedLayout{LayoutString(order, order.size())};
  args->serialized_bytes = serialized->bytes.data();
  args->serialized_bytes_size = serialized->bytes.size();
  args->serialized_layout = serialized;
  args->serialized_layout_deleter = [](PJRT_Layouts_SerializedLayout* s) { delete s; };
  return nullptr;
}

PJRT_Error* Layouts_PJRT_Client_GetDefaultLayout(
    PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args* args) {
  args->layout = NewLayout(RowMajor(args->num_dims));
  return nullptr;
}

PJRT_Error* Layouts_PJRT_Buffer_MemoryLayout(PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args* args) {
  const Buffer& buffer = *args->buffer->buffer;
  args->layout =
      NewLayout(buffer.layout().empty() ? RowMajor(buffer.dims().size()) : buffer.layout());
  return nullptr;
}

PJRT_Error* Layouts_PJRT_Topology_GetDefaultLayout(
    PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args* args) {
  args->layout = NewLayout(RowMajor(args->num_dims));
  return nullptr;
}

PJRT_Error* Layouts_PJRT_Executable_GetOutputLayouts(
    PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args* args) {
  args->num_outputs = args->executable->output_layout_ptrs.size();
  args->layouts = args->executable->output_layout_ptrs.data();
  return nullptr;
}

PJRT_Error* Layouts_PJRT_Executable_GetParameterLayouts(
    PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args* args) {
  args->num_parameters = args->executable->parameter_layout_ptrs.size();
  args->layouts = args->executable->parameter_layout_ptrs.data();
  return nullptr;
}

// Every device has both memories; "device" (index 0) is the default.
PJRT_Error* DeviceDescription_MemoryDescriptions(
    PJRT_DeviceDescription_MemoryDescriptions_Args* args) {
  args->memory_descriptions = MemoryDescriptionList();
  args->num_memory_descriptions = kNumMemoryDescriptions;
  args->default_memory_index = 0;
  return nullptr;
}

PJRT_Error* MemoryDescription_Kind(PJRT_MemoryDescription_Kind_Args* args) {
  const MemoryKind kind = args->memory_description->kind;
  args->kind = MemoryKindName(kind);
  args->kind_size = std::strlen(args->kind);
  args->kind_id = static_cast<int>(kind);
  return nullptr;
}

}  // namespace workshop::capi
