// The host's one read path for checkpoint bytes: byte ranges of mapped files ("extents", one per
// tensor) cut into bands and handed out in order as host memory, so that backends only ever see
// host memory and never a file.
//
// It lives in core, beside MappedFile, because what it decides from is what core knows (the
// mapping, the page cache, the file) and nothing of tensors or operations: the engine says how a
// tensor is cut into bands, this says where each band's bytes come from.
//
// Each band is decided when it is planned, ahead of use:
// - Every page in the page cache (cachestat over the band, mincore where the kernel lacks it): the
//   mapping itself, which costs no copy.
//   When the band is released, its pages are unmapped from this process (MADV_DONTNEED on a shared
//   file mapping drops page-table entries, not the page cache), so the resident set does not grow
//   with the checkpoint.
// - Otherwise: a slot of one ring buffer, filled by a small pool of threads with large preads,
//   reads of later bands kept in flight while earlier ones are computed (the ring holds the band
//   in use and at least one more), so storage does not wait on compute. The reads go through a
//   descriptor of their own opened with O_DIRECT: the device writes into the ring and the page
//   cache is not touched, so what is read cold neither stays in the cache nor pushes other files
//   out of it, and no CPU time goes to inserting and dropping pages. Where the file system refuses
//   O_DIRECT the reads are buffered with POSIX_FADV_RANDOM (the kernel's readahead would read past
//   what is asked and leave that behind), and once a band is read POSIX_FADV_DONTNEED drops the
//   pages that were not in the page cache when it was planned (the folios straddling its edges once
//   its neighbours are read too), while pages that were already cached stay.
// - Larger than a slot: the mapping, released the same way, and the pages that were not cached
//   before dropped after use.
// A pool of pread threads rather than io_uring: buffered io_uring reads that miss the page cache
// are handed to kernel worker threads anyway, and a few threads with reads of several MiB each keep
// the device's queue as full as it takes (docs/INDEX.md#reading-checkpoint-bytes).
//
// Bound: the ring is 2 * (max_band_bytes + 2 pages) of memory, allocated on the first band that
// needs it; one mapped band at a time stays mapped, at most max_band_bytes unless a band is larger
// than a slot (a single band of that size). The page cache holds what the reads brought in only
// for bands in the ring, at most its size plus two folio spans per band.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensormorph/mapped_file.h"
#include "tensormorph/status.h"

namespace tensormorph {

/// A byte range of a mapped file to read in bands.
struct ReadExtent {
  std::shared_ptr<const MappedFile> file;  ///< kept alive by the reader
  uint64_t offset = 0;                     ///< file offset of the first byte
  uint64_t length = 0;                     ///< bytes (within the mapping)
  uint64_t band_bytes = 0;                 ///< length of every band but the last; > 0
  std::string what;                        ///< names the range in errors, e.g. "tensor 'w'"
};

/// Where a band's bytes are.
enum class BandSource : uint8_t {
  kMapping,  ///< the file's mapping
  kBuffer,   ///< a ring slot filled by reads
};

/// One band in host memory, valid until the next call of BandReader::next or the reader's end.
struct Band {
  uint64_t offset = 0;  ///< from the start of its extent
  std::span<const std::byte> bytes;
  BandSource source = BandSource::kMapping;
};

/// Sizes of a BandReader; the defaults are the host's.
struct BandReaderOptions {
  uint64_t max_band_bytes = 256ull << 20;  ///< largest band read into the ring (it holds two)
  uint64_t chunk_bytes = 8ull << 20;       ///< bytes of one pread; a multiple of the page size
  uint32_t threads = 8;                    ///< preads in flight
  bool direct = true;                      ///< O_DIRECT reads where the file system takes them
};

/// What a reader has done so far.
struct BandReaderStats {
  uint64_t bands_mapped = 0;          ///< bands handed out from the mapping
  uint64_t bands_read = 0;            ///< bands handed out from the ring
  uint64_t bytes_read = 0;            ///< bytes copied by pread
  uint64_t ring_bytes = 0;            ///< memory of the ring (0 until a band needed it)
  uint64_t peak_ring_bytes_used = 0;  ///< most ring bytes held by planned and unreleased bands
};

/// Reads extents in bands, in order, each band from the mapping or from reads kept in flight.
/// One consumer thread calls next(); the reads run on the reader's own threads.
class BandReader {
 public:
  /// A reader of `extents` (each within its file's mapping; InvalidArgument otherwise).
  static Result<std::unique_ptr<BandReader>> open(std::vector<ReadExtent> extents, BandReaderOptions options = {});
  ~BandReader();
  BandReader(const BandReader&) = delete;
  BandReader& operator=(const BandReader&) = delete;

  /// The next band of extents[extent], in order, releasing the band handed out before; nullopt once
  /// the extent is done. Bands of earlier extents not taken are skipped (their reads still finish).
  /// A failed read is an IO_ERROR naming the file, the extent and the offset; asking for an extent
  /// before the one in progress is an InvalidArgument.
  Result<std::optional<Band>> next(size_t extent);

  /// Counters since open().
  BandReaderStats stats() const;

 private:
  struct State;
  explicit BandReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tensormorph
