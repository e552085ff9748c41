#include "compute/ops/plugin_error.h"

namespace tensormorph::ops {
namespace {

// Returned when even the error cannot be allocated; error_destroy leaves it alone.
TM_Error& out_of_memory_error() noexcept {
  static TM_Error error{TM_STATUS_RESOURCE_EXHAUSTED, "out of memory"};
  return error;
}

}  // namespace

TM_Error* make_plugin_error(TM_StatusCode code, std::string message) noexcept {
  try {
    return new TM_Error{code, std::move(message)};
  } catch (...) {
    return &out_of_memory_error();
  }
}

TM_Error* plugin_error_from_status(const Status& status) noexcept {
  if (status.ok()) return nullptr;
  try {
    return make_plugin_error(static_cast<TM_StatusCode>(status.code()), status.message());
  } catch (...) {
    return &out_of_memory_error();
  }
}

TM_StatusCode plugin_error_code(const TM_Error* error) noexcept {
  return error == nullptr ? TM_STATUS_OK : error->code;
}

const char* plugin_error_message(const TM_Error* error) noexcept {
  return error == nullptr ? "" : error->message.c_str();
}

void plugin_error_destroy(TM_Error* error) noexcept {
  if (error != &out_of_memory_error()) delete error;
}

}  // namespace tensormorph::ops
