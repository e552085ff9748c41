#include "py_support.h"

#include <map>
#include <mutex>

namespace tensormorph::python {
namespace {

// The exception classes, created once by register_exceptions (borrowed from the module, which
// lives as long as the interpreter).
struct ExceptionClasses {
  PyObject* base = nullptr;
  PyObject* format = nullptr;
  PyObject* not_found = nullptr;
  PyObject* unsupported = nullptr;
  PyObject* io = nullptr;
  PyObject* exhausted = nullptr;
  PyObject* invalid = nullptr;
};
ExceptionClasses g_errors;

PyObject* make_exception(py::module_& module, const char* name, const char* doc, PyObject* bases) {
  const std::string qualified = std::string("tensormorph.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  module.add_object(name, py::reinterpret_borrow<py::object>(type));
  return type;
}

thread_local nlohmann::ordered_json t_last_placements = nlohmann::ordered_json::array();

}  // namespace

void register_exceptions(py::module_& m) {
  g_errors.base = make_exception(m, "TensormorphError",
                                 "An error of Tensormorph; the message names the file, the tensor and the offset. "
                                 "`code` is the status code's name.",
                                 PyExc_Exception);
  auto two = [&](PyObject* second) {
    return py::make_tuple(py::reinterpret_borrow<py::object>(g_errors.base), py::reinterpret_borrow<py::object>(second));
  };
  g_errors.format = make_exception(m, "FormatError", "A file violates its format.", two(PyExc_ValueError).ptr());
  g_errors.not_found = make_exception(m, "NotFoundError", "A named file or tensor does not exist.",
                                      two(PyExc_LookupError).ptr());
  g_errors.unsupported = make_exception(m, "UnsupportedError", "Well-formed input this version cannot handle.",
                                        two(PyExc_NotImplementedError).ptr());
  g_errors.io = make_exception(m, "IoError", "The operating system refused a read, map or write.",
                               two(PyExc_OSError).ptr());
  g_errors.exhausted = make_exception(m, "ResourceExhaustedError", "Out of memory or over a budget.",
                                      two(PyExc_MemoryError).ptr());
  g_errors.invalid = make_exception(m, "InvalidArgumentError", "An argument Tensormorph cannot use.",
                                    two(PyExc_ValueError).ptr());
}

void raise_status(const Status& status) {
  PyObject* type = g_errors.base;
  switch (status.code()) {
    case StatusCode::kFormatError: type = g_errors.format; break;
    case StatusCode::kNotFound: type = g_errors.not_found; break;
    case StatusCode::kUnsupported:
    case StatusCode::kUnimplemented: type = g_errors.unsupported; break;
    case StatusCode::kIoError: type = g_errors.io; break;
    case StatusCode::kResourceExhausted: type = g_errors.exhausted; break;
    case StatusCode::kInvalidArgument: type = g_errors.invalid; break;
    default: break;
  }
  py::object error = py::reinterpret_borrow<py::object>(type)(status.message());
  error.attr("code") = std::string(status_code_name(status.code()));
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

py::object to_python(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(v.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(v.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(v.get<uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(v.get<double>());
    case nlohmann::json::value_t::string: return py::str(v.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list list;
      for (const auto& item : v) list.append(to_python(item));
      return list;
    }
    case nlohmann::json::value_t::object: {
      py::dict dict;
      for (const auto& [key, item] : v.items()) dict[py::str(key)] = to_python(item);
      return dict;
    }
    default: return py::none();  // binary and discarded values never come from Tensormorph's documents
  }
}

Result<engine::ComputeSession*> session_for(const std::string& compute_spec) {
  static std::mutex mutex;
  // Leaked on purpose: plugins' device runtimes may outlive the interpreter's teardown order.
  static auto* sessions = new std::map<std::string, std::unique_ptr<engine::ComputeSession>>;
  std::lock_guard lock(mutex);
  auto& session = (*sessions)[compute_spec];
  if (!session) {
    auto opened = engine::open_default_session(compute_spec);
    if (!opened.ok()) {
      sessions->erase(compute_spec);
      return opened.status();
    }
    session = std::move(opened).value();
  }
  return session.get();
}

void remember_placements(const engine::Records& records) {
  t_last_placements = nlohmann::ordered_json::array();
  for (const auto& r : records) t_last_placements.push_back(r.to_json());
}

py::list last_placements() { return to_python(t_last_placements).cast<py::list>(); }

ProgressRelay::ProgressRelay(py::object callback) : callback_(std::move(callback)) {}

ProgressRelay::~ProgressRelay() {
  py::gil_scoped_acquire gil;
  callback_ = py::object();
  error_.reset();
}

bool ProgressRelay::report(double done, double total, const std::string& current, double seconds) {
  std::lock_guard lock(mutex_);
  if (stop_.load()) return false;
  const bool last = done >= total;
  if (!last && last_report_ >= 0 && seconds - last_report_ < 0.1) return true;
  last_report_ = seconds;
  py::gil_scoped_acquire gil;
  try {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!callback_.is_none()) callback_(done, total, current, seconds);
  } catch (py::error_already_set& e) {
    error_ = std::make_unique<py::error_already_set>(std::move(e));
    stop_.store(true);
    return false;
  }
  return true;
}

void ProgressRelay::rethrow() {
  if (!error_) return;
  auto error = std::move(error_);
  throw std::move(*error);
}

reports::ProgressFn relayed(ProgressRelay& relay) {
  return [&relay](const reports::AnalysisProgress& p) {
    return relay.report(p.work_done, p.work_total, p.current, p.seconds);
  };
}

}  // namespace tensormorph::python
