// Small helpers shared by the route handlers: JSON replies, errors as JSON, checked parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tensormorph/status.h"

namespace tensormorph::server {

/// Replies `body` as JSON with `status` (200 by default).
void reply_json(httplib::Response& res, const nlohmann::ordered_json& body, int status = 200);
/// `body` as reply_json sends it.
std::string json_text(const nlohmann::ordered_json& body);
/// Replies {"error": message, "code": "NOT_FOUND"} with the HTTP status matching the code, plus
/// "hint" (what the user can do about it): `hint` when not empty, else the status's own.
void reply_error(httplib::Response& res, const Status& status, const std::string& hint = {});
/// The query parameter `name`, or nullopt.
std::optional<std::string> param(const httplib::Request& req, const char* name);
/// An unsigned integer parameter (decimal, <= max); `fallback` when absent; INVALID_ARGUMENT when malformed.
Result<uint64_t> uint_param(const httplib::Request& req, const char* name, uint64_t fallback, uint64_t max);
/// A finite floating-point parameter; `fallback` when absent.
Result<double> double_param(const httplib::Request& req, const char* name, double fallback);
/// Parses a decimal unsigned integer path component (<= max).
Result<uint64_t> parse_uint(const std::string& text, const char* what, uint64_t max);
/// A float for JSON: the number, or null for NaN/Inf (JSON has neither).
nlohmann::ordered_json json_number(double v);

}  // namespace tensormorph::server
