// The TM_Error object of the built-in backends, and the guard that keeps C++ exceptions from
// crossing the plugin ABI. One definition for every backend linked into the binary.
#pragma once

#include <new>
#include <string>

#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

/// An error returned across the ABI: allocated with new, released by error_destroy.
struct TM_Error {
  TM_StatusCode code;
  std::string message;
};

namespace tensormorph::ops {

/// A new TM_Error (never null: falls back to a static out-of-memory error).
TM_Error* make_plugin_error(TM_StatusCode code, std::string message) noexcept;
/// nullptr for OK, else a new TM_Error with the status' code and message.
TM_Error* plugin_error_from_status(const Status& status) noexcept;
/// error_code entry point.
TM_StatusCode plugin_error_code(const TM_Error* error) noexcept;
/// error_message entry point.
const char* plugin_error_message(const TM_Error* error) noexcept;
/// error_destroy entry point (ignores the static out-of-memory error).
void plugin_error_destroy(TM_Error* error) noexcept;

/// Runs `body` (returning Status) and converts its outcome to a TM_Error*; std::bad_alloc
/// becomes RESOURCE_EXHAUSTED, any other exception INTERNAL.
template <typename Body>
TM_Error* guard_plugin_call(const char* what, Body&& body) noexcept {
  try {
    return plugin_error_from_status(body());
  } catch (const std::bad_alloc&) {
    return make_plugin_error(TM_STATUS_RESOURCE_EXHAUSTED, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return make_plugin_error(TM_STATUS_INTERNAL, std::string(what) + ": unexpected exception: " + e.what());
  } catch (...) {
    return make_plugin_error(TM_STATUS_INTERNAL, std::string(what) + ": unexpected exception");
  }
}

}  // namespace tensormorph::ops
