// The backends report (`backends --json`, the Python API's backends()): every backend found, its
// device traits and its capability matrix.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/compute_session.h"

namespace tensormorph::reports {

/// The tensormorph.backends/1 document: the plugin ABI version, every source found (and why one is
/// unavailable), each backend's device traits and its support per operation and dtype (level,
/// exactness, error bound, reason), and the constraints in force.
nlohmann::ordered_json backends_document(engine::ComputeSession& session);

}  // namespace tensormorph::reports
