#include "capi/trace.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace workshop::capi::trace {
namespace {

struct Entry {
  uint64_t seq;
  const char* function;  // A string literal.
  std::string args;
  int code;  // PJRT_Error_Code; 0 for success and for functions returning void.
  int64_t start_ns, duration_ns;
  int tid;
  std::string thread;
};

// The last kCapacity calls. seq numbers every call ever recorded, so a reader asking for
// calls since seq N can tell whether some were overwritten.
class Ring {
 public:
  static constexpr size_t kCapacity = 1 << 16;

  void Add(Entry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entry.seq = next_seq_++;
    if (entries_.size() < kCapacity) {
      entries_.push_back(std::move(entry));
    } else {
      entries_[entry.seq % kCapacity] = std::move(entry);
    }
  }
  uint64_t next_seq() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_seq_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
    next_seq_ = 0;
  }
  // Entries with seq >= since, oldest first.
  std::vector<Entry> Since(uint64_t since) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t first = next_seq_ - entries_.size();
    std::vector<Entry> out;
    for (uint64_t seq = std::max(since, first); seq < next_seq_; ++seq) {
      out.push_back(entries_[entries_.size() < kCapacity ? seq : seq % kCapacity]);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t next_seq_ = 0;
};

Ring& ring() {
  static auto* ring = new Ring();  // Never destroyed: calls can come during exit.
  return *ring;
}

bool print_to_stderr = false;

struct ThreadInfo {
  int tid;
  std::string name;
};

const ThreadInfo& CurrentThread() {
  thread_local const ThreadInfo info = [] {
    char name[16] = {0};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    return ThreadInfo{static_cast<int>(syscall(SYS_gettid)), name};
  }();
  return info;
}

void AppendJsonString(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  out += '"';
}

bool InitFromEnvironment() {
  const char* value = std::getenv("WORKSHOP_TRACE");
  const bool on = value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  print_to_stderr = on;
  return on;
}

}  // namespace

std::atomic<bool> enabled{InitFromEnvironment()};

void Note::Handle(const char* kind, const void* pointer, const char* role) {
  char text[64];
  std::snprintf(text, sizeof(text), "%s%s%s@%p", role ? role : "", role ? "=" : "", kind, pointer);
  if (!text_.empty()) text_ += ' ';
  text_ += text;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Record(const char* function, std::string args, int code, int64_t start_ns, int64_t end_ns) {
  const ThreadInfo& thread = CurrentThread();
  if (print_to_stderr) {
    std::fprintf(stderr, "[workshop trace] %-48s %-8s %9.3f ms  [%s] %s\n", function,
                 code == 0 ? "OK" : "ERROR", (end_ns - start_ns) / 1e6, thread.name.c_str(),
                 args.c_str());
  }
  ring().Add(Entry{0, function, std::move(args), code, start_ns, end_ns - start_ns, thread.tid,
                   thread.name});
}

}  // namespace workshop::capi::trace

// ---- Exported for Python (jax_plugins/workshop/teach/tracing.py, through ctypes).

using workshop::capi::trace::ring;

extern "C" {

__attribute__((visibility("default"))) void WorkshopTraceSetEnabled(int on) {
  workshop::capi::trace::enabled.store(on != 0);
}

__attribute__((visibility("default"))) int WorkshopTraceEnabled() {
  return workshop::capi::trace::Enabled() ? 1 : 0;
}

// The sequence number the next recorded call will get.
__attribute__((visibility("default"))) uint64_t WorkshopTraceNextSequence() {
  return ring().next_seq();
}

__attribute__((visibility("default"))) void WorkshopTraceClear() { ring().Clear(); }

// The calls with sequence number >= since, oldest first, one JSON object per line:
// {"seq","function","args","code","start_ns","duration_ns","tid","thread"}. The caller
// frees the text with WorkshopTraceFree.
__attribute__((visibility("default"))) char* WorkshopTraceDump(uint64_t since) {
  std::string out;
  for (const auto& e : ring().Since(since)) {
    out += "{\"seq\":" + std::to_string(e.seq) + ",\"function\":";
    workshop::capi::trace::AppendJsonString(out, e.function);
    out += ",\"args\":";
    workshop::capi::trace::AppendJsonString(out, e.args);
    out += ",\"code\":" + std::to_string(e.code) + ",\"start_ns\":" + std::to_string(e.start_ns) +
           ",\"duration_ns\":" + std::to_string(e.duration_ns) +
           ",\"tid\":" + std::to_string(e.tid) + ",\"thread\":";
    workshop::capi::trace::AppendJsonString(out, e.thread);
    out += "}\n";
  }
  char* text = static_cast<char*>(std::malloc(out.size() + 1));
  if (text != nullptr) std::memcpy(text, out.c_str(), out.size() + 1);
  return text;
}

__attribute__((visibility("default"))) void WorkshopTraceFree(char* text) { std::free(text); }

}  // extern "C"
