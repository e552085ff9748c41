// Checks shared by the readers that assemble a tensor from chunks (DCP, per-rank ShardedTensor sets).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph {

/// "[4, 3]": dimensions as messages print them.
std::string dims_text(const std::vector<uint64_t>& dims);

/// The chunks of `tensor` lie within its shape and tile it once; errors start with `source`.
Status check_chunk_tiling(std::string_view source, const TensorInfo& tensor);

}  // namespace tensormorph
