// Small text-formatting helpers shared by the CLI commands.
#pragma once

#include <cstdint>
#include <string>

namespace tensormorph::cli {

/// "1.50 GiB", "512 B".
std::string human_bytes(uint64_t bytes);
/// "8.71M", "292.8K", "12".
std::string human_count(uint64_t count);
/// Shortest decimal that round-trips a double ("0.1", "nan", "inf").
std::string format_double(double value);

}  // namespace tensormorph::cli
