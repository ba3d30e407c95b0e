// Status: the runtime's error value. Codes are absl's (1..16) because the PJRT C API
// hands them to jaxlib unchanged (PJRT_Error_Code uses the same numbering).
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace workshop {

enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Concatenates anything streamable; keeps error construction to one line.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
Status InvalidArgument(const Args&... args) {
  return Status(Code::kInvalidArgument, StrCat(args...));
}
template <typename... Args>
Status Unimplemented(const Args&... args) {
  return Status(Code::kUnimplemented, StrCat(args...));
}
template <typename... Args>
Status FailedPrecondition(const Args&... args) {
  return Status(Code::kFailedPrecondition, StrCat(args...));
}
template <typename... Args>
Status Internal(const Args&... args) {
  return Status(Code::kInternal, StrCat(args...));
}
template <typename... Args>
Status ResourceExhausted(const Args&... args) {
  return Status(Code::kResourceExhausted, StrCat(args...));
}

#define WORKSHOP_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::workshop::Status _st = (expr);   \
    if (!_st.ok()) return _st;         \
  } while (0)

}  // namespace workshop
