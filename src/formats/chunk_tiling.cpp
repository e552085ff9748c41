// Checking that a tensor's chunks (as sharded formats assemble it) tile it exactly.
#include "formats/chunk_tiling.h"

#include <optional>

#include "core/printable.h"

namespace tensormorph {
namespace {

/// Beyond this many chunks the pairwise overlap check is skipped; the element count still holds.
constexpr size_t kMaxPairwiseChunks = 2048;

/// The product of `dims`, or nullopt on overflow.
std::optional<uint64_t> volume(const std::vector<uint64_t>& dims) {
  uint64_t v = 1;
  for (uint64_t d : dims) {
    if (__builtin_mul_overflow(v, d, &v)) return std::nullopt;
  }
  return v;
}

bool boxes_overlap(const TensorChunk& a, const TensorChunk& b) {
  for (size_t d = 0; d < a.start.size(); ++d) {
    if (a.start[d] + a.sizes[d] <= b.start[d] || b.start[d] + b.sizes[d] <= a.start[d]) return false;
  }
  return true;
}

}  // namespace

Status check_chunk_tiling(std::string_view source, const TensorInfo& tensor) {
  const std::string where = std::string(source) + ": tensor " + quoted_name(tensor.name) + " " + dims_text(tensor.shape);
  const auto total = volume(tensor.shape);
  if (!total) return Status::FormatError(where + ": its element count overflows");
  uint64_t covered = 0;
  for (const TensorChunk& c : tensor.chunks) {
    if (c.start.size() != tensor.shape.size() || c.sizes.size() != tensor.shape.size()) {
      return Status::FormatError(where + ": a chunk at " + dims_text(c.start) + " has " + std::to_string(c.sizes.size()) +
                                 " dimensions");
    }
    for (size_t d = 0; d < c.start.size(); ++d) {
      if (c.start[d] > tensor.shape[d] || tensor.shape[d] - c.start[d] < c.sizes[d]) {
        return Status::FormatError(where + ": the chunk at " + dims_text(c.start) + " of size " + dims_text(c.sizes) +
                                   " reaches outside the tensor");
      }
    }
    covered += *volume(c.sizes);  // within the shape, so no overflow
  }
  if (tensor.chunks.size() <= kMaxPairwiseChunks) {
    for (size_t i = 0; i < tensor.chunks.size(); ++i) {
      for (size_t j = i + 1; j < tensor.chunks.size(); ++j) {
        const TensorChunk& a = tensor.chunks[i];
        const TensorChunk& b = tensor.chunks[j];
        if (*volume(a.sizes) != 0 && *volume(b.sizes) != 0 && boxes_overlap(a, b)) {
          return Status::FormatError(where + ": the chunks at " + dims_text(a.start) + " and " + dims_text(b.start) + " overlap");
        }
      }
    }
  }
  if (covered != *total) {
    return Status::FormatError(where + ": its chunks hold " + std::to_string(covered) + " of its " +
                               std::to_string(*total) + " elements");
  }
  return Status::Ok();
}

std::string dims_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace tensormorph
