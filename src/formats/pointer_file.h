// Small text files that name another checkpoint directory: DeepSpeed's `latest` (a tag such as
// global_step100) and Megatron's latest_checkpointed_iteration.txt (an iteration number).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tensormorph/status.h"

namespace tensormorph {

/// The text of `file` with surrounding whitespace removed; nullopt when there is no such file, an
/// error naming it when it is larger than `max_bytes` (`expected` says what it should hold).
Result<std::optional<std::string>> read_pointer_file(const std::filesystem::path& file, uint64_t max_bytes,
                                                     std::string_view expected);

/// What Megatron's latest_checkpointed_iteration.txt in `directory` names: nullopt when there is
/// none, else "release" or the iteration number as written (at most 18 digits); an error naming the
/// file when it holds anything else.
Result<std::optional<std::string>> latest_checkpointed_iteration(const std::filesystem::path& directory);

/// Megatron's directory of the iteration whose number is `digits`: "iter_" and seven or more digits.
std::string iteration_directory_name(const std::string& digits);

}  // namespace tensormorph
