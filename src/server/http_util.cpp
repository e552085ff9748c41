#include "server/http_util.h"

#include "server/compression.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace tensormorph::server {

std::string json_text(const nlohmann::ordered_json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void reply_json(httplib::Response& res, const nlohmann::ordered_json& body, int status) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(json_text(body), kJsonType);
}

void reply_error(httplib::Response& res, const Status& status, const std::string& hint) {
  int http = 500;
  switch (status.code()) {
    case StatusCode::kInvalidArgument: http = 400; break;
    case StatusCode::kNotFound: http = 404; break;
    case StatusCode::kUnsupported:
    case StatusCode::kUnimplemented:
    case StatusCode::kFailedPrecondition:  // refused under the constraints in force
    case StatusCode::kResourceExhausted: http = 422; break;  // over a budget the user sets
    default: http = 500; break;
  }
  nlohmann::ordered_json body = {{"error", status.message()}, {"code", std::string(status_code_name(status.code()))}};
  const std::string& why = hint.empty() ? status.hint() : hint;
  if (!why.empty()) body["hint"] = why;
  reply_json(res, body, http);
}

std::optional<std::string> param(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  return req.get_param_value(name);
}

Result<uint64_t> parse_uint(const std::string& text, const char* what, uint64_t max) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v > max) {
    return Status::InvalidArgument(std::string(what) + " '" + text.substr(0, 40) + "' is not an integer in [0, " +
                                   std::to_string(max) + "]");
  }
  return v;
}

Result<uint64_t> uint_param(const httplib::Request& req, const char* name, uint64_t fallback, uint64_t max) {
  auto text = param(req, name);
  if (!text) return fallback;
  return parse_uint(*text, name, max);
}

Result<double> double_param(const httplib::Request& req, const char* name, double fallback) {
  auto text = param(req, name);
  if (!text) return fallback;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(v)) {
    return Status::InvalidArgument(std::string(name) + " '" + text->substr(0, 40) + "' is not a finite number");
  }
  return v;
}

nlohmann::ordered_json json_number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

}  // namespace tensormorph::server
