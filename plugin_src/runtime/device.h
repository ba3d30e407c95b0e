// Device and Memory: the N virtual CPU devices a Client exposes.
//
// Each device has two memories:
//  * "device", the default: where transfers and outputs land unless told otherwise (jaxlib
//    requires a default memory of exactly this kind);
//  * "pinned_host": what JAX calls host memory (memory_kind="pinned_host" shardings,
//    offloading). On this device both are host RAM, so a buffer in either can feed any
//    execution; keeping them apart gives JAX's memory-kind programs their meaning (where
//    an output is placed, which memory's statistics it counts against).
// Each device of this process also owns a worker thread on which all its executions run in
// order. With several processes (jax.distributed) the client also lists the other
// processes' devices: same ids and memories, no worker, never addressable here.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/memory_stats.h"
#include "runtime/worker.h"

namespace workshop {

class Client;
class Device;

// The values are PJRT kind ids (PJRT_Memory_Kind_Id): distinct, and non-zero so an unset
// id cannot be mistaken for a kind.
enum class MemoryKind : int { kDevice = 1, kPinnedHost = 2 };
inline constexpr std::array<MemoryKind, 2> kMemoryKinds = {MemoryKind::kDevice,
                                                           MemoryKind::kPinnedHost};

const char* MemoryKindName(MemoryKind kind);  // "device", "pinned_host"
std::optional<MemoryKind> ParseMemoryKind(std::string_view name);

class Memory {
 public:
  Memory(int id, MemoryKind kind, Device* device);

  int id() const { return id_; }
  MemoryKind kind() const { return kind_; }
  const char* kind_name() const { return MemoryKindName(kind_); }
  Device* device() const { return device_; }
  // Bytes held by buffers (and executions' temporaries, for "device") in this memory.
  const MemoryStatsRef& stats() const { return stats_; }

  std::string ToString() const;     // "WorkshopMemory(id=0, kind=device)"
  std::string DebugString() const;  // "workshop:0:device"

 private:
  const int id_;
  const MemoryKind kind_;
  Device* const device_;
  const MemoryStatsRef stats_ = std::make_shared<MemoryStats>();
};

class Device {
 public:
  // Memory ids: kind k's memory of device d is k_index * num_devices + d, so the default
  // memory's id equals the device id. `num_devices` counts every process's devices; device
  // `id` belongs to `process_index` and is its `local_id`-th device there.
  Device(Client* client, int id, int num_devices, int process_index, int local_id,
         bool addressable);

  int id() const { return id_; }
  int process_index() const { return process_index_; }
  int local_id() const { return local_id_; }
  bool addressable() const { return worker_ != nullptr; }
  Client* client() const { return client_; }
  Memory* memory() { return &memories_[0]; }  // The default memory, kind "device".
  Memory* memory(MemoryKind kind);
  std::array<Memory, kMemoryKinds.size()>& memories() { return memories_; }
  Worker& worker() { return *worker_; }  // Addressable devices only.

  static constexpr const char* kKind = "workshop-cpu";
  // Also used for devices of a topology that has no runtime behind it.
  static std::string ToString(int id);     // "WorkshopDevice(id=0)"
  static std::string DebugString(int id);  // "workshop:0"

 private:
  Client* const client_;
  const int id_;
  const int process_index_, local_id_;
  std::array<Memory, kMemoryKinds.size()> memories_;
  std::unique_ptr<Worker> worker_;  // Null for another process's device.
};

}  // namespace workshop
