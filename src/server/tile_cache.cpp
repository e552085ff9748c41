#include "server/tile_cache.h"

namespace tensormorph::server {

std::shared_ptr<const std::string> TileCache::get(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->value;
}

void TileCache::put(const std::string& key, std::shared_ptr<const std::string> value) {
  std::lock_guard lock(mutex_);
  if (!value || value->size() > budget_) return;
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->value->size();
    order_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += value->size();
  order_.push_front({key, std::move(value)});
  index_[key] = order_.begin();
  while (bytes_ > budget_ && !order_.empty()) {
    bytes_ -= order_.back().value->size();
    index_.erase(order_.back().key);
    order_.pop_back();
  }
}

uint64_t TileCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

size_t TileCache::size() const {
  std::lock_guard lock(mutex_);
  return index_.size();
}

}  // namespace tensormorph::server
