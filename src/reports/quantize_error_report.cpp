#include "reports/quantize_error_report.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/quantize/quantize.h"
#include "engine/tensor_matching.h"

namespace tensormorph::reports {

double QuantizeErrorTotal::rmse() const { return pairs ? std::sqrt(sum_sq / static_cast<double>(pairs)) : 0.0; }
double QuantizeErrorTotal::rel_rms() const { return ref_sq > 0 ? std::sqrt(sum_sq / ref_sq) : 0.0; }

Result<std::vector<DType>> parse_quantized_types(const std::string& list) {
  std::vector<DType> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (name.empty()) continue;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    const auto t = dtype_from_name(name);
    if (!t || !engine::is_ggml_quantized(*t) || !dtype_encodable(*t)) {
      std::string known;
      for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
        const auto dt = static_cast<DType>(d);
        if (engine::is_ggml_quantized(dt) && dtype_encodable(dt)) known += (known.empty() ? "" : ",") + std::string(dtype_name(dt));
      }
      return Status::InvalidArgument("--type '" + name + "' is not a type with a ggml encoder (" + known + ")");
    }
    out.push_back(*t);
  }
  if (out.empty()) return Status::InvalidArgument("--type names no type");
  return out;
}

Result<QuantizeErrorReport> quantize_error_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                                  const QuantizeErrorRequest& request, engine::Records& records,
                                                  const ProgressFn& progress) {
  engine::QuantizationErrorOptions qopt;
  qopt.rows = request.rows;
  QuantizeErrorReport report;
  auto& entries = report.entries;
  std::vector<const TensorInfo*> selected;
  std::map<const TensorInfo*, engine::MatchedTensors> by_tensor;
  auto wanted = [&](const TensorInfo& t) { return name_selected(t.name, request.globs); };
  if (request.reference != nullptr) {
    engine::NameMapping mapping;
    if (!request.map_file.empty()) {
      TM_ASSIGN_OR_RETURN(mapping, engine::read_name_mapping(request.map_file));
    }
    TM_ASSIGN_OR_RETURN(auto matched, engine::match_tensors(ckpt, *request.reference, mapping));
    for (const auto& m : matched.matched) {
      if (!wanted(*m.a) || !engine::is_ggml_quantized(m.a->dtype)) continue;
      selected.push_back(m.a);
      by_tensor[m.a] = m;
    }
    for (const auto* t : matched.only_a) {
      if (wanted(*t) && engine::is_ggml_quantized(t->dtype)) {
        entries.push_back({t->name, "", t->dtype, "no tensor of the reference matches it", "", {}});
      }
    }
    for (const auto& m : matched.shape_mismatched) {
      if (wanted(*m.a) && engine::is_ggml_quantized(m.a->dtype)) {
        entries.push_back({m.a->name, m.b->name, m.a->dtype, "the reference's shape is " + m.b->shape_string(), "", {}});
      }
    }
  } else {
    for (const auto& t : ckpt.tensors()) {
      const bool source = dtype_info(t.dtype).is_float && !dtype_info(t.dtype).is_quantized;
      if (wanted(t) && source && (request.all_ranks || t.shape.size() >= 2)) selected.push_back(&t);
    }
  }
  TensorProgress tracker(progress, selected.size(), stored_bytes(selected));
  for (size_t i = 0; i < selected.size(); ++i) {
    const TensorInfo& t = *selected[i];
    if (request.reference != nullptr) {
      const auto& m = by_tensor.at(&t);
      QuantizeErrorEntry e{t.name, m.b->name, t.dtype, "", "", {}};
      auto r = engine::measured_quantization_error(scheduler, ckpt, *request.reference, m, qopt, &records, request.threads);
      if (r.ok()) e.result = std::move(r).value(); else e.error = r.status().message();
      entries.push_back(std::move(e));
    } else {
      for (const DType type : request.types) {
        QuantizeErrorEntry e{t.name, "", type, engine::what_if_obstacle(t, type), "", {}};
        if (e.skipped.empty()) {
          auto r = engine::what_if_quantization_error(scheduler, ckpt, t, type, qopt, &records, request.threads);
          if (r.ok()) e.result = std::move(r).value(); else e.error = r.status().message();
        }
        entries.push_back(std::move(e));
      }
    }
    if (!tracker.finished(static_cast<double>(t.nbytes), t.name)) return tracker.stopped("");
  }
  if (entries.empty()) {
    return Status::NotFound(request.reference != nullptr
                                ? "no quantized tensor of " + ckpt.path().string() + " was selected"
                                : "no floating-point tensor of rank 2 or more was selected (--all-ranks includes vectors)");
  }
  for (const auto& e : entries) {
    if (!e.skipped.empty() || !e.error.empty()) continue;
    QuantizeErrorTotal& t = report.totals[e.type];
    ++t.tensors;
    t.pairs += e.result.stats.finite_pairs;
    t.sum_sq += e.result.stats.sum_sq_diff;
    t.ref_sq += e.result.stats.sum_sq_a;
    t.max_abs = std::max(t.max_abs, e.result.stats.max_abs_diff);
  }
  return report;
}

nlohmann::ordered_json quantize_error_document(const Checkpoint& ckpt, const QuantizeErrorRequest& request,
                                               const QuantizeErrorReport& report, const engine::Records* records) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.quantize_error/1"}, {"path", ckpt.path().string()}};
  if (request.reference != nullptr) j["reference"] = request.reference->path().string();
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& e : report.entries) {
    nlohmann::ordered_json t = {{"name", e.tensor}, {"type", std::string(dtype_name(e.type))}};
    if (!e.reference_tensor.empty()) t["reference_name"] = e.reference_tensor;
    if (!e.skipped.empty()) t["skipped"] = e.skipped;
    else if (!e.error.empty()) t["error"] = e.error;
    else t.update(engine::quantization_error_json(e.result));
    j["tensors"].push_back(t);
  }
  j["totals"] = nlohmann::ordered_json::array();
  for (const auto& [type, t] : report.totals) {
    j["totals"].push_back({{"type", std::string(dtype_name(type))}, {"tensors", t.tensors}, {"rmse", t.rmse()},
                           {"max_abs", t.max_abs}, {"rel_rms", t.rel_rms()}});
  }
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
