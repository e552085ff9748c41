// Status and Result<T>: errors are values across the whole library.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tensormorph {

/// Machine-readable error category; stable, mirrored by the C plugin ABI.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   ///< the caller passed something malformed
  kNotFound = 2,          ///< a named file or tensor does not exist
  kIoError = 3,           ///< the operating system refused a read, map or write
  kFormatError = 4,       ///< a file violates its format (message names file and offset)
  kUnsupported = 5,       ///< well-formed input this version cannot handle yet
  kUnimplemented = 6,     ///< an operation a backend does not provide
  kResourceExhausted = 7, ///< out of memory or over a budget
  kDeviceLost = 8,        ///< an accelerator died mid-operation
  kInternal = 9,          ///< a bug in Tensormorph
  kOutputTooSmall = 10,   ///< a data-dependent output needs more room (the host grows it and retries)
  kFailedPrecondition = 11,  ///< refused as things are set (constraints exclude every backend); host only, never crosses the ABI
};

/// Human-readable name of a status code ("FORMAT_ERROR", ...).
std::string_view status_code_name(StatusCode code);

/// Outcome of an operation: OK, or a code with a message meant for the user.
class [[nodiscard]] Status {
 public:
  /// Constructs OK.
  Status() = default;
  /// Constructs an error (or OK when code is kOk).
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  /// The OK status.
  static Status Ok() { return {}; }
  /// Shorthands for each error category.
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status FormatError(std::string m) { return {StatusCode::kFormatError, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  /// True when no error occurred.
  bool ok() const { return code_ == StatusCode::kOk; }
  /// The error category.
  StatusCode code() const { return code_; }
  /// The message for the user (empty when OK).
  const std::string& message() const { return message_; }
  /// "FORMAT_ERROR: message".
  std::string to_string() const;
  /// Returns a copy whose message is prefixed with `context: ` (the hint is kept).
  Status with_context(std::string_view context) const;
  /// What the user can do about the error, in one sentence (empty when nothing specific).
  const std::string& hint() const { return hint_; }
  /// Returns a copy carrying `hint` (the message should say it too: most faces print only the message).
  Status with_hint(std::string hint) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string hint_;
};

/// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  /// Holds a value.
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// Holds an error; passing an OK status is a programmer error.
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from OK status");
  }

  /// True when a value is held.
  bool ok() const { return std::holds_alternative<T>(v_); }
  /// The error, or OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  /// The held value; calling it on an error is a programmer error.
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tensormorph

#define TM_CONCAT_INNER(a, b) a##b
#define TM_CONCAT(a, b) TM_CONCAT_INNER(a, b)

/// Returns the status from the enclosing function when `expr` is not OK.
#define TM_RETURN_IF_ERROR(expr)                         \
  do {                                                   \
    ::tensormorph::Status tm_status_ = (expr);           \
    if (!tm_status_.ok()) return tm_status_;             \
  } while (0)

#define TM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)         \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return tmp.status();                    \
  lhs = std::move(tmp).value()

/// `TM_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define TM_ASSIGN_OR_RETURN(lhs, expr) \
  TM_ASSIGN_OR_RETURN_IMPL(TM_CONCAT(tm_result_, __LINE__), lhs, expr)
