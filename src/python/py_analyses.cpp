// Indexing and the analyses for Python: each returns the document its CLI command prints with
// --json (placements included), computed by the same reports without the GIL.
#include <fnmatch.h>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "py_bindings.h"
#include "py_support.h"
#include "reports/spectrum_report.h"
#include "reports/stats_report.h"

namespace tensormorph::python {
namespace {

// The tensors whose names match one of `globs` (every tensor when there is none); NOT_FOUND when
// globs match none.
Result<std::vector<const TensorInfo*>> select(const Checkpoint& ckpt, const std::vector<std::string>& globs) {
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& t : ckpt.tensors()) {
    const bool wanted = globs.empty() || std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
                          return fnmatch(g.c_str(), t.name.c_str(), 0) == 0;
                        });
    if (wanted) tensors.push_back(&t);
  }
  if (tensors.empty() && !globs.empty()) {
    std::string patterns;
    for (const auto& g : globs) patterns += (patterns.empty() ? "'" : ", '") + g + "'";
    return Status::NotFound(ckpt.path().string() + ": no tensor matches " + patterns);
  }
  return tensors;
}

nlohmann::ordered_json index_report_json(const index::IndexReport& r, const engine::Records& records) {
  nlohmann::ordered_json j = {{"index_path", r.index_path.string()}, {"tensors_total", r.tensors_total},
                              {"tensors_indexed", r.tensors_indexed}, {"tensors_reused", r.tensors_reused},
                              {"bytes_indexed", r.bytes_indexed}, {"seconds", r.seconds}, {"written", r.written}};
  if (!r.not_kept.empty()) j["not_kept"] = r.not_kept;
  j["skipped"] = nlohmann::ordered_json::array();
  for (const auto& s : r.skipped) {
    const char* kind = s.kind == index::SkippedTensor::Kind::kNotDecodable     ? "not_decodable"
                       : s.kind == index::SkippedTensor::Kind::kUnstorableName ? "unstorable_name"
                                                                                : "failed";
    j["skipped"].push_back({{"name", s.name}, {"kind", kind}, {"reason", s.reason}});
  }
  if (!r.verify_mismatches.empty() || r.tensors_verified > 0) {
    j["tensors_verified"] = r.tensors_verified;
    j["verify_mismatches"] = r.verify_mismatches;
  }
  j["ops_per_backend"] = r.ops_per_backend;
  j["placements"] = reports::placements_json(records);
  return j;
}

struct Indexed {
  index::IndexContents contents;
  index::IndexReport report;
};

// Brings the index up to date (GIL released), relaying progress; KeyboardInterrupt stops it after
// the current tensor with the finished ones saved.
Result<Indexed> update_index(engine::ComputeSession& session, const Checkpoint& ckpt, index::IndexOptions options,
                             ProgressRelay& relay, engine::Records& records) {
  options.records = &records;
  options.interrupted = relay.stop_flag();
  options.progress = [&](const index::IndexProgress& p) {
    if (p.tensors_total > 0) relay.report(static_cast<double>(p.bytes_done), static_cast<double>(p.bytes_total), p.current, p.seconds);
  };
  Indexed out;
  TM_ASSIGN_OR_RETURN(out.report, index::update_index(session.scheduler(), ckpt, options, &out.contents));
  if (out.report.interrupted) {
    return Status::InvalidArgument("interrupted: " + std::to_string(out.report.tensors_indexed) +
                                   " tensors were indexed and saved to " + out.report.index_path.string() +
                                   "; run again to resume");
  }
  return out;
}

// Ends a call: its placements remembered, what stopped it raised, else its result's value.
template <typename T>
T finish(Result<T> result, ProgressRelay& relay, const engine::Records& records) {
  remember_placements(records);
  relay.rethrow();
  return value_or_raise(std::move(result));
}

}  // namespace

void bind_analyses(py::module_& m) {
  m.def("last_placements", &last_placements,
        "The placement records of this thread's last call that ran operations: backend, why, estimated and "
        "measured time, bytes moved.");

  m.def(
      "_index",
      [](const Checkpoint& ckpt, uint32_t tile, uint32_t threads, const std::filesystem::path& index_path,
         bool verify, const std::string& compute, py::object progress) {
        ProgressRelay relay(std::move(progress));
        engine::Records records;
        Result<nlohmann::ordered_json> result = [&]() -> Result<nlohmann::ordered_json> {
          py::gil_scoped_release release;
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          index::IndexOptions options;
          options.tile = tile;
          options.threads = threads;
          options.location = index_path;
          options.verify = verify;
          TM_ASSIGN_OR_RETURN(auto indexed, update_index(*session, ckpt, options, relay, records));
          return index_report_json(indexed.report, records);
        }();
        return to_python(finish(std::move(result), relay, records));
      },
      py::arg("checkpoint"), py::arg("tile"), py::arg("threads"), py::arg("index_path"), py::arg("verify"),
      py::arg("compute"), py::arg("progress"));

  m.def(
      "_stats",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, uint32_t tile, uint32_t threads,
         const std::string& compute, py::object progress) {
        ProgressRelay relay(std::move(progress));
        engine::Records records;
        Result<nlohmann::ordered_json> result = [&]() -> Result<nlohmann::ordered_json> {
          py::gil_scoped_release release;
          TM_ASSIGN_OR_RETURN(auto selected, select(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          index::IndexOptions options;
          options.tile = tile;
          options.threads = threads;
          TM_ASSIGN_OR_RETURN(auto indexed, update_index(*session, ckpt, options, relay, records));
          reports::StatsSource source(session->scheduler(), ckpt, indexed.contents, indexed.report, tile, records);
          std::vector<reports::StatsRow> rows;
          for (const TensorInfo* t : selected) rows.push_back(source.stats_of(*t));
          auto doc = reports::stats_document(ckpt, rows, &records, source.from_index());
          doc["index"] = index_report_json(indexed.report, {});
          doc["index"].erase("placements");
          return doc;
        }();
        return to_python(finish(std::move(result), relay, records));
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("tile"), py::arg("threads"), py::arg("compute"),
      py::arg("progress"));

  m.def(
      "_spectrum",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, uint64_t top, const std::string& consent,
         bool recompute, uint32_t threads, const std::string& compute, py::object progress) {
        ProgressRelay relay(std::move(progress));
        engine::Records records;
        Result<nlohmann::ordered_json> result = [&]() -> Result<nlohmann::ordered_json> {
          py::gil_scoped_release release;
          TM_ASSIGN_OR_RETURN(auto selected, select(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          reports::SpectrumRequest request{reports::spectrum_tensors(selected, !tensors.empty()), top, consent,
                                           recompute, threads};
          TM_ASSIGN_OR_RETURN(auto report,
                              reports::spectrum_report(session->scheduler(), ckpt, request, records,
                                                       [&](const reports::AnalysisProgress& p) {
                                                         return relay.report(p.work_done, p.work_total, p.current,
                                                                             p.seconds);
                                                       }));
          auto doc = reports::spectrum_document(ckpt, report.rows, top, &records);
          if (!report.kept.ok()) doc["not_kept"] = report.kept.message();
          return doc;
        }();
        return to_python(finish(std::move(result), relay, records));
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("top"), py::arg("consent"), py::arg("recompute"),
      py::arg("threads"), py::arg("compute"), py::arg("progress"));
}

}  // namespace tensormorph::python
