// The named attributes of every workshop device (PJRT_DeviceDescription_Attributes).
//
// jaxlib reads them once, when the client starts, and a Python `Device` resolves any
// attribute it does not know itself through them: `jax.devices()[0].num_devices` is the
// first entry below. Notebook 01's exercise adds one (its starting point is
// notebooks/exercises/device_attributes.cc).
#include <algorithm>
#include <thread>
#include <vector>

#include "capi/wrappers.h"

namespace workshop {

std::vector<PJRT_NamedValue> DeviceAttributes(int num_devices) {
  // Names are string literals: a PJRT_NamedValue points to its name, and the attributes
  // live as long as the client.
  return {
      Int64Value("num_devices", num_devices),
      // TODO(exercise): add "core_count", the number of hardware threads this machine has
      // (std::thread::hardware_concurrency(), at least 1).
  };
}

}  // namespace workshop
