#include "core/band_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace tensormorph {
namespace {

uint64_t page_size() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}
uint64_t align_down(uint64_t v, uint64_t a) { return v - v % a; }
uint64_t align_up(uint64_t v, uint64_t a) { return align_down(v + a - 1, a); }

// The largest folio the page cache makes of file pages (a PMD with 4 KiB pages). A folio is
// dropped whole or not at all, so one that straddles the edge of a band, read in part for each of
// two bands, is dropped once both are read (a larger folio elsewhere only stays cached).
constexpr uint64_t kFolioSpan = 2ull << 20;

// Bands planned and not yet released, at most: enough to keep reads in flight past a run of tiny
// tensors, few enough that a residency snapshot is not long stale when its band is used.
constexpr size_t kMaxPlanned = 256;

// Page-aligned file bytes [begin, end).
struct Range {
  uint64_t begin = 0, end = 0;
};

#ifdef __NR_cachestat
constexpr long kCachestat = __NR_cachestat;
#else
constexpr long kCachestat = 451;  // the same on every architecture (Linux 6.5, unified numbering)
#endif

// The arguments and result of cachestat(2), which the C library does not declare yet.
struct CachestatRange {
  uint64_t off, len;
};
struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

// Pages of file bytes [begin, end) in the page cache, by cachestat(2): one walk of the page cache
// over the range, where mincore(2) looks every page up on its own and costs about as much as
// computing the statistics of a band that is all cached. nullopt where the kernel lacks it.
std::optional<uint64_t> cached_pages(int descriptor, uint64_t begin, uint64_t end) {
  static std::atomic<bool> missing{false};
  if (missing.load(std::memory_order_relaxed)) return std::nullopt;
  CachestatRange range{begin, end - begin};
  Cachestat stat{};
  if (::syscall(kCachestat, descriptor, &range, &stat, 0) != 0) {
    if (errno == ENOSYS || errno == EPERM) missing.store(true, std::memory_order_relaxed);
    return std::nullopt;
  }
  return stat.nr_cache;
}

// The runs of pages of file bytes [begin, end) of `map` that mincore says are not in the page
// cache, appended to `runs`; all of them when it cannot say.
void mincore_absent(const MappedFile& map, uint64_t begin, uint64_t end, std::vector<Range>& runs) {
  const uint64_t page = page_size();
  const uint64_t first = align_down(begin, page), last = align_up(end, page);
  std::vector<unsigned char> resident((last - first) / page);
  void* base = const_cast<std::byte*>(map.bytes().data()) + first;
  if (::mincore(base, last - first, resident.data()) != 0) {
    runs.push_back({first, last});
    return;
  }
  for (size_t i = 0; i < resident.size();) {
    if (resident[i] & 1) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < resident.size() && !(resident[j] & 1)) ++j;
    runs.push_back({first + i * page, first + j * page});
    i = j;
  }
}

uint64_t pages_of(uint64_t begin, uint64_t end) {
  const uint64_t page = page_size();
  return (align_up(end, page) - align_down(begin, page)) / page;
}

// True when every page holding file bytes [begin, end) of `map` is in the page cache.
bool fully_cached(const MappedFile& map, uint64_t begin, uint64_t end) {
  if (const auto cached = cached_pages(map.descriptor(), begin, end)) return *cached >= pages_of(begin, end);
  std::vector<Range> runs;
  mincore_absent(map, begin, end, runs);
  return runs.empty();
}

// The runs of pages holding file bytes [begin, end) of `map` that are not in the page cache, in
// order. Asked piece by piece of `piece` bytes (a piece is usually all cached or none of it, one
// call), mincore only for a piece partly cached.
std::vector<Range> absent_runs(const MappedFile& map, uint64_t begin, uint64_t end, uint64_t piece) {
  const uint64_t page = page_size();
  std::vector<Range> runs;
  for (uint64_t b = begin; b < end;) {
    const uint64_t e = std::min(end, align_down(b, piece) + piece);
    const auto cached = cached_pages(map.descriptor(), b, e);
    if (cached && *cached == 0) {
      const Range r{align_down(b, page), align_up(e, page)};
      if (!runs.empty() && runs.back().end >= r.begin) {
        runs.back().end = r.end;
      } else {
        runs.push_back(r);
      }
    } else if (!cached || *cached < pages_of(b, e)) {
      mincore_absent(map, b, e, runs);
    }
    b = e;
  }
  return runs;
}

// Drops from the page cache the pages of `runs` within [begin, end) (widened to whole pages).
void drop_pages(int descriptor, const std::vector<Range>& runs, uint64_t begin, uint64_t end) {
  const uint64_t page = page_size();
  begin = align_down(begin, page);
  end = align_up(end, page);
  for (const Range& r : runs) {
    const uint64_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) (void)::posix_fadvise(descriptor, static_cast<off_t>(b), static_cast<off_t>(e - b), POSIX_FADV_DONTNEED);
  }
}

// One anonymous allocation used as a ring of slots, taken and released in order.
class Ring {
 public:
  Ring() = default;
  ~Ring() {
    if (base_ != nullptr) ::munmap(base_, capacity_);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  Status allocate(uint64_t capacity) {
    void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return Status::ResourceExhausted("cannot allocate " + std::to_string(capacity) +
                                       " bytes of read buffers: " + std::strerror(errno));
    }
#ifdef MADV_HUGEPAGE
    // The kernel copies into it and the kernels sweep it: 2 MiB pages spare TLB misses. Advisory.
    (void)::madvise(p, capacity, MADV_HUGEPAGE);
#endif
    base_ = static_cast<std::byte*>(p);
    capacity_ = capacity;
    return Status::Ok();
  }
  bool allocated() const { return base_ != nullptr; }
  std::byte* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }

  // The start of a free run of `size` bytes after the newest slot, or none until older slots go.
  std::optional<uint64_t> reserve(uint64_t size) {
    if (size > capacity_) return std::nullopt;
    uint64_t at = 0;
    if (!slots_.empty()) {
      const Slot& oldest = slots_.front();
      const Slot& newest = slots_.back();
      if (newest.begin >= oldest.begin) {  // in use: [oldest.begin, newest.end)
        if (capacity_ - newest.end >= size) {
          at = newest.end;
        } else if (oldest.begin >= size) {
          at = 0;
        } else {
          return std::nullopt;
        }
      } else if (oldest.begin - newest.end >= size) {  // wrapped: free is [newest.end, oldest.begin)
        at = newest.end;
      } else {
        return std::nullopt;
      }
    }
    slots_.push_back({at, at + size});
    used_ += size;
    return at;
  }
  void release_oldest() {
    used_ -= slots_.front().end - slots_.front().begin;
    slots_.pop_front();
  }

 private:
  struct Slot {
    uint64_t begin, end;
  };
  std::byte* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
  std::deque<Slot> slots_;
};

// A band from planning to release.
struct Planned {
  size_t extent = 0;
  uint64_t offset = 0;  // in the extent
  uint64_t length = 0;
  BandSource source = BandSource::kMapping;
  const std::byte* data = nullptr;
  std::vector<Range> absent;  // pages not in the page cache when planned, to the folio spans around it
  bool handed_out = false;
  uint64_t file_begin = 0, file_end = 0;  // its bytes in the file
  // Guarded by State::mutex.
  uint32_t chunks_left = 0;  // preads not finished
  bool complete = true;      // read, and what the reads brought in dropped (but the folio spans at its edges)
  Status error;
};

// One pread of a buffered band.
struct Chunk {
  Planned* band = nullptr;
  const ReadExtent* extent = nullptr;
  int descriptor = -1;
  bool direct = false;  // `descriptor` is O_DIRECT: reads whole pages around the chunk
  int buffered = -1;    // a descriptor without O_DIRECT, for a remainder a direct read cannot take
  uint64_t file_offset = 0;
  std::byte* dest = nullptr;
  uint64_t length = 0;
};

// Reads a chunk whole; IO_ERROR naming the file, the extent and the offset otherwise. A direct
// read takes the whole pages around the chunk (the ring slot has room for them: it starts at the
// file offset's place in a page and ends on a page boundary) and may end short at the file's end.
Status read_chunk(const Chunk& c) {
  const uint64_t page = page_size();
  const uint64_t lead = c.direct ? c.file_offset % page : 0;
  const uint64_t want = c.direct ? align_up(lead + c.length, page) : c.length;
  std::byte* const dest = c.dest - lead;
  const uint64_t start = c.file_offset - lead;
  uint64_t done = 0;
  while (done < lead + c.length) {
    // A direct read needs page-aligned offsets and sizes; after an unaligned short read the
    // rest goes through the buffered descriptor.
    const bool direct = c.direct && done % page == 0;
    const int fd = c.direct && !direct ? c.buffered : c.descriptor;
    const uint64_t size = direct ? want - done : lead + c.length - done;
    const ssize_t n = ::pread(fd, dest + done, size, static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    const std::string where = c.extent->file->path().string() + ": " + c.extent->what + ": ";
    if (n < 0) {
      return Status::IoError(where + "read at offset " + std::to_string(start + done) +
                             " failed: " + std::strerror(errno));
    }
    if (n == 0) {
      return Status::IoError(where + "the file ends at offset " + std::to_string(start + done) + ", within bytes [" +
                             std::to_string(c.extent->offset) + ", " + std::to_string(c.extent->offset + c.extent->length) +
                             ") (it was truncated after it was opened)");
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace

struct BandReader::State {
  std::vector<ReadExtent> extents;
  BandReaderOptions options;

  // The consumer's, unguarded.
  size_t wanted = 0;                            // extent last asked for
  size_t plan_extent = 0;                       // next band to plan: extent and offset in it
  uint64_t plan_offset = 0;
  std::deque<std::unique_ptr<Planned>> planned;  // in order; the front may be handed out
  Ring ring;
  struct Descriptor {
    int fd = -1;
    bool owned = false;
    bool direct = false;  // O_DIRECT: reads bypass the page cache
  };
  std::unordered_map<const MappedFile*, Descriptor> descriptors;
  uint64_t bands_mapped = 0, bands_read = 0, peak_ring_used = 0;
  // The folio spans at the edges of a read band, dropped by a reader thread once the next read band
  // is released: by then the neighbour that reads the other part of a straddling folio has read it.
  struct EdgeDrop {
    int descriptor = -1;
    std::vector<Range> absent;
    Range head, tail;
    void run() const {
      drop_pages(descriptor, absent, head.begin, head.end);
      drop_pages(descriptor, absent, tail.begin, tail.end);
    }
  };
  std::optional<EdgeDrop> edges;  // of the last read band released

  // Shared with the readers.
  mutable std::mutex mutex;
  std::condition_variable work, done;
  std::deque<Chunk> queue;
  std::deque<EdgeDrop> drops;  // after the reads in `queue`
  bool stopping = false;
  uint64_t bytes_read = 0;
  std::vector<std::thread> threads;

  ~State() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    work.notify_all();
    for (auto& t : threads) t.join();
    while (!planned.empty()) release_front();
    for (const EdgeDrop& d : drops) d.run();
    if (edges) edges->run();
    for (auto& [file, d] : descriptors) {
      if (d.owned) ::close(d.fd);
    }
  }

  // A descriptor of its own for reading `file` (a description of its own: the mapping's serves
  // other readers): O_DIRECT, so that cold reads go from the device into the ring without passing
  // through the page cache (nothing to drop behind, no page-cache work per page); where the file
  // system refuses O_DIRECT, buffered with readahead off (POSIX_FADV_RANDOM is per open file
  // description), its pages dropped after use; the mapping's when neither opens.
  const Descriptor& reading_descriptor(const MappedFile& file) {
    auto [it, inserted] = descriptors.try_emplace(&file);
    if (inserted) {
      const std::string self = "/proc/self/fd/" + std::to_string(file.descriptor());
      if (const int fd = options.direct ? ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1; fd >= 0) {
        it->second = {fd, true, true};
      } else if (const int buffered = ::open(self.c_str(), O_RDONLY | O_CLOEXEC); buffered >= 0) {
        (void)::posix_fadvise(buffered, 0, 0, POSIX_FADV_RANDOM);
        it->second = {buffered, true, false};
      } else {
        it->second = {file.descriptor(), false, false};
      }
    }
    return it->second;
  }

  void reader_loop() {
    for (;;) {
      Chunk c;
      std::optional<EdgeDrop> drop;
      bool skip = false;
      {
        std::unique_lock lock(mutex);
        work.wait(lock, [&] { return stopping || !queue.empty() || !drops.empty(); });
        if (stopping) return;
        if (queue.empty()) {
          drop = std::move(drops.front());
          drops.pop_front();
        } else {
          c = queue.front();
          queue.pop_front();
          skip = !c.band->error.ok();
        }
      }
      if (drop) {
        drop->run();
        continue;
      }
      Status status = skip ? Status::Ok() : read_chunk(c);
      bool last = false;
      {
        std::lock_guard lock(mutex);
        if (!skip && status.ok()) bytes_read += c.length;
        if (!status.ok() && c.band->error.ok()) c.band->error = std::move(status);
        last = --c.band->chunks_left == 0;
      }
      if (!last) continue;
      // One drop per band: each call drains the per-CPU page lists, which costs more than the
      // invalidation when made per read.
      drop_pages(c.descriptor, c.band->absent, c.band->file_begin, c.band->file_end);
      {
        std::lock_guard lock(mutex);
        c.band->complete = true;
      }
      done.notify_all();
    }
  }

  Status start_reading() {
    const uint64_t page = page_size();
    TM_RETURN_IF_ERROR(ring.allocate(2 * (options.max_band_bytes + 2 * page)));
    for (uint32_t i = 0; i < options.threads; ++i) threads.emplace_back([this] { reader_loop(); });
    return Status::Ok();
  }

  // Plans bands in order from the cursor while the ring has room, starting their reads.
  Status plan() {
    const uint64_t page = page_size();
    if (plan_extent < wanted) {  // the bands of extents skipped over are never read
      plan_extent = wanted;
      plan_offset = 0;
    }
    while (planned.size() < kMaxPlanned) {
      while (plan_extent < extents.size() && plan_offset >= extents[plan_extent].length) {
        ++plan_extent;
        plan_offset = 0;
      }
      if (plan_extent >= extents.size()) return Status::Ok();
      const ReadExtent& e = extents[plan_extent];
      auto band = std::make_unique<Planned>();
      band->extent = plan_extent;
      band->offset = plan_offset;
      band->length = std::min(e.band_bytes, e.length - plan_offset);
      const uint64_t begin = e.offset + plan_offset, end = begin + band->length;
      // A file that shrank after it was mapped may keep pages past its end cached (in a large
      // folio that could not be split): touching those through the mapping is SIGBUS, while a
      // read says where the file ends.
      struct stat st {};
      const bool shrunk = ::fstat(e.file->descriptor(), &st) != 0 || static_cast<uint64_t>(st.st_size) < end;
      const bool cached = !shrunk && fully_cached(*e.file, begin, end);
      const Descriptor& reader = reading_descriptor(*e.file);
      // Direct reads bring nothing into the page cache; a buffered or mapped read drops what it
      // brought in, known from what was absent before.
      if (!cached && !(reader.direct && band->length <= options.max_band_bytes)) {
        // Before any read of this band or a later one: what is absent now is what they bring in.
        const uint64_t span_end = std::min(align_up(end, kFolioSpan), align_up(e.file->size(), page));
        band->absent = absent_runs(*e.file, align_down(begin, kFolioSpan), std::max(span_end, end), options.chunk_bytes);
      }
      if (shrunk && band->length > options.max_band_bytes) {
        band->error = Status::IoError(e.file->path().string() + ": " + e.what + ": the file ends at offset " +
                                      std::to_string(st.st_size) + ", within bytes [" + std::to_string(e.offset) + ", " +
                                      std::to_string(e.offset + e.length) + ") (it was truncated after it was opened)");
      } else if ((cached || band->length > options.max_band_bytes) && !shrunk) {
        band->source = BandSource::kMapping;
        band->data = e.file->bytes().data() + begin;
      } else {
        if (!ring.allocated()) TM_RETURN_IF_ERROR(start_reading());
        // The slot starts at the file offset's place within a page, so each page of the slot holds
        // one page of the file and the kernel copies whole pages.
        const auto at = ring.reserve(align_up(begin % page + band->length, page));
        if (!at) return Status::Ok();  // no room until an older band is released
        peak_ring_used = std::max(peak_ring_used, ring.used());
        band->source = BandSource::kBuffer;
        std::byte* dest = ring.base() + *at + begin % page;
        band->data = dest;
        std::vector<Chunk> chunks;
        for (uint64_t c = begin; c < end;) {
          const uint64_t next = std::min(end, align_down(c, options.chunk_bytes) + options.chunk_bytes);
          chunks.push_back({band.get(), &e, reader.fd, reader.direct, e.file->descriptor(), c, dest + (c - begin), next - c});
          c = next;
        }
        band->file_begin = begin;
        band->file_end = end;
        {
          std::lock_guard lock(mutex);
          band->chunks_left = static_cast<uint32_t>(chunks.size());
          band->complete = false;
          queue.insert(queue.end(), chunks.begin(), chunks.end());
        }
        work.notify_all();
      }
      plan_offset += band->length;
      planned.push_back(std::move(band));
    }
    return Status::Ok();
  }

  void wait_for(Planned& band) {
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return band.complete; });
  }

  // Releases the oldest band, whose reads have finished.
  void release_front() {
    Planned& band = *planned.front();
    const ReadExtent& e = extents[band.extent];
    const uint64_t page = page_size();
    const uint64_t begin = e.offset + band.offset, end = begin + band.length;
    if (band.source == BandSource::kBuffer) {
      ring.release_oldest();
      if (edges) {
        {
          std::lock_guard lock(mutex);
          drops.push_back(std::move(*edges));
        }
        work.notify_one();
      }
      edges = EdgeDrop{e.file->descriptor(), std::move(band.absent),
                       {align_down(begin, kFolioSpan), align_up(begin, kFolioSpan)},
                       {align_down(end, kFolioSpan), align_up(end, kFolioSpan)}};
    } else if (band.handed_out) {
      const uint64_t first = align_down(begin, page);
      (void)::madvise(const_cast<std::byte*>(e.file->bytes().data()) + first, align_up(end, page) - first,
                      MADV_DONTNEED);
      drop_pages(e.file->descriptor(), band.absent, align_down(begin, kFolioSpan), align_up(end, kFolioSpan));
    }
    planned.pop_front();
  }
};

BandReader::BandReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
BandReader::~BandReader() = default;

Result<std::unique_ptr<BandReader>> BandReader::open(std::vector<ReadExtent> extents, BandReaderOptions options) {
  const uint64_t page = page_size();
  if (options.threads == 0 || options.max_band_bytes == 0 || options.chunk_bytes == 0 ||
      options.chunk_bytes % page != 0) {
    return Status::InvalidArgument("band reader: threads, band and chunk sizes must be positive, chunks whole pages");
  }
  for (const ReadExtent& e : extents) {
    uint64_t end = 0;
    if (e.file == nullptr || e.band_bytes == 0 || __builtin_add_overflow(e.offset, e.length, &end) ||
        end > e.file->size()) {
      return Status::InvalidArgument((e.file ? e.file->path().string() + ": " : std::string()) + e.what +
                                     ": bytes [" + std::to_string(e.offset) + ", +" + std::to_string(e.length) +
                                     ") are not a range of the mapped file in bands");
    }
  }
  auto state = std::make_unique<State>();
  state->extents = std::move(extents);
  state->options = options;
  return std::unique_ptr<BandReader>(new BandReader(std::move(state)));
}

Result<std::optional<Band>> BandReader::next(size_t extent) {
  State& s = *state_;
  if (extent < s.wanted) {
    return Status::InvalidArgument("band reader: extent " + std::to_string(extent) + " asked for after extent " +
                                   std::to_string(s.wanted));
  }
  if (extent >= s.extents.size()) {
    return Status::InvalidArgument("band reader: no extent " + std::to_string(extent));
  }
  s.wanted = extent;
  if (!s.planned.empty() && s.planned.front()->handed_out) s.release_front();
  for (;;) {
    TM_RETURN_IF_ERROR(s.plan());
    if (s.planned.empty()) return std::optional<Band>();
    Planned& front = *s.planned.front();
    if (front.extent > extent) return std::optional<Band>();
    s.wait_for(front);
    if (front.extent < extent) {
      s.release_front();
      continue;
    }
    front.handed_out = true;
    {
      std::lock_guard lock(s.mutex);
      if (!front.error.ok()) return front.error;
    }
    (front.source == BandSource::kMapping ? s.bands_mapped : s.bands_read)++;
    return std::optional<Band>(Band{front.offset, {front.data, front.length}, front.source});
  }
}

BandReaderStats BandReader::stats() const {
  const State& s = *state_;
  BandReaderStats out;
  out.bands_mapped = s.bands_mapped;
  out.bands_read = s.bands_read;
  out.ring_bytes = s.ring.capacity();
  out.peak_ring_bytes_used = s.peak_ring_used;
  std::lock_guard lock(s.mutex);
  out.bytes_read = s.bytes_read;
  return out;
}

}  // namespace tensormorph
