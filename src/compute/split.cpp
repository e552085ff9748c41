#include "compute/split.h"

#include <algorithm>
#include <cmath>

#include "compute/scheduler.h"

namespace tensormorph::compute {

SplitPlan plan_split(std::span<const SplitOption> options, uint64_t granules, const SplitPolicy& policy) {
  SplitPlan plan;
  if (!policy.enabled || granules < 2 || options.size() < 2) return plan;
  std::vector<SplitOption> kept(options.begin(), options.end());
  for (auto& o : kept) o.whole_ns = std::max(o.whole_ns, 1.0);
  if (!policy.share_host_cores) {
    const SplitOption* fastest_host = nullptr;
    for (const auto& o : kept) {
      if (o.host_cores && (fastest_host == nullptr || o.whole_ns < fastest_host->whole_ns)) fastest_host = &o;
    }
    const size_t keep_candidate = fastest_host ? fastest_host->candidate : 0;
    std::erase_if(kept, [&](const SplitOption& o) { return o.host_cores && o.candidate != keep_candidate; });
    if (kept.size() < 2) return plan;
  }
  const auto total_rate = [&] {
    double r = 0;
    for (const auto& o : kept) r += 1.0 / o.whole_ns;
    return r;
  };
  // Drop the slowest while it would take less than the minimum share, or while there are more
  // backends than granules.
  for (;;) {
    auto slowest = std::max_element(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.whole_ns < b.whole_ns; });
    const double share = (1.0 / slowest->whole_ns) / total_rate();
    if (kept.size() > granules || share < policy.min_share) {
      kept.erase(slowest);
      if (kept.size() < 2) return plan;
      continue;
    }
    break;
  }
  const double best = std::min_element(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.whole_ns < b.whole_ns; })->whole_ns;
  if (best < policy.min_whole_ns) return plan;

  // Cumulative boundaries rounded to granules, each share at least one granule; the host's memory
  // carries the host-core shares and every device share's copies.
  const double rate = total_rate();
  double cumulative = 0, host_ns = 0;
  uint64_t begin = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    cumulative += 1.0 / kept[i].whole_ns;
    const uint64_t remaining_shares = kept.size() - i - 1;
    uint64_t end = i + 1 == kept.size() ? granules : static_cast<uint64_t>(std::llround(static_cast<double>(granules) * (cumulative / rate)));
    end = std::clamp<uint64_t>(end, begin + 1, granules - remaining_shares);
    const double fraction = static_cast<double>(end - begin) / static_cast<double>(granules);
    const double ns = kept[i].whole_ns * fraction;
    plan.shares.push_back({kept[i].candidate, begin, end, ns});
    plan.estimated_ns = std::max(plan.estimated_ns, ns);
    host_ns += fraction * (kept[i].host_cores ? kept[i].whole_ns : std::clamp(kept[i].transfer_ns, 0.0, kept[i].whole_ns));
    begin = end;
  }
  plan.estimated_ns = std::max(plan.estimated_ns, host_ns);
  plan.best_whole_ns = best;
  if (plan.estimated_ns > (1.0 - policy.min_gain) * best) return SplitPlan{};
  return plan;
}

ops::SplitInstance split_instance_of(const OpRequest& request) {
  ops::SplitInstance w;
  for (const auto& in : request.inputs) w.inputs.push_back({in.dtype, in.shape, in.bytes.size()});
  for (const auto& out : request.outputs) w.outputs.push_back({out.dtype, out.shape, out.bytes.size()});
  for (const auto& a : request.attributes) w.attributes.push_back({a.name, a.i, a.f});
  return w;
}

OpRequest part_request(const OpRequest& whole, const ops::PartInstance& part, std::vector<std::vector<std::byte>>& scratch) {
  OpRequest r;
  r.op = whole.op;
  r.subject = whole.subject;
  r.exactness_floor = whole.exactness_floor;
  r.max_error_bound = whole.max_error_bound;
  r.max_threads = whole.max_threads;
  for (size_t i = 0; i < part.inputs.size(); ++i) {
    const InputTensor& in = whole.inputs[i];
    const ops::Slice& s = part.inputs[i];
    InputTensor p{in.dtype, s.shape, in.bytes.subspan(s.offset, s.nbytes), in.residency_key};
    p.residency_offset = in.residency_offset + s.offset;
    p.residency_whole_bytes = in.residency_whole_bytes ? in.residency_whole_bytes : in.bytes.size();
    r.inputs.push_back(std::move(p));
  }
  scratch.assign(part.outputs.size(), {});
  for (size_t i = 0; i < part.outputs.size(); ++i) {
    const OutputTensor& out = whole.outputs[i];
    const ops::Slice& s = part.outputs[i];
    if (part.merged[i]) {
      scratch[i].assign(s.nbytes, std::byte{0});
      r.outputs.push_back({out.dtype, s.shape, std::span(scratch[i])});
    } else {
      r.outputs.push_back({out.dtype, s.shape, out.bytes.subspan(s.offset, s.nbytes)});
    }
  }
  for (const auto& a : part.attributes) r.attributes.push_back({a.name, a.i, a.f});
  return r;
}

}  // namespace tensormorph::compute
