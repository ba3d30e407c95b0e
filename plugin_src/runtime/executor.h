// RunPlan: interprets a Plan on one device (one partition of a launch).
#pragma once

#include <memory>
#include <vector>

#include "kernels/core/kernel.h"
#include "runtime/buffer.h"
#include "runtime/plan.h"

namespace workshop {

// Runs `plan` with `args` (one Storage per plan parameter, each the parameter's byte size)
// and stores one Storage per plan result in `results`. Intermediates are released right
// after their last use. Errors name the failing op and its source location.
Status RunPlan(const Plan& plan, const LaunchContext& launch,
               std::vector<std::shared_ptr<Storage>> args,
               std::vector<std::shared_ptr<Storage>>* results);

}  // namespace workshop
