#include "cli/name_suggestions.h"

#include <algorithm>
#include <cctype>

#include "core/printable.h"

namespace tensormorph::cli {
namespace {

std::string lowered(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The literal runs of a shell glob: the text between '*', '?' and bracket expressions.
std::vector<std::string> literal_pieces(std::string_view glob) {
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < glob.size(); ++i) {
    const char c = glob[i];
    if (c == '*' || c == '?' || c == '[') {
      if (c == '[') {
        const size_t close = glob.find(']', i + 2);
        if (close != std::string_view::npos) i = close;
      }
      if (!pieces.back().empty()) pieces.emplace_back();
      continue;
    }
    if (c == '\\' && i + 1 < glob.size()) ++i;
    pieces.back() += glob[i];
  }
  if (pieces.back().empty()) pieces.pop_back();
  return pieces;
}

// The fewest edits that turn `needle` into some substring of `hay` (Sellers' algorithm): a piece
// of a name typed with a slip still finds the name.
size_t substring_distance(std::string_view needle, std::string_view hay) {
  std::vector<size_t> row(hay.size() + 1, 0), next(hay.size() + 1);
  for (size_t i = 1; i <= needle.size(); ++i) {
    next[0] = i;
    for (size_t j = 1; j <= hay.size(); ++j) {
      next[j] = std::min({row[j] + 1, next[j - 1] + 1, row[j - 1] + (needle[i - 1] != hay[j - 1] ? 1u : 0u)});
    }
    std::swap(row, next);
  }
  return *std::min_element(row.begin(), row.end());
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1), next(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    next[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      next[j] = std::min({row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] != b[j - 1] ? 1u : 0u)});
    }
    std::swap(row, next);
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> closest_tensor_names(const Checkpoint& ckpt, std::string_view wanted, size_t limit) {
  std::vector<std::string> pieces = literal_pieces(lowered(wanted));
  size_t literal = 0;
  for (const auto& p : pieces) literal += p.size();
  if (literal == 0 || limit == 0) return {};
  // About one slip in four characters, and at least one.
  const size_t allowed = std::max<size_t>(1, literal / 4);
  const std::string whole = lowered(wanted);
  struct Candidate {
    size_t distance, overall;
    const std::string* name;
  };
  std::vector<Candidate> found;
  for (const TensorInfo& t : ckpt.tensors()) {
    const std::string name = lowered(t.name);
    size_t distance = 0;
    for (const auto& p : pieces) {
      distance += substring_distance(p, name);
      if (distance > allowed) break;
    }
    if (distance <= allowed) found.push_back({distance, edit_distance(whole, name), &t.name});
  }
  const size_t kept = std::min(limit, found.size());
  std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(kept), found.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return a.distance != b.distance ? a.distance < b.distance
                             : a.overall != b.overall ? a.overall < b.overall
                                                      : *a.name < *b.name;
                    });
  std::vector<std::string> names;
  for (size_t i = 0; i < kept; ++i) names.push_back(*found[i].name);
  return names;
}

std::string close_names_text(const std::vector<std::string>& names, size_t total) {
  if (names.empty()) {
    return "; none of its " + std::to_string(total) + " tensor names is close (tensormorph info lists them)";
  }
  std::string text = "; close names: ";
  for (size_t i = 0; i < names.size(); ++i) text += (i ? ", " : "") + quoted_name(names[i]);
  return text;
}

}  // namespace tensormorph::cli
