#include "compute/residency.h"

#include <algorithm>

namespace tensormorph::compute {

ResidencyCache::~ResidencyCache() {
  for (auto& e : lru_) e.backend->release(e.buffer);
}

TM_Buffer* ResidencyCache::find(uint64_t key, const Backend& backend, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->key == key && it->backend == &backend && it->bytes == bytes) {
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().buffer;
    }
  }
  return nullptr;
}

bool ResidencyCache::resident(uint64_t key, const Backend& backend, uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  return std::any_of(lru_.begin(), lru_.end(),
                     [&](const Entry& e) { return e.key == key && e.backend == &backend && e.bytes == bytes; });
}

uint64_t ResidencyCache::budget_for(const Backend& backend) const {
  uint64_t cap = budget_;
  if (backend.traits().memory_bytes > 0) cap = std::min(cap, backend.traits().memory_bytes / 2);
  return cap;
}

bool ResidencyCache::insert(uint64_t key, const Backend& backend, TM_Buffer* buffer, uint64_t bytes) {
  const uint64_t cap = budget_for(backend);
  if (bytes > cap) return false;
  std::lock_guard lock(mutex_);
  evict_locked(backend, cap - bytes);
  lru_.push_front({key, &backend, buffer, bytes});
  return true;
}

void ResidencyCache::evict_locked(const Backend& backend, uint64_t keep_bytes) {
  uint64_t used = 0;
  for (const auto& e : lru_) used += (e.backend == &backend) ? e.bytes : 0;
  for (auto it = lru_.end(); used > keep_bytes && it != lru_.begin();) {
    --it;
    if (it->backend != &backend) continue;
    used -= it->bytes;
    it->backend->release(it->buffer);
    it = lru_.erase(it);
  }
}

void ResidencyCache::set_budget(uint64_t budget_bytes) {
  budget_ = budget_bytes;
  std::lock_guard lock(mutex_);
  std::vector<const Backend*> holders;
  for (const auto& e : lru_) {
    if (std::find(holders.begin(), holders.end(), e.backend) == holders.end()) holders.push_back(e.backend);
  }
  for (const Backend* backend : holders) evict_locked(*backend, budget_for(*backend));
}

void ResidencyCache::drop_backend(const Backend& backend) {
  std::lock_guard lock(mutex_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->backend == &backend) {
      it->backend->release(it->buffer);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t ResidencyCache::bytes_on(const Backend& backend) const {
  std::lock_guard lock(mutex_);
  uint64_t used = 0;
  for (const auto& e : lru_) used += (e.backend == &backend) ? e.bytes : 0;
  return used;
}

}  // namespace tensormorph::compute
