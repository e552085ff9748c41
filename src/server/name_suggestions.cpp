#include "server/name_suggestions.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <tuple>

#include "core/printable.h"

namespace tensormorph::server {
namespace {

// Names longer than this are compared by their first this many bytes (bounds the work per name).
constexpr size_t kComparedBytes = 256;

std::string lowered(std::string_view text) {
  std::string out(text.substr(0, kComparedBytes));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Levenshtein distance, or `bound` + 1 once it must exceed `bound` (no name can then beat the kept ones).
size_t edit_distance(std::string_view a, std::string_view b, size_t bound, std::vector<size_t>& row) {
  const size_t gap = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (gap > bound) return bound + 1;
  row.resize(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0], smallest = row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      smallest = std::min(smallest, row[j]);
    }
    if (smallest > bound) return bound + 1;
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> closest_names(std::string_view wanted, std::span<const TensorInfo> tensors, size_t limit) {
  if (limit == 0 || tensors.empty()) return {};
  const std::string want = lowered(wanted);
  // (not containing it, distance or length, position): smaller is closer.
  using Rank = std::tuple<int, size_t, size_t>;
  std::vector<Rank> kept;
  std::vector<size_t> row;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = lowered(tensors[i].name);
    Rank rank;
    if (!want.empty() && name.find(want) != std::string::npos) {
      rank = {0, name.size(), i};
    } else {
      if (kept.size() == limit && std::get<0>(kept.back()) == 0) continue;  // every kept name contains it
      const size_t bound = kept.size() < limit ? SIZE_MAX - 1 : std::get<1>(kept.back());
      rank = {1, edit_distance(want, name, bound, row), i};
    }
    if (kept.size() == limit && !(rank < kept.back())) continue;
    kept.insert(std::upper_bound(kept.begin(), kept.end(), rank), rank);
    if (kept.size() > limit) kept.pop_back();
  }
  std::vector<std::string> names;
  for (const Rank& r : kept) names.push_back(tensors[std::get<2>(r)].name);
  return names;
}

std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string text = "did you mean ";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += quoted_name(names[i]);
  }
  return text + "?";
}

}  // namespace tensormorph::server
