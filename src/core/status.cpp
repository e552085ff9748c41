#include "tensormorph/status.h"

namespace tensormorph {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kIoError: return "IO_ERROR";
    case StatusCode::kFormatError: return "FORMAT_ERROR";
    case StatusCode::kUnsupported: return "UNSUPPORTED";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kDeviceLost: return "DEVICE_LOST";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kOutputTooSmall: return "OUTPUT_TOO_SMALL";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  Status out(code_, std::string(context) + ": " + message_);
  out.hint_ = hint_;
  return out;
}

Status Status::with_hint(std::string hint) const {
  Status out = *this;
  if (!ok()) out.hint_ = std::move(hint);
  return out;
}

}  // namespace tensormorph
