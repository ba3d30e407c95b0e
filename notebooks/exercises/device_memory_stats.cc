// PJRT_Device_MemoryStats: what `jax.Device.memory_stats()` reports for a workshop device.
//
// Report the device's default ("device") memory from its counters,
// `*args->device->device->memory()->stats()` (runtime/memory_stats.h): bytes_in_use,
// peak_bytes_in_use, num_allocs, largest_alloc_size, and bytes_limit when it is > 0. Set
// each optional field's `*_is_set` (true for what you fill in, false for the rest).
#include "capi/api.h"
#include "capi/wrappers.h"

namespace workshop::capi {

PJRT_Error* Device_MemoryStats(PJRT_Device_MemoryStats_Args* args) {
  // TODO: fill in the statistics and return nullptr (success).
  (void)args;
  return ToPjrt(Unimplemented("PJRT_Device_MemoryStats: not written yet (notebook 05)"));
}

}  // namespace workshop::capi
