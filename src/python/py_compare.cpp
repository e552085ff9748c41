// The analyses of two checkpoints for Python: diff and quantization error against a reference (and
// the what-if quantization of one), returning the documents the CLI prints with --json.
#include <pybind11/stl.h>

#include "py_bindings.h"
#include "py_support.h"
#include "reports/diff_report.h"
#include "reports/quantize_error_report.h"

namespace tensormorph::python {

void bind_comparisons(py::module_& m) {
  m.def(
      "_diff",
      [](const Checkpoint& a, const Checkpoint& b, const std::vector<std::string>& tensors, const std::string& sort,
         const std::string& map_file, uint32_t threads, const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          const reports::DiffRequest request{tensors, sort, map_file, threads};
          TM_ASSIGN_OR_RETURN(auto report, reports::diff_report(session->scheduler(), a, b, request, records, relayed(relay)));
          return reports::diff_document(a, b, request, report, &records);
        });
      },
      py::arg("a"), py::arg("b"), py::arg("tensors"), py::arg("sort"), py::arg("map_file"), py::arg("threads"),
      py::arg("compute"), py::arg("progress"));

  m.def(
      "_quantize_error",
      [](const Checkpoint& ckpt, const Checkpoint* reference, const std::string& types,
         const std::vector<std::string>& tensors, const std::string& map_file, bool rows, bool all_ranks,
         uint32_t threads, const std::string& compute, py::object progress) {
        return run_report(std::move(progress), [&](ProgressRelay& relay, engine::Records& records)
                                                   -> Result<nlohmann::ordered_json> {
          if ((reference == nullptr) == types.empty()) {
            return Status::InvalidArgument("quantize_error needs exactly one of reference= (measure against an "
                                           "original) or types= (what-if)");
          }
          reports::QuantizeErrorRequest request{reference, {}, tensors, map_file, rows, all_ranks, threads};
          if (!types.empty()) {
            TM_ASSIGN_OR_RETURN(request.types, reports::parse_quantized_types(types));
          }
          TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
          TM_ASSIGN_OR_RETURN(auto report,
                              reports::quantize_error_report(session->scheduler(), ckpt, request, records, relayed(relay)));
          return reports::quantize_error_document(ckpt, request, report, &records);
        });
      },
      py::arg("checkpoint"), py::arg("reference"), py::arg("types"), py::arg("tensors"), py::arg("map_file"),
      py::arg("rows"), py::arg("all_ranks"), py::arg("threads"), py::arg("compute"), py::arg("progress"));
}

}  // namespace tensormorph::python
