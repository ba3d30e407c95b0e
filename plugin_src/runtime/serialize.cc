#include "runtime/serialize.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace workshop {
namespace {

constexpr std::string_view kMagic = "WSEX";
// 2: the body is length-prefixed and CRC-32 checked (1 had neither: 400 random bit flips
// in v1 blobs gave 6 silently wrong results, 3 segfaults and 2 hangs).
constexpr uint32_t kFormatVersion = 3;  // 3: parameter and output layouts

// CRC-32 (IEEE, reflected, as zlib.crc32), so tests can re-seal an edited body.
uint32_t Crc32(std::string_view bytes) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}
// Sub-plans nest (a while inside a case inside a while...); bound the recursion a hostile
// or corrupt blob could ask for.
constexpr int kMaxPlanDepth = 64;

class Writer {
 public:
  template <typename T>
    requires std::is_arithmetic_v<T>
  void Put(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 Linux: little-endian.
    out_.append(bytes, sizeof(T));
  }
  void Put(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.append(s);
  }
  template <typename T>
  void Put(const std::vector<T>& items) {
    Put<uint64_t>(items.size());
    for (const T& item : items) Put(item);
  }
  void Put(const Plan& plan) {
    Put<uint64_t>(plan.slots.size());
    for (const SlotType& slot : plan.slots) {
      Put<int32_t>(static_cast<int32_t>(slot.dtype));
      Put(slot.dims);
    }
    Put(plan.params);
    Put(plan.results);
    Put(plan.frees);
    Put<uint64_t>(plan.instrs.size());
    for (const Instr& instr : plan.instrs) {
      Put(instr.op);
      Put(instr.ins);
      Put(instr.outs);
      Put(instr.loc);
      Put<uint64_t>(instr.attrs.size());
      for (const auto& [key, attr] : instr.attrs) {
        Put(key);
        Put<uint8_t>(static_cast<uint8_t>(attr.index()));
        std::visit([this](const auto& value) { PutAttr(value); }, attr);
      }
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  void PutAttr(int64_t v) { Put(v); }
  void PutAttr(double v) { Put(v); }
  void PutAttr(const std::string& v) { Put(std::string_view(v)); }
  void PutAttr(const IntList& v) { Put(v); }
  void PutAttr(const std::vector<IntList>& v) { Put(v); }
  void PutAttr(const std::shared_ptr<const Plan>& v) { Put(*v); }

  std::string out_;
};

// Every read is bounds-checked; the first failure sticks and later reads return zeros.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool ok() const { return ok_; }
  bool at_end() const { return in_.empty(); }
  size_t remaining() const { return in_.size(); }

  template <typename T>
    requires std::is_arithmetic_v<T>
  void Get(T& value) {
    value = T{};
    if (!Need(sizeof(T))) return;
    std::memcpy(&value, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
  }
  void Get(std::string& s) {
    uint64_t size = 0;
    Get(size);
    if (!Need(size)) return;
    s.assign(in_.data(), size);
    in_.remove_prefix(size);
  }
  template <typename T>
  void Get(std::vector<T>& items) {
    uint64_t size = 0;
    Get(size);
    // Every element takes at least one byte, so a size beyond the rest of the blob is a
    // corrupt blob, not a reason to allocate.
    if (!Need(0) || size > in_.size()) return Fail();
    items.resize(size);
    for (T& item : items) Get(item);
  }
  void Get(Plan& plan, int depth) {
    if (depth > kMaxPlanDepth) return Fail();
    uint64_t num_slots = 0;
    Get(num_slots);
    if (num_slots > in_.size()) return Fail();
    plan.slots.resize(num_slots);
    for (SlotType& slot : plan.slots) {
      int32_t dtype = 0;
      Get(dtype);
      slot.dtype = static_cast<DType>(dtype);
      Get(slot.dims);
    }
    Get(plan.params);
    Get(plan.results);
    Get(plan.frees);
    uint64_t num_instrs = 0;
    Get(num_instrs);
    if (num_instrs > in_.size()) return Fail();
    plan.instrs.resize(num_instrs);
    for (Instr& instr : plan.instrs) {
      Get(instr.op);
      Get(instr.ins);
      Get(instr.outs);
      Get(instr.loc);
      uint64_t num_attrs = 0;
      Get(num_attrs);
      for (uint64_t i = 0; ok_ && i < num_attrs; ++i) {
        std::string key;
        Get(key);
        uint8_t index = 0;
        Get(index);
        instr.attrs.emplace(std::move(key), GetAttr(index, depth));
      }
    }
  }

 private:
  bool Need(uint64_t bytes) {
    if (!ok_ || bytes > in_.size()) Fail();
    return ok_;
  }
  void Fail() {
    ok_ = false;
    in_ = {};
  }
  template <typename T>
  T GetAs() {
    T value{};
    Get(value);
    return value;
  }
  Attr GetAttr(uint8_t index, int depth) {
    switch (index) {
      case 0: return GetAs<int64_t>();
      case 1: return GetAs<double>();
      case 2: return GetAs<std::string>();
      case 3: return GetAs<IntList>();
      case 4: return GetAs<std::vector<IntList>>();
      case 5: {
        auto plan = std::make_shared<Plan>();
        Get(*plan, depth + 1);
        return std::shared_ptr<const Plan>(std::move(plan));
      }
    }
    Fail();
    return int64_t{0};
  }

  std::string_view in_;
  bool ok_ = true;
};

// Vectors of pairs (donations, cost properties) go through these two.
template <typename A, typename B>
void PutPairs(Writer& w, const std::vector<std::pair<A, B>>& pairs) {
  w.Put<uint64_t>(pairs.size());
  for (const auto& [a, b] : pairs) {
    w.Put(a);
    w.Put(b);
  }
}
template <typename A, typename B>
void GetPairs(Reader& r, std::vector<std::pair<A, B>>& pairs) {
  uint64_t size = 0;
  r.Get(size);
  for (uint64_t i = 0; r.ok() && i < size; ++i) {
    A a{};
    B b{};
    r.Get(a);
    r.Get(b);
    pairs.emplace_back(std::move(a), b);
  }
}

}  // namespace

const std::string& BuildId() {
  static const std::string id =
      StrCat("workshop ", WORKSHOP_VERSION, " built ", __DATE__, " ", __TIME__);
  return id;
}

std::string SerializeProgram(const Program& p) {
  Writer w;
  w.Put(BuildId());
  w.Put(p.source_code);
  w.Put(p.source_format);
  w.Put(p.source_options);
  w.Put<uint8_t>(1);
  w.Put(p.name);
  w.Put<int32_t>(p.num_replicas);
  w.Put<int32_t>(p.num_partitions);
  w.Put(p.device_assignment);
  w.Put(p.device_assignment_proto);
  PutPairs(w, p.donations);
  w.Put(p.fingerprint);
  w.Put(p.text);
  w.Put(p.parameter_memory_kinds);
  w.Put(p.output_memory_kinds);
  w.Put(p.parameter_layouts);
  w.Put(p.output_layouts);
  w.Put(p.optimized_program);
  PutPairs(w, p.cost_analysis);
  w.Put(p.plan);
  const std::string body = w.Take();
  Writer header;
  header.Put(kMagic);
  header.Put<uint32_t>(kFormatVersion);
  header.Put<uint64_t>(body.size());
  header.Put<uint32_t>(Crc32(body));
  return header.Take() + body;
}

Status DeserializeProgram(std::string_view blob, SerializedProgram* out) {
  Reader h(blob);
  std::string magic;
  uint32_t version = 0, crc = 0;
  uint64_t body_size = 0;
  h.Get(magic);
  if (!h.ok() || magic != kMagic) {
    return InvalidArgument("workshop: not a serialized workshop executable (no WSEX header)");
  }
  h.Get(version);
  if (h.ok() && version != kFormatVersion) {
    return InvalidArgument("workshop: serialized executable format version ", version,
                           "; this plugin reads version ", kFormatVersion, " (recompile it)");
  }
  h.Get(body_size);
  h.Get(crc);
  const size_t header_size = blob.size() - h.remaining();
  if (!h.ok() || body_size != blob.size() - header_size) {
    return InvalidArgument("workshop: serialized executable is ", blob.size(),
                           " bytes but its header announces ", header_size + body_size,
                           " (truncated or padded)");
  }
  const std::string_view body = blob.substr(header_size);
  if (Crc32(body) != crc) {
    return InvalidArgument(
        "workshop: serialized executable fails its CRC-32 check "
        "(corrupted in storage or transit)");
  }
  Reader r(body);
  std::string build;
  r.Get(build);
  Program& p = out->program;
  r.Get(p.source_code);
  r.Get(p.source_format);
  r.Get(p.source_options);
  uint8_t has_plan = 0;
  r.Get(has_plan);
  if (!r.ok()) return InvalidArgument("workshop: truncated serialized executable");
  out->has_plan = has_plan == 1 && build == BuildId();
  if (!out->has_plan) return Status();  // The caller recompiles from the source.

  r.Get(p.name);
  r.Get(p.num_replicas);
  r.Get(p.num_partitions);
  r.Get(p.device_assignment);
  r.Get(p.device_assignment_proto);
  GetPairs(r, p.donations);
  r.Get(p.fingerprint);
  r.Get(p.text);
  r.Get(p.parameter_memory_kinds);
  r.Get(p.output_memory_kinds);
  r.Get(p.parameter_layouts);
  r.Get(p.output_layouts);
  r.Get(p.optimized_program);
  GetPairs(r, p.cost_analysis);
  r.Get(p.plan, 0);
  if (!r.ok() || !r.at_end()) {
    return InvalidArgument("workshop: corrupt serialized executable ", p.name);
  }
  // The same checks a fresh compile's plan passes (plan.h), as INVALID_ARGUMENT: here a
  // failure means a bad blob, not a compiler bug.
  Status status = PrepareProgram(p);
  if (!status.ok()) {
    return InvalidArgument("workshop: serialized executable ", p.name,
                           " fails validation: ", status.message());
  }
  return Status();
}

}  // namespace workshop
