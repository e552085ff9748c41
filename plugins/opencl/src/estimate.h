// A simple, documented throughput model for `estimate`.
#pragma once

#include "backend.h"
#include "op_parse.h"
#include "tensormorph/c/plugin.h"

namespace tm_opencl {

/// The device-side cost of a validated operation (see estimate.cpp for the model).
TM_CostEstimate estimate_cost(const TM_Backend& backend, const ParsedOp& op);

}  // namespace tm_opencl
