#include "runtime/profiler.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

namespace workshop::profiler {
namespace {

struct Event {
  int device, line;
  std::string name;
  int64_t start_ns, end_ns;
};

std::atomic<bool> active{false};
std::mutex mu;
std::vector<Event>& Events() {
  static auto* events = new std::vector<Event>();
  return *events;
}
thread_local int current_device = -1;

// Protobuf wire format: varints and length-delimited fields are all XSpace needs.
void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void IntField(std::string& out, int field, int64_t v) {
  Varint(out, static_cast<uint64_t>(field) << 3);
  Varint(out, static_cast<uint64_t>(v));
}
void BytesField(std::string& out, int field, std::string_view bytes) {
  Varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  Varint(out, bytes.size());
  out.append(bytes);
}

}  // namespace

bool Active() { return active.load(std::memory_order_relaxed); }

void Start() {
  std::lock_guard<std::mutex> lock(mu);
  Events().clear();
  active.store(true);
}

void Stop() { active.store(false); }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Record(int device, int line, std::string_view name, int64_t start_ns, int64_t end_ns) {
  if (!Active()) return;
  std::lock_guard<std::mutex> lock(mu);
  Events().push_back(Event{device, line, std::string(name), start_ns, end_ns});
}

int CurrentDevice() { return current_device; }
DeviceScope::DeviceScope(int device) : previous_(current_device) { current_device = device; }
DeviceScope::~DeviceScope() { current_device = previous_; }

std::string CollectXSpace() {
  std::lock_guard<std::mutex> lock(mu);
  // device -> line -> events; metadata ids per plane by event name.
  std::map<int, std::map<int, std::vector<const Event*>>> planes;
  for (const Event& e : Events()) planes[e.device][e.line].push_back(&e);
  std::string space;
  for (const auto& [device, lines] : planes) {
    std::string plane;
    IntField(plane, 1, device + 1);
    BytesField(plane, 2, "/device:CUSTOM:" + std::to_string(device));
    std::map<std::string, int64_t> metadata_ids;
    for (const auto& [line_id, events] : lines) {
      int64_t start = events.front()->start_ns, end = events.front()->end_ns;
      for (const Event* e : events) {
        start = std::min(start, e->start_ns);
        end = std::max(end, e->end_ns);
      }
      std::string line;
      IntField(line, 1, line_id);
      IntField(line, 10, line_id);
      const char* name = line_id == kProgramLine ? "Programs" : "Kernels";
      BytesField(line, 2, name);
      BytesField(line, 11, name);
      IntField(line, 3, start);
      IntField(line, 9, (end - start) * 1000);
      for (const Event* e : events) {
        auto [it, added] =
            metadata_ids.emplace(e->name, static_cast<int64_t>(metadata_ids.size()) + 1);
        std::string event;
        IntField(event, 1, it->second);
        IntField(event, 2, (e->start_ns - start) * 1000);
        IntField(event, 3, (e->end_ns - e->start_ns) * 1000);
        BytesField(line, 4, event);
      }
      BytesField(plane, 3, line);
    }
    for (const auto& [name, id] : metadata_ids) {
      std::string metadata;
      IntField(metadata, 1, id);
      BytesField(metadata, 2, name);
      BytesField(metadata, 4, name);
      std::string entry;  // map<int64, XEventMetadata> entry: key 1, value 2.
      IntField(entry, 1, id);
      BytesField(entry, 2, metadata);
      BytesField(plane, 4, entry);
    }
    BytesField(space, 1, plane);
  }
  return space;
}

}  // namespace workshop::profiler
