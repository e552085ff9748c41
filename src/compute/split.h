// Splitting one operation across several backends at once: how much of it each backend takes
// (by modelled cost, so that all finish together), and the part requests cut from the whole by the
// operation's split rule. The scheduler executes the plan; this file decides nothing else.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compute/ops/op_split.h"

namespace tensormorph::compute {

struct OpRequest;

/// When a split is worth it.
struct SplitPolicy {
  bool enabled = true;            ///< off: every operation runs whole on one backend
  double min_share = 1.0 / 16;    ///< a backend taking less of the work than this is left out
  double min_whole_ns = 2e6;      ///< operations modelled cheaper than this on the best backend run whole
  double min_gain = 0.1;          ///< the split's modelled time must undercut the best backend's by this fraction
  /// Let two backends that compute on the host's cores share an operation. Off by default: they
  /// compete for the same cores, which the linear model does not see (tests turn it on).
  bool share_host_cores = false;
};

/// A backend that could run the whole operation, with its modelled time for all of it.
struct SplitOption {
  size_t candidate = 0;  ///< the caller's index of the backend
  double whole_ns = 0;   ///< modelled time (compute and transfers) of the whole operation there
  bool host_cores = false;  ///< it computes on the host's own cores (TM_DeviceTraits::runs_on_host_cores)
  double transfer_ns = 0;   ///< the part of whole_ns spent copying through host memory (0 when resident or host-visible)
};

/// The granules one backend takes.
struct SplitShare {
  size_t candidate = 0;
  uint64_t begin = 0, end = 0;  ///< granules [begin, end)
  double estimated_ns = 0;      ///< modelled time of its share
};

/// The plan: shares in granule order, covering [0, granules); empty when the operation runs whole.
struct SplitPlan {
  std::vector<SplitShare> shares;
  double estimated_ns = 0;  ///< modelled time of the split (the slowest share)
  double best_whole_ns = 0; ///< modelled time of the best single backend
};

/// Shares proportional to each backend's speed on the whole (so that all finish together under a
/// linear model), dropping backends below the policy's minimum share and all but the fastest of
/// those on the host's cores (unless the policy lets them share); every share holds at least
/// one granule. The host's memory is shared too: a device's copies through it and a host-core
/// backend's pass over it do not overlap for free, so the split is modelled as the slower of the
/// slowest share and the host's total (host-core shares plus every device share's copies). Empty
/// when fewer than two backends remain, there are fewer than two granules, or the policy says the
/// split does not pay.
SplitPlan plan_split(std::span<const SplitOption> options, uint64_t granules, const SplitPolicy& policy);

/// The shape of `request`, as split rules see it.
ops::SplitInstance split_instance_of(const OpRequest& request);

/// The request of one part: its inputs slices of the whole's (residency keys kept, with the
/// slice's offset in the data they name), its in-place outputs slices of the whole's, and its
/// merged outputs in `scratch` (resized here).
OpRequest part_request(const OpRequest& whole, const ops::PartInstance& part, std::vector<std::vector<std::byte>>& scratch);

}  // namespace tensormorph::compute
