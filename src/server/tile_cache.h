// The rendered-tile cache: encoded PNGs by request key, least recently used first out, within a
// memory budget. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tensormorph::server {

/// An LRU map from key to immutable bytes, bounded by the bytes it holds.
class TileCache {
 public:
  /// Keeps at most `budget_bytes` of values (0 disables caching).
  explicit TileCache(uint64_t budget_bytes) : budget_(budget_bytes) {}
  /// The bytes cached under `key`, refreshed as most recently used; nullptr when absent.
  std::shared_ptr<const std::string> get(const std::string& key);
  /// Stores `value` under `key`, evicting the least recently used entries to stay in budget.
  void put(const std::string& key, std::shared_ptr<const std::string> value);
  /// Bytes held now.
  uint64_t bytes() const;
  /// Entries held now.
  size_t size() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const std::string> value;
  };
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t budget_;
  uint64_t bytes_ = 0;
};

}  // namespace tensormorph::server
