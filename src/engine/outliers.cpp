#include "engine/outliers.h"

#include <algorithm>
#include <cmath>

#include "compute/ops/top_k.h"
#include "core/dtype_abi.h"
#include "core/printable.h"
#include "engine/matrix_shape.h"
#include "tensormorph/decode.h"

namespace tensormorph::engine {

Result<std::vector<ExtremeValue>> tensor_top_k(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                               const TensorInfo& tensor, uint64_t k, Records* records,
                                               uint32_t max_threads) {
  const auto where = [&] { return checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name); };
  if (k < 1 || k > TM_TOP_K_MAX) {
    return Status::InvalidArgument("k " + std::to_string(k) + " is outside [1, " + std::to_string(TM_TOP_K_MAX) + "]");
  }
  if (!dtype_decodable(tensor.dtype)) {
    return Status::Unsupported(where() + ": " + std::string(dtype_not_decodable_reason(tensor.dtype)));
  }
  const MatrixShape m = as_matrix(tensor);
  TM_ASSIGN_OR_RETURN(auto data, matrix_rows(checkpoint, tensor, 0, m.rows));
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
  // The bands of decode_rows, whose residency keys a device shares with the other analyses.
  const uint64_t band_rows = std::max<uint64_t>(1, (256ull << 20) / std::max<uint64_t>(row_bytes, 1));
  const uint64_t band_k = std::min<uint64_t>(k, std::max<uint64_t>(1, band_rows * m.cols));
  std::vector<ops::TopKEntry> all;
  std::vector<uint64_t> indices(band_k);
  std::vector<float> values(band_k);
  for (uint64_t r0 = 0; r0 < m.rows; r0 += band_rows) {
    const uint64_t rows = std::min(band_rows, m.rows - r0);
    compute::OpRequest req;
    req.op = TM_OP_TOP_K;
    req.subject = tensor.name;
    req.inputs.push_back({to_abi_dtype(tensor.dtype), {rows * m.cols}, data.bytes.subspan(r0 * row_bytes, rows * row_bytes),
                          data.owned.empty() ? residency_key(checkpoint, tensor, r0 * row_bytes, rows * row_bytes) : 0});
    req.outputs.push_back({TM_DTYPE_U64, {band_k}, std::as_writable_bytes(std::span(indices))});
    req.outputs.push_back({TM_DTYPE_F32, {band_k}, std::as_writable_bytes(std::span(values))});
    req.attributes = {{TM_ATTR_K, static_cast<int64_t>(band_k), 0}};
    req.max_threads = max_threads;
    TM_ASSIGN_OR_RETURN(auto placement, scheduler.run(req));
    if (!placement.executed) return placement.refusal.with_context(where());
    if (records) placement.take_records(*records);
    // Entries end at the first padding index (the written sizes say the same).
    for (uint64_t i = 0; i < band_k && indices[i] != ~uint64_t{0}; ++i) {
      if (indices[i] >= rows * m.cols || !std::isfinite(values[i])) {
        return Status::Internal(where() + ": " + TM_OP_TOP_K + " returned entry " + std::to_string(i) +
                                " outside its band or not finite");
      }
      all.push_back({ops::magnitude_key(values[i]), r0 * m.cols + indices[i], values[i]});
    }
  }
  const size_t n = std::min<size_t>(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), ops::top_k_before);
  std::vector<ExtremeValue> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back({all[i].index, m.cols ? all[i].index / m.cols : 0, m.cols ? all[i].index % m.cols : 0, all[i].value});
  }
  return out;
}

nlohmann::ordered_json extremes_json(const std::vector<ExtremeValue>& extremes) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& e : extremes) a.push_back({{"index", e.index}, {"row", e.row}, {"col", e.col}, {"value", e.value}});
  return a;
}

std::optional<std::vector<ExtremeValue>> extremes_from_json(const nlohmann::json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<ExtremeValue> extremes;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("index") || !e["index"].is_number_unsigned() || !e.contains("row") ||
        !e["row"].is_number_unsigned() || !e.contains("col") || !e["col"].is_number_unsigned() ||
        !e.contains("value") || !e["value"].is_number()) {
      return std::nullopt;
    }
    extremes.push_back({e["index"].get<uint64_t>(), e["row"].get<uint64_t>(), e["col"].get<uint64_t>(),
                        static_cast<float>(e["value"].get<double>())});
  }
  return extremes;
}

Result<ChannelStats> tensor_channel_stats(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                          const TensorInfo& tensor, Records* records, uint32_t max_threads) {
  const auto where = [&] { return checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name); };
  if (!dtype_decodable(tensor.dtype)) {
    return Status::Unsupported(where() + ": " + std::string(dtype_not_decodable_reason(tensor.dtype)));
  }
  const MatrixShape m = as_matrix(tensor);
  ChannelStats out;
  out.rows.resize(m.rows);
  out.cols.resize(m.cols);
  TM_ASSIGN_OR_RETURN(auto data, matrix_rows(checkpoint, tensor, 0, m.rows));
  compute::OpRequest req;
  req.op = TM_OP_CHANNEL_STATS;
  req.subject = tensor.name;
  req.inputs.push_back({to_abi_dtype(tensor.dtype), {m.rows, m.cols}, data.bytes,
                        data.owned.empty() ? residency_key(checkpoint, tensor, 0, data.bytes.size()) : 0});
  req.outputs.push_back({TM_DTYPE_U8, {m.rows * sizeof(TM_TileStats)}, std::as_writable_bytes(std::span(out.rows))});
  req.outputs.push_back({TM_DTYPE_U8, {m.cols * sizeof(TM_TileStats)}, std::as_writable_bytes(std::span(out.cols))});
  req.max_threads = max_threads;
  TM_ASSIGN_OR_RETURN(auto placement, scheduler.run(req));
  if (!placement.executed) return placement.refusal.with_context(where());
  if (records) placement.take_records(*records);
  return out;
}

nlohmann::ordered_json channel_json(const TM_TileStats& s) {
  const uint64_t finite = s.count - s.nan - s.pos_inf - s.neg_inf;
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  return {{"count", s.count}, {"finite", finite},
          {"min", finite ? number(s.min) : nullptr}, {"max", finite ? number(s.max) : nullptr},
          {"absmax", s.absmax}, {"mean", finite ? number(s.sum / static_cast<double>(finite)) : nullptr},
          {"l2", channel_l2(s)}, {"nan", s.nan}, {"pos_inf", s.pos_inf}, {"neg_inf", s.neg_inf}, {"zeros", s.zeros}};
}

namespace {

/// The median of `v` (sorted in place; the mean of the two middle values for an even count).
double median_of(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void flag(const std::vector<TM_TileStats>& channels, bool is_row, const OutlierRule& rule,
          std::vector<OutlierChannel>& out) {
  if (channels.empty()) return;
  std::vector<double> norms;
  for (const auto& c : channels) norms.push_back(channel_l2(c));
  std::vector<double> sorted = norms;
  const double median = median_of(sorted);
  std::vector<double> deviations;
  for (double n : norms) deviations.push_back(std::fabs(n - median));
  const double mad = median_of(deviations);
  for (uint64_t i = 0; i < channels.size(); ++i) {
    OutlierChannel o{is_row, i, channels[i].absmax, norms[i], mad > 0 ? 0.6745 * (norms[i] - median) / mad : 0.0};
    o.by_magnitude = channels[i].absmax >= rule.magnitude;
    o.by_norm = mad > 0 && o.z >= rule.robust_z;
    if (o.by_magnitude || o.by_norm) out.push_back(o);
  }
}

}  // namespace

std::vector<OutlierChannel> outlier_channels(const ChannelStats& stats, const OutlierRule& rule) {
  std::vector<OutlierChannel> out;
  flag(stats.rows, true, rule, out);
  flag(stats.cols, false, rule, out);
  return out;
}

nlohmann::ordered_json outlier_channels_json(const std::vector<OutlierChannel>& channels) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& c : channels) {
    nlohmann::ordered_json why = nlohmann::ordered_json::array();
    if (c.by_magnitude) why.push_back("magnitude");
    if (c.by_norm) why.push_back("norm");
    a.push_back({{"axis", c.is_row ? "row" : "col"}, {"index", c.index}, {"absmax", c.absmax}, {"l2", c.l2},
                 {"robust_z", c.z}, {"why", why}});
  }
  return a;
}

}  // namespace tensormorph::engine
