#include "server/catalog.h"

#include "index/index_builder.h"
#include "engine/tensor_ops.h"

namespace tensormorph::server {

uint64_t StatsPyramid::bytes() const {
  uint64_t n = 0;
  for (const auto& level : levels) n += level.tiles.size() * sizeof(TM_TileStats);
  return n;
}

Catalog::Catalog(std::vector<std::unique_ptr<Checkpoint>> checkpoints, std::vector<std::string> labels,
                 uint64_t fine_budget_bytes)
    : fine_budget_(fine_budget_bytes) {
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    auto served = std::make_unique<ServedCheckpoint>();
    served->checkpoint = std::move(checkpoints[i]);
    served->label = i < labels.size() ? labels[i] : served->checkpoint->path().string();
    served_.push_back(std::move(served));
  }
}

Catalog::~Catalog() {
  stop_ = true;
  wait_for_index();
}

void Catalog::start_indexing(compute::Scheduler& scheduler) {
  indexer_ = std::thread([this, &scheduler] {
    for (auto& served : served_) {
      index::IndexOptions options;
      options.interrupted = &stop_;
      IndexProgressCounters& counters = served->index_progress;
      options.progress = [&counters](const index::IndexProgress& p) {
        counters.tensors_total = p.tensors_total;
        counters.bytes_total = p.bytes_total;
        counters.tensors_done = p.tensors_done;
        counters.bytes_done = p.bytes_done;
      };
      auto contents = std::make_shared<index::IndexContents>();
      auto report = index::update_index(scheduler, *served->checkpoint, options, contents.get());
      std::lock_guard lock(served->index_mutex);
      if (!report.ok()) {
        served->index_state = "failed: " + report.status().message();
        continue;
      }
      for (size_t t = 0; t < contents->tensors.size(); ++t) served->pyramid_of[contents->tensors[t].name] = t;
      served->index = std::move(contents);
      served->index_state = report->interrupted ? "interrupted" : "ready";
    }
  });
}

void Catalog::wait_for_index() {
  if (indexer_.joinable()) indexer_.join();
}

std::shared_ptr<const index::IndexContents> Catalog::index_of(size_t id, std::string* state) const {
  const ServedCheckpoint& served = *served_[id];
  std::lock_guard lock(served.index_mutex);
  if (state) *state = served.index_state;
  return served.index;
}

const index::TensorPyramid* Catalog::indexed(size_t id, const index::IndexContents& contents,
                                             const std::string& name) const {
  const ServedCheckpoint& served = *served_[id];
  std::lock_guard lock(served.index_mutex);
  auto it = served.pyramid_of.find(name);
  if (it == served.pyramid_of.end() || it->second >= contents.tensors.size()) return nullptr;
  return &contents.tensors[it->second];
}

uint32_t Catalog::fine_tile_for(uint64_t elements) {
  uint32_t tile = 16;
  while (tile < ops::kMaxTile && elements / (uint64_t{tile} * tile) > (uint64_t{1} << 20)) tile *= 2;
  return tile;
}

Result<std::shared_ptr<const StatsPyramid>> Catalog::fine_pyramid(compute::Scheduler& scheduler, size_t id,
                                                                  const TensorInfo& tensor) {
  const std::string key = std::to_string(id) + "/" + tensor.name;
  std::shared_ptr<FineEntry> entry;
  {
    std::lock_guard lock(fine_mutex_);
    auto& slot = fine_[key];
    if (!slot) slot = std::make_shared<FineEntry>();
    entry = slot;
    entry->last_use = ++use_clock_;
  }
  std::lock_guard compute_lock(entry->mutex);
  if (entry->pyramid) return entry->pyramid;
  auto pyramid = std::make_shared<StatsPyramid>();
  pyramid->tile = fine_tile_for(tensor.elements());
  TM_ASSIGN_OR_RETURN(auto level0, engine::tensor_tile_stats(scheduler, *served_[id]->checkpoint, tensor, pyramid->tile));
  pyramid->levels = engine::build_pyramid(std::move(level0));
  entry->pyramid = pyramid;
  // Evict the least recently used pyramids (never the one just built) to stay within budget.
  std::lock_guard lock(fine_mutex_);
  for (;;) {
    uint64_t total = 0;
    std::string oldest;
    uint64_t oldest_use = UINT64_MAX;
    for (auto& [k, e] : fine_) {
      if (e == entry) {
        total += pyramid->bytes();
        continue;
      }
      std::unique_lock held(e->mutex, std::try_to_lock);
      if (!held.owns_lock() || !e->pyramid) continue;  // being computed by another request, or empty
      total += e->pyramid->bytes();
      if (e->last_use < oldest_use) {
        oldest_use = e->last_use;
        oldest = k;
      }
    }
    if (total <= fine_budget_ || oldest.empty()) break;
    fine_.erase(oldest);
  }
  return std::shared_ptr<const StatsPyramid>(pyramid);
}

}  // namespace tensormorph::server
