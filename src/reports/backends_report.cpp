#include "reports/backends_report.h"

#include "core/dtype_abi.h"

namespace tensormorph::reports {
namespace {

const char* level_name(TM_SupportLevel level) {
  switch (level) {
    case TM_SUPPORT_NONE: return "none";
    case TM_SUPPORT_PARTIAL: return "partial";
    case TM_SUPPORT_FULL: return "full";
  }
  return "?";
}

nlohmann::ordered_json traits_json(const compute::Backend& b) {
  const TM_DeviceTraits& t = b.traits();
  return {{"device", t.device_name},
          {"memory_bytes", t.memory_bytes},
          {"memory_spaces", t.memory_space_count},
          {"host_memory_visible", t.host_memory_visible != 0},
          {"host_to_device_gbps", t.host_to_device_gbps},
          {"device_to_host_gbps", t.device_to_host_gbps},
          {"bandwidth", t.bandwidth_measured ? "measured" : "declared"},
          {"compute_units", t.compute_units}};
}

// Operation x dtype -> support, for every registered op and every dtype.
nlohmann::ordered_json capability_json(const compute::Backend& b, const compute::OpRegistry& registry) {
  nlohmann::ordered_json caps = nlohmann::ordered_json::object();
  for (const auto& [id, def] : registry.all()) {
    nlohmann::ordered_json per_dtype = nlohmann::ordered_json::object();
    for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
      const DType dtype = static_cast<DType>(d);
      auto support = b.query(id, to_abi_dtype(dtype), TM_SHAPE_MATRIX);
      nlohmann::ordered_json cell;
      if (!support.ok()) {
        cell = {{"level", "error"}, {"reason", support.status().message()}};
      } else {
        cell = {{"level", level_name(support->level)}};
        if (support->level != TM_SUPPORT_NONE) cell["exactness"] = compute::exactness_name(support->exactness);
        if (support->exactness == TM_EXACT_BOUNDED) cell["error_bound"] = support->error_bound;
        if (support->reason[0]) cell["reason"] = support->reason;
      }
      per_dtype[std::string(dtype_name(dtype))] = cell;
    }
    caps[id] = per_dtype;
  }
  return caps;
}

}  // namespace

nlohmann::ordered_json backends_document(engine::ComputeSession& session) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.backends/1"}};
  j["abi"] = std::to_string(TM_PLUGIN_ABI_MAJOR) + "." + std::to_string(TM_PLUGIN_ABI_MINOR);
  j["sources"] = nlohmann::ordered_json::array();
  for (const auto& r : session.load_reports()) {
    j["sources"].push_back({{"name", r.name}, {"builtin", r.builtin}, {"library", r.library_path},
                            {"available", r.available}, {"detail", r.detail}});
  }
  j["backends"] = nlohmann::ordered_json::array();
  for (const auto& b : session.backends()) {
    j["backends"].push_back({{"name", b->name()},
                             {"version", b->version()},
                             {"builtin", b->origin().builtin},
                             {"traits", traits_json(*b)},
                             {"capabilities", capability_json(*b, session.registry())}});
  }
  j["constraints"] = session.scheduler().constraints().to_string();
  return j;
}

}  // namespace tensormorph::reports
