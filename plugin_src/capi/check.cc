// The out-of-line parts of the checked entry (check.h).
#include "capi/check.h"

namespace workshop::capi::check {

// A rejected call is traced like any other, so a trace shows what the caller got wrong.
PJRT_Error* Rejected(const char* function, Status status) {
  if (trace::Enabled()) {
    const int64_t now = trace::NowNs();
    trace::Record(function, StrCat("rejected=", status.message()), static_cast<int>(status.code()),
                  now, now);
  }
  return ToPjrt(std::move(status));
}

// An exception must not cross extern "C" (std::terminate): out of memory becomes
// RESOURCE_EXHAUSTED, anything else INTERNAL, both naming the function.
PJRT_Error* FromException(const char* function, std::exception_ptr exception) {
  try {
    std::rethrow_exception(exception);
  } catch (const std::bad_alloc&) {
    return ToPjrt(ResourceExhausted(function, ": out of memory (std::bad_alloc)"));
  } catch (const std::exception& e) {
    return ToPjrt(Internal(function, ": unexpected C++ exception: ", e.what()));
  } catch (...) {
    return ToPjrt(Internal(function, ": unexpected non-standard C++ exception"));
  }
}

}  // namespace workshop::capi::check
