// Small text-formatting helpers shared by the CLI commands.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tensormorph::cli {

/// "1.50 GiB", "512 B".
std::string human_bytes(uint64_t bytes);
/// "8.71M", "292.8K", "12".
std::string human_count(uint64_t count);
/// An exact count with its digits grouped in threes: "393,216", "12".
std::string grouped_count(uint64_t count);
/// Shortest decimal that round-trips a double ("0.1", "nan", "inf").
std::string format_double(double value);
/// A CSV field: quoted when it holds a separator, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& text);
/// `j` as JSON text (`indent` as in nlohmann's dump: -1 compact). Never throws on strings that are
/// not UTF-8 (GGUF names and metadata may hold any bytes): each invalid byte of a key or string
/// value is written as the four characters "\xNN" (see printable.h's escape_invalid_utf8).
std::string json_text(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace tensormorph::cli
