// RunPlan: interprets a Plan on one device (one partition of a launch).
#pragma once

#include <memory>
#include <vector>

#include "kernels/core/kernel.h"
#include "runtime/buffer.h"
#include "runtime/plan.h"

namespace workshop {

// A result whose value goes into a donated parameter's storage (input_output_alias):
// parameter `param` (index into plan.params) and result `result` (index into
// plan.results), of the same byte size, both row-major.
struct DonatedResult {
  int param;
  int result;
};

// Runs `plan` with `args` (one Storage per plan parameter, each the parameter's byte size)
// and stores one Storage per plan result in `results`. Intermediates are released right
// after their last use. Errors name the failing op and its source location.
//
// `donated`: results to be placed in their parameter's storage (buffer assignment of an
// aliased pair, as XLA's). The storage is reserved from the start; the result's producing
// instruction writes into it directly when the parameter's last use is before it, or when
// it is a `reuses_operand0` kernel updating that parameter; otherwise the result is copied
// into it as soon as both the result exists and nothing else holds the parameter (after the
// producing instruction if that was the parameter's last use, else at the parameter's last
// use): at most one extra copy of that one value is ever live. A parameter storage that
// someone else holds as well (not donated after all) is left alone.
Status RunPlan(const Plan& plan, const LaunchContext& launch,
               std::vector<std::shared_ptr<Storage>> args,
               std::vector<std::shared_ptr<Storage>>* results,
               const std::vector<DonatedResult>& donated = {});

}  // namespace workshop
