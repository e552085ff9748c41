// Close tensor names for a name or --tensor glob that matched nothing ("did you mean ...").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph::cli {

/// Up to `limit` names of `ckpt` close to `wanted` (an exact name or a shell glob), closest first:
/// each literal piece of `wanted` (the text between wildcards) found in the name with few edits,
/// case ignored; ties go to the name nearest `wanted` as a whole. Empty when nothing is close.
std::vector<std::string> closest_tensor_names(const Checkpoint& ckpt, std::string_view wanted, size_t limit = 5);

/// "; close names: 'a', 'b'" for a message; when `names` is empty, a pointer to the `total`
/// names instead.
std::string close_names_text(const std::vector<std::string>& names, size_t total);

}  // namespace tensormorph::cli
