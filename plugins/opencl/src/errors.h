// Errors as values inside the plugin. At the ABI boundary they become the plugin kit's error
// objects (plugin_entry.cpp), so the table's error entries are the kit's.
#pragma once

#include <CL/cl.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "tensormorph/c/plugin.h"
#include "tensormorph/c/plugin_kit.h"

namespace tm_opencl {

/// A failure on its way to the ABI.
struct Failure {
  TM_StatusCode code = TM_STATUS_INTERNAL;  ///< the category
  std::string message;                       ///< what failed
};

/// Success, or a Failure.
class [[nodiscard]] Status {
 public:
  /// Success.
  Status() = default;
  /// A failure (implicit so that `return invalid_argument(...)` reads naturally).
  Status(Failure failure) : failure_(std::move(failure)) {}  // NOLINT(google-explicit-constructor)
  /// True on success.
  bool ok() const { return !failure_.has_value(); }
  /// The failure; only valid when !ok().
  Failure take_failure() { return std::move(*failure_); }

 private:
  std::optional<Failure> failure_;
};

/// A value of type T, or a Failure.
template <typename T>
class [[nodiscard]] Result {
 public:
  /// A value.
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// A failure.
  Result(Failure failure) : state_(std::move(failure)) {}  // NOLINT(google-explicit-constructor)
  /// True when a value is held.
  bool ok() const { return std::holds_alternative<T>(state_); }
  /// The value; only valid when ok().
  T& value() { return std::get<T>(state_); }
  /// The failure; only valid when !ok().
  Failure take_failure() { return std::move(std::get<Failure>(state_)); }

 private:
  std::variant<T, Failure> state_;
};

/// A caller's mistake: bad pointer, count, shape, size or attribute.
Failure invalid_argument(std::string message);
/// Something this plugin deliberately does not do (the host places it elsewhere).
Failure unimplemented(std::string message);
/// Out of device memory or over a budget.
Failure resource_exhausted(std::string message);
/// The failure a plugin-kit check reported.
Failure kit_failure(const TM_KitStatus& status);

/// The symbolic name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES".
const char* cl_error_name(cl_int error);
/// A failure for OpenCL call `call` returning `error`, categorised by what the host can do about it.
Failure cl_failure(cl_int error, std::string_view call);

}  // namespace tm_opencl

/// Returns the failure of a Status expression from the enclosing function.
#define TMCL_RETURN_IF_ERROR(expr)                                \
  do {                                                            \
    ::tm_opencl::Status tmcl_status_ = (expr);                    \
    if (!tmcl_status_.ok()) return tmcl_status_.take_failure();   \
  } while (0)

/// Evaluates a Result expression; returns its failure, or moves its value into `lhs`.
#define TMCL_ASSIGN_OR_RETURN(lhs, expr) TMCL_ASSIGN_OR_RETURN_IMPL(TMCL_CONCAT(tmcl_result_, __LINE__), lhs, expr)
#define TMCL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.take_failure();        \
  lhs = std::move(tmp.value())
#define TMCL_CONCAT(a, b) TMCL_CONCAT_IMPL(a, b)
#define TMCL_CONCAT_IMPL(a, b) a##b

/// Checks an OpenCL call's return code; returns a failure naming the call and the CL error.
#define TMCL_CL_CHECK(call_expr, call_name)                                    \
  do {                                                                         \
    const cl_int tmcl_error_ = (call_expr);                                    \
    if (tmcl_error_ != CL_SUCCESS) return ::tm_opencl::cl_failure(tmcl_error_, call_name); \
  } while (0)
