// The index sidecar: a valid safetensors file holding every tensor's pyramid of tile statistics.
//
// Layout: for tensor T and level k, a tensor named "T/L<k>" of dtype F64 and shape
// [tile_rows, tile_cols, 10], the last axis holding count, nan, pos_inf, neg_inf, zeros, sum,
// sum_sq, min, max, absmax. `__metadata__` holds "tensormorph.index" = a JSON document with the
// format version, the tile size, the identity of every source file and, per tensor, its dtype,
// shape, matrix shape and source file. A tensor's value histogram (engine/value_histogram.h), when
// it was counted, is "T/H" of dtype U64 and shape [bins, 2]: the non-empty bins as (bin, count)
// in increasing bin order; its metadata then names the number of non-empty bins. Any safetensors
// reader can open it.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "index/file_identity.h"
#include "engine/pyramid.h"
#include "tensormorph/dtype.h"

namespace tensormorph::index {

/// The `__metadata__` key that marks a safetensors file as a Tensormorph index.
inline constexpr const char* kIndexMetadataKey = "tensormorph.index";
/// Version of the layout above; readers refuse other versions (the index is then rebuilt).
inline constexpr int kIndexFormatVersion = 1;
/// Fields per tile in the stored F64 tensors.
inline constexpr uint64_t kFieldsPerTile = 10;

/// One tensor's pyramid.
struct TensorPyramid {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  uint64_t rows = 0, cols = 0;      ///< the matrix view (engine::as_matrix)
  uint32_t file = 0;                ///< index into IndexContents::files
  std::vector<engine::PyramidLevel> levels;  ///< level 0 (tiles) first, up to one tile
  /// Finite values per bin of the value histogram (kValueHistogramBins counts); empty when the
  /// index holds none for the tensor.
  std::vector<uint64_t> value_histogram;
};

/// Everything an index file holds.
struct IndexContents {
  uint32_t tile = 256;
  std::vector<FileIdentity> files;
  std::vector<TensorPyramid> tensors;  ///< complete tensors only, in checkpoint order
};

/// Writes `contents` atomically (temporary file + rename) as a safetensors file.
Status write_index(const std::filesystem::path& path, const IndexContents& contents);
/// The same for contents given in parts (a prefix of the tensors built so far, without copying them).
Status write_index(const std::filesystem::path& path, uint32_t tile, std::span<const FileIdentity> files,
                   std::span<const TensorPyramid> pyramids);

/// The stored F64 fields of `records` (kFieldsPerTile each, in the order above), in `out`.
std::span<const std::byte> pack_tile_stats(std::span<const TM_TileStats> records, std::vector<double>& out);
/// One record from its kFieldsPerTile stored fields; false when a stored count is impossible.
bool unpack_tile_stats(const double* fields, TM_TileStats* record);

/// Reads an index file; a missing file is NOT_FOUND, a damaged or foreign one FORMAT_ERROR.
Result<IndexContents> read_index(const std::filesystem::path& path);

}  // namespace tensormorph::index
