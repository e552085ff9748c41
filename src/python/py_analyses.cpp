// Indexing and the analyses of one checkpoint for Python: each returns the document its CLI
// command prints with --json (placements included), computed by the same reports without the GIL.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "py_bindings.h"
#include "py_support.h"
#include "reports/backends_report.h"
#include "reports/channels_report.h"
#include "reports/outliers_report.h"
#include "reports/quantiles_report.h"
#include "reports/spectrum_report.h"
#include "reports/stats_report.h"

namespace tensormorph::python {
namespace {

nlohmann::ordered_json index_report_json(const index::IndexReport& r) {
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
  if (r.tensors_verified > 0) {
    j["tensors_verified"] = r.tensors_verified;
    j["verify_mismatches"] = r.verify_mismatches;
  }
  j["ops_per_backend"] = r.ops_per_backend;
  return j;
}

struct Indexed {
  index::IndexContents contents;
  index::IndexReport report;
};

// Brings the index up to date, relaying progress; Ctrl-C stops it after the current tensor with the
// finished ones saved.
Result<Indexed> update_index(engine::ComputeSession& session, const Checkpoint& ckpt, index::IndexOptions options,
                             ProgressRelay& relay, engine::Records& records) {
  options.records = &records;
  options.interrupted = relay.stop_flag();
  options.progress = [&](const index::IndexProgress& p) {
    if (p.tensors_total > 0) {
      relay.report(static_cast<double>(p.bytes_done), static_cast<double>(p.bytes_total), p.current, p.seconds);
    }
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

}  // namespace

void bind_analyses(py::module_& m) {
  m.def("last_placements", &last_placements,
        "The placement records of this thread's last call that ran operations: backend, why, estimated and "
        "measured time, bytes moved.");

  m.def(
      "_backends",
      [](const std::string& compute) {
        // Its own session, every device opened: traits as `tensormorph backends` shows them.
        return run_report(py::none(), [&](ProgressRelay&, engine::Records&) -> Result<nlohmann::ordered_json> {
          TM_ASSIGN_OR_RETURN(auto session, engine::open_default_session(compute, compute::DeviceOpening::kAtLoad));
          return reports::backends_document(*session);
        });
      },
      py::arg("compute"));

  m.def(
      "_index",
      [](const Checkpoint& ckpt, uint32_t tile, uint32_t threads, const std::filesystem::path& index_path,
         bool verify, const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          index::IndexOptions options;
          options.tile = tile;
          options.threads = threads;
          options.location = index_path;
          options.verify = verify;
          TM_ASSIGN_OR_RETURN(auto indexed, update_index(*session, ckpt, options, relay, records));
          auto j = index_report_json(indexed.report);
          j["placements"] = reports::placements_json(records);
          return j;
        });
      },
      py::arg("checkpoint"), py::arg("tile"), py::arg("threads"), py::arg("index_path"), py::arg("verify"),
      py::arg("compute"), py::arg("progress"));

  m.def(
      "_stats",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, uint32_t tile, uint32_t threads,
         const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          TM_ASSIGN_OR_RETURN(auto selected, reports::select_tensors(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          index::IndexOptions options;
          options.tile = tile;
          options.threads = threads;
          TM_ASSIGN_OR_RETURN(auto indexed, update_index(*session, ckpt, options, relay, records));
          reports::StatsSource source(session->scheduler(), ckpt, indexed.contents, indexed.report, tile, records);
          std::vector<reports::StatsRow> rows;
          for (const TensorInfo* t : selected) rows.push_back(source.stats_of(*t));
          auto doc = reports::stats_document(ckpt, rows, &records, source.from_index());
          doc["index"] = index_report_json(indexed.report);
          return doc;
        });
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("tile"), py::arg("threads"), py::arg("compute"),
      py::arg("progress"));

  m.def(
      "_quantiles",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, const std::vector<double>& probabilities,
         bool mad, const std::string& consent, bool recompute, uint32_t threads, const std::string& compute,
         py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          TM_ASSIGN_OR_RETURN(auto selected, reports::select_tensors(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          const reports::QuantilesRequest request{selected, probabilities, mad, consent, recompute, threads};
          TM_ASSIGN_OR_RETURN(auto report,
                              reports::quantiles_report(session->scheduler(), ckpt, request, records, relayed(relay)));
          auto doc = reports::quantiles_document(ckpt, request, report.rows, &records);
          if (!report.kept.ok()) doc["not_kept"] = report.kept.message();
          return doc;
        });
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("probabilities"), py::arg("mad"), py::arg("consent"),
      py::arg("recompute"), py::arg("threads"), py::arg("compute"), py::arg("progress"));

  m.def(
      "_outliers",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, uint64_t k, double magnitude,
         double robust_z, bool recompute, uint32_t threads, const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          if (k < 1 || k > TM_TOP_K_MAX) {
            return Status::InvalidArgument("k must be between 1 and " + std::to_string(TM_TOP_K_MAX));
          }
          TM_ASSIGN_OR_RETURN(auto selected, reports::select_tensors(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          reports::OutliersRequest request{selected, k, {}, recompute, threads};
          request.rule.magnitude = magnitude;
          request.rule.robust_z = robust_z;
          TM_ASSIGN_OR_RETURN(auto report,
                              reports::outliers_report(session->scheduler(), ckpt, request, records, relayed(relay)));
          auto doc = reports::outliers_document(ckpt, request, report.rows, &records);
          if (!report.kept.ok()) doc["not_kept"] = report.kept.message();
          return doc;
        });
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("k"), py::arg("magnitude"), py::arg("robust_z"),
      py::arg("recompute"), py::arg("threads"), py::arg("compute"), py::arg("progress"));

  m.def(
      "_channels",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, const std::string& axis, bool recompute,
         uint32_t threads, const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          if (axis != "rows" && axis != "cols") return Status::InvalidArgument("axis must be 'rows' or 'cols', not '" + axis + "'");
          TM_ASSIGN_OR_RETURN(auto selected, reports::select_tensors(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          const reports::ChannelsRequest request{selected, axis == "rows", recompute, threads};
          TM_ASSIGN_OR_RETURN(auto report,
                              reports::channels_report(session->scheduler(), ckpt, request, records, relayed(relay)));
          auto doc = reports::channels_document(ckpt, request, report.rows, &records);
          if (!report.kept.ok()) doc["not_kept"] = report.kept.message();
          return doc;
        });
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("axis"), py::arg("recompute"), py::arg("threads"),
      py::arg("compute"), py::arg("progress"));

  m.def(
      "_spectrum",
      [](const Checkpoint& ckpt, const std::vector<std::string>& tensors, uint64_t top, const std::string& consent,
         bool recompute, uint32_t threads, const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          TM_ASSIGN_OR_RETURN(auto selected, reports::select_tensors(ckpt, tensors));
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          const reports::SpectrumRequest request{reports::spectrum_tensors(selected, !tensors.empty()), top, consent,
                                                 recompute, threads};
          TM_ASSIGN_OR_RETURN(auto report,
                              reports::spectrum_report(session->scheduler(), ckpt, request, records, relayed(relay)));
          auto doc = reports::spectrum_document(ckpt, report.rows, top, &records);
          if (!report.kept.ok()) doc["not_kept"] = report.kept.message();
          return doc;
        });
      },
      py::arg("checkpoint"), py::arg("tensors"), py::arg("top"), py::arg("consent"), py::arg("recompute"),
      py::arg("threads"), py::arg("compute"), py::arg("progress"));
}

}  // namespace tensormorph::python
