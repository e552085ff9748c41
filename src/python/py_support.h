// What the Python bindings share: Status as Python exceptions, JSON as Python objects, compute
// sessions by constraint, the placement records of the last call, progress and Ctrl-C.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/compute_session.h"
#include "engine/tensor_ops.h"
#include "reports/report.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::python {

namespace py = pybind11;

/// Creates the exception classes (TensormorphError and its subclasses) in `module`.
void register_exceptions(py::module_& module);

/// Raises `status` (not OK) as the Python exception of its code, with its message (GIL held).
[[noreturn]] void raise_status(const Status& status);

/// The value of `result`, or its status raised.
template <typename T>
T value_or_raise(Result<T> result) {
  if (!result.ok()) raise_status(result.status());
  return std::move(result).value();
}

/// JSON as plain Python data: dicts, lists, str, int, float, bool and None.
py::object to_python(const nlohmann::ordered_json& value);

/// The compute session for `compute_spec` ("" = the persisted settings; "prefer=cuda", ...): opened
/// on first use and kept for the process, so plugins load once. Call without the GIL.
Result<engine::ComputeSession*> session_for(const std::string& compute_spec);

/// Remembers `records` as this thread's last placements (tensormorph.last_placements()).
void remember_placements(const engine::Records& records);

/// This thread's last placements, as a list of dicts.
py::list last_placements();

/// Relays progress to a Python callable with the GIL held (at most ten times a second, and the
/// last report always), and notices Ctrl-C or an exception the callable raised: `stop()` becomes
/// true and `rethrow()` raises it once the GIL is back.
class ProgressRelay {
 public:
  /// `callback`: None, or callable(done, total, current, seconds).
  explicit ProgressRelay(py::object callback);
  ~ProgressRelay();
  /// Reports progress; returns false once the work should stop. Called without the GIL.
  bool report(double done, double total, const std::string& current, double seconds);
  /// The flag update_index polls.
  const std::atomic<bool>* stop_flag() const { return &stop_; }
  /// Raises what stopped the work (KeyboardInterrupt, the callable's exception), if anything did.
  void rethrow();

 private:
  py::object callback_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<py::error_already_set> error_;
  std::mutex mutex_;  // reports may come from the threads doing the work
  double last_report_ = -1;
};

/// A report's progress relayed to `relay` (the analyses' modelled work or bytes).
reports::ProgressFn relayed(ProgressRelay& relay);

/// Runs `body(relay, records)` without the GIL — a Result<nlohmann::ordered_json> computed through
/// the reports — then remembers its placements, raises what stopped it (Ctrl-C, the progress
/// callable's exception) or its error, and returns its document as Python data.
template <typename Body>
py::object run_report(py::object progress, Body body) {
  ProgressRelay relay(std::move(progress));
  engine::Records records;
  Result<nlohmann::ordered_json> result = [&]() -> Result<nlohmann::ordered_json> {
    py::gil_scoped_release release;
    return body(relay, records);
  }();
  remember_placements(records);
  relay.rethrow();
  return to_python(value_or_raise(std::move(result)));
}

/// A tensor of an open checkpoint: the checkpoint stays alive while any of its tensors does.
struct TensorHandle {
  std::shared_ptr<const Checkpoint> checkpoint;
  const TensorInfo* info = nullptr;
};

}  // namespace tensormorph::python
