// "Did you mean …": the tensor names closest to one that does not exist, for error hints.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph::server {

/// Up to `limit` names of `tensors` closest to `wanted`: names containing it (case-insensitively,
/// shortest first), then the fewest single-character edits away, ties in checkpoint order.
std::vector<std::string> closest_names(std::string_view wanted, std::span<const TensorInfo> tensors, size_t limit = 3);

/// "did you mean 'a', 'b' or 'c'?" for `names`; "" when there are none.
std::string did_you_mean(const std::vector<std::string>& names);

}  // namespace tensormorph::server
