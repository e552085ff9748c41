// What the data routes share: finding the checkpoint and tensor a request names, statistics as
// JSON, placement records as JSON.
#pragma once

#include <cstddef>
#include <optional>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/pyramid.h"
#include "engine/tensor_ops.h"
#include "server/catalog.h"

namespace tensormorph::server {

/// The checkpoint (and tensor) a request names.
struct Target {
  size_t checkpoint = 0;
  const TensorInfo* tensor = nullptr;
};

/// The target of `ckpt` (and `tensor` when `need_tensor`); on failure the error, with a hint such
/// as the closest tensor names, is replied on `res` and nullopt returned.
std::optional<Target> target_of(const httplib::Request& req, httplib::Response& res, Catalog& catalog,
                                bool need_tensor = true);

/// How many standard deviations the farthest finite value lies from the mean:
/// max(max − mean, mean − min) / std, 0 when std is 0.
double outlier_score(double min, double max, double mean, double std);

/// count, finite, nan, pos_inf, neg_inf, zeros, min, max, absmax, mean, std, outlier_score.
nlohmann::ordered_json stats_json(const engine::TensorSummary& s, double mean, double std);

/// stats_json plus `range` {diverging, sequential, magnitude, log}: robust colour ranges.
nlohmann::ordered_json summary_json(const engine::TensorSummary& s, double mean, double std);
/// summary_json with the summary's own mean and standard deviation.
nlohmann::ordered_json summary_json(const engine::TensorSummary& s);

/// The whole-tensor summary the index holds for `tensor`, or nullopt (no index yet, or not in it).
std::optional<engine::TensorSummary> indexed_summary(Catalog& catalog, size_t id, const TensorInfo& tensor);

/// Placement records as a JSON array.
nlohmann::ordered_json records_json(const engine::Records& records);

}  // namespace tensormorph::server
