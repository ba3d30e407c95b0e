// Device and Memory: the N virtual CPU devices a Client exposes.
//
// Each device has one memory, of kind "device" (jaxlib requires that exact kind string for
// a default memory), and its own worker thread on which all its executions run in order.
#pragma once

#include <memory>
#include <string>

#include "runtime/worker.h"

namespace workshop {

class Client;
class Device;

class Memory {
 public:
  Memory(int id, Device* device) : id_(id), device_(device) {}

  int id() const { return id_; }
  Device* device() const { return device_; }
  static constexpr const char* kKind = "device";
  std::string ToString() const;     // "WorkshopMemory(id=0, kind=device)"
  std::string DebugString() const;

 private:
  const int id_;
  Device* const device_;
};

class Device {
 public:
  Device(Client* client, int id);

  int id() const { return id_; }
  Client* client() const { return client_; }
  Memory* memory() { return &memory_; }
  Worker& worker() { return worker_; }

  static constexpr const char* kKind = "workshop-cpu";
  std::string ToString() const;     // "WorkshopDevice(id=0)"
  std::string DebugString() const;  // "workshop:0"

 private:
  Client* const client_;
  const int id_;
  Memory memory_;
  Worker worker_;
};

}  // namespace workshop
