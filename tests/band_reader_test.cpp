// Tests of the host's read path (src/core/band_reader.h): bands from the mapping when the page
// cache holds them and from reads otherwise, dropped behind when they were read cold; bands cover
// the extents exactly, in order, with skipping; a truncated file is an error naming the file, the
// tensor and the offset; the ring stays within its bound; tile statistics read cold equal those
// read through the mapping, bit for bit.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/band_reader.h"
#include "core/quantize/quantize.h"
#include "engine/compute_session.h"
#include "engine/tensor_ops.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/decode.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));

// Bytes whose value depends on their offset, so a band from the wrong place shows.
std::string pattern(uint64_t size, uint32_t seed = 1) {
  std::string s(size, '\0');
  uint32_t x = seed * 2654435761u + 12345u;
  for (uint64_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

// Pages of file bytes [begin, end) in the page cache.
uint64_t resident_pages(const fs::path& path, uint64_t begin, uint64_t end) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  const uint64_t size = fs::file_size(path);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(map, MAP_FAILED);
  const uint64_t first = begin - begin % kPage, last = (end + kPage - 1) / kPage * kPage;
  std::vector<unsigned char> vec((last - first) / kPage);
  EXPECT_EQ(::mincore(static_cast<char*>(map) + first, last - first, vec.data()), 0);
  ::munmap(map, size);
  uint64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// Writes the file to storage and drops it from the page cache; false where the file system keeps
// it cached regardless (tmpfs).
bool evict(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return resident_pages(path, 0, fs::file_size(path)) == 0;
}

// Reads the file so that the page cache holds it.
void warm(const fs::path& path) { (void)testing::read_bytes(path); }

std::shared_ptr<const MappedFile> map_file(const fs::path& path) {
  auto map = MappedFile::open(path);
  EXPECT_TRUE(map.ok()) << map.status().to_string();
  return map.ok() ? *map : nullptr;
}

// Every band of `extent`, appended in order, with checks that they follow each other.
std::string take_all(BandReader& reader, size_t extent, std::vector<BandSource>* sources = nullptr) {
  std::string got;
  for (;;) {
    auto band = reader.next(extent);
    EXPECT_TRUE(band.ok()) << band.status().to_string();
    if (!band.ok() || !band->has_value()) break;
    EXPECT_EQ((*band)->offset, got.size());
    got.append(reinterpret_cast<const char*>((*band)->bytes.data()), (*band)->bytes.size());
    if (sources) sources->push_back((*band)->source);
  }
  return got;
}

TEST(BandReader, ResidentBandsComeFromTheMapping) {
  TempDir dir;
  const std::string data = pattern(3 * 1024 * 1024 + 777);
  testing::write_bytes(dir / "f", data);
  warm(dir / "f");
  auto map = map_file(dir / "f");
  ASSERT_EQ(resident_pages(dir / "f", 0, data.size()), (data.size() + kPage - 1) / kPage);
  auto reader = BandReader::open({{map, 100, data.size() - 100, 1 << 20, "tensor 'w'"}});
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::vector<BandSource> sources;
  EXPECT_EQ(take_all(**reader, 0, &sources), data.substr(100));
  EXPECT_EQ(sources, std::vector<BandSource>(4, BandSource::kMapping));
  const BandReaderStats stats = (*reader)->stats();
  EXPECT_EQ(stats.bands_mapped, 4u);
  EXPECT_EQ(stats.bands_read, 0u);
  EXPECT_EQ(stats.ring_bytes, 0u) << "no buffer is allocated while everything is cached";
  EXPECT_EQ(resident_pages(dir / "f", 0, data.size()), (data.size() + kPage - 1) / kPage)
      << "cached pages stay cached";
}

// Cold reads direct (O_DIRECT) and buffered (where a file system refuses O_DIRECT).
class ColdReads : public ::testing::TestWithParam<bool> {
 protected:
  bool direct() const { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(BandReader, ColdReads, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Direct" : "Buffered"; });

TEST_P(ColdReads, ColdBandsAreReadAndDroppedBehind) {
  TempDir dir;
  // Band edges off page and folio boundaries: a large folio straddling two bands is dropped too.
  const std::string data = pattern(9 * 1024 * 1024 + 333, 2);
  testing::write_bytes(dir / "f", data);
  if (!evict(dir / "f")) GTEST_SKIP() << "the file system of " << dir.path() << " keeps files cached";
  auto map = map_file(dir / "f");
  const uint64_t band = (1 << 20) + 12345;
  auto reader = BandReader::open({{map, 4097, data.size() - 5000, band, "tensor 'w'"}},
                                 {.max_band_bytes = 2 << 20, .chunk_bytes = 256 * 1024, .threads = 3, .direct = direct()});
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::vector<BandSource> sources;
  EXPECT_EQ(take_all(**reader, 0, &sources), data.substr(4097, data.size() - 5000));
  const uint64_t bands = (data.size() - 5000 + band - 1) / band;
  EXPECT_EQ(sources, std::vector<BandSource>(bands, BandSource::kBuffer));
  const BandReaderStats stats = (*reader)->stats();
  EXPECT_EQ(stats.bands_read, bands);
  EXPECT_EQ(stats.bytes_read, data.size() - 5000);
  reader->reset();
  EXPECT_EQ(resident_pages(dir / "f", 0, data.size()), 0u) << "what was read cold is not left in the page cache";
}

TEST_P(ColdReads, APartlyCachedBandIsReadAndOnlyWhatWasReadColdIsDropped) {
  TempDir dir;
  const std::string data = pattern(4 * 1024 * 1024, 3);
  testing::write_bytes(dir / "f", data);
  if (!evict(dir / "f")) GTEST_SKIP() << "the file system of " << dir.path() << " keeps files cached";
  (void)read_file_range(dir / "f", 1024 * 1024, 512 * 1024);  // another reader caches 128 pages
  const uint64_t cached = resident_pages(dir / "f", 0, data.size());
  ASSERT_GE(cached, 128u);
  auto map = map_file(dir / "f");
  auto reader = BandReader::open({{map, 0, data.size(), 2 << 20, "tensor 'w'"}},
                                 {.max_band_bytes = 2 << 20, .direct = direct()});
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::vector<BandSource> sources;
  EXPECT_EQ(take_all(**reader, 0, &sources), data);
  EXPECT_EQ(sources, std::vector<BandSource>(2, BandSource::kBuffer));
  EXPECT_EQ(resident_pages(dir / "f", 1024 * 1024, 1024 * 1024 + 512 * 1024), 128u)
      << "pages another reader had cached stay";
  EXPECT_EQ(resident_pages(dir / "f", 0, data.size()), cached) << "and only those";
}

TEST_P(ColdReads, BandsCoverTheExtentsExactlyInOrderAcrossFilesAndSkips) {
  TempDir dir;
  const std::string a = pattern(2 * 1024 * 1024 + 5, 4), b = pattern(3 * 1024 * 1024 + 11, 5);
  testing::write_bytes(dir / "a", a);
  testing::write_bytes(dir / "b", b);
  const bool cold = evict(dir / "a");  // a is cold where the file system allows; b stays cached
  auto ma = map_file(dir / "a");
  auto mb = map_file(dir / "b");
  std::vector<ReadExtent> extents = {
      {ma, 3, 1000000, 300000, "tensor 'a0'"},      // 0: bands of 300000, the last 100000
      {mb, 0, 2000000, 1 << 20, "tensor 'b0'"},     // 1: skipped entirely
      {ma, 1000003, 0, 4096, "tensor 'empty'"},     // 2: nothing to read
      {ma, 1000003, 1000000, 65536, "tensor 'a1'"}, // 3: left after its first band
      {mb, 2000000, b.size() - 2000000, 262144, "tensor 'b1'"},  // 4
      {ma, 0, a.size(), a.size(), "tensor 'a'"},    // 5: one band, the whole file
  };
  auto reader = BandReader::open(extents, {.max_band_bytes = 1 << 20, .chunk_bytes = 64 * 1024, .threads = 2,
                                           .direct = direct()});
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::vector<BandSource> sources;
  EXPECT_EQ(take_all(**reader, 0, &sources), a.substr(3, 1000000));
  EXPECT_EQ(sources.size(), 4u);
  if (cold) {
    EXPECT_EQ(sources, std::vector<BandSource>(4, BandSource::kBuffer));
  }
  EXPECT_EQ(take_all(**reader, 2), "");
  auto first = (*reader)->next(3);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->offset, 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*first)->bytes.data()), (*first)->bytes.size()),
            a.substr(1000003, 65536));
  sources.clear();
  EXPECT_EQ(take_all(**reader, 4, &sources), b.substr(2000000));
  EXPECT_EQ(sources, std::vector<BandSource>(5, BandSource::kMapping)) << "b is cached";
  EXPECT_EQ(take_all(**reader, 5), a) << "a band larger than a slot comes from the mapping";
  auto back = (*reader)->next(1);
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument) << "extents are read in order";
}

TEST_P(ColdReads, ATruncatedFileIsAnErrorNamingTheFileTheTensorAndTheOffset) {
  TempDir dir;
  const std::string data = pattern(2 * 1024 * 1024, 6);
  testing::write_bytes(dir / "f", data);
  auto map = map_file(dir / "f");
  fs::resize_file(dir / "f", 1024 * 1024 + 10);  // after it was mapped: its tail leaves the page cache
  auto reader = BandReader::open({{map, 0, data.size(), 512 * 1024, "tensor 'w'"}}, {.direct = direct()});
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  for (int i = 0; i < 2; ++i) {  // the bytes still in the file
    auto band = (*reader)->next(0);
    ASSERT_TRUE(band.ok()) << band.status().to_string();
    ASSERT_TRUE(band->has_value());
  }
  auto band = (*reader)->next(0);
  ASSERT_FALSE(band.ok());
  const std::string message = band.status().to_string();
  EXPECT_EQ(band.status().code(), StatusCode::kIoError) << message;
  EXPECT_NE(message.find((dir / "f").string()), std::string::npos) << message;
  EXPECT_NE(message.find("tensor 'w'"), std::string::npos) << message;
  EXPECT_NE(message.find("offset 1048586"), std::string::npos) << message;
}

TEST_P(ColdReads, BuffersStayWithinTheirBoundWhileReadsRunAhead) {
  TempDir dir;
  const std::string data = pattern(4 * 1024 * 1024, 7);
  testing::write_bytes(dir / "f", data);
  if (!evict(dir / "f")) GTEST_SKIP() << "the file system of " << dir.path() << " keeps files cached";
  auto map = map_file(dir / "f");
  // Bands of 48 KiB in many extents: the ring (2 * (64 KiB + 2 pages)) holds the band in use and
  // reads ahead into the rest, across extents.
  std::vector<ReadExtent> extents;
  for (uint64_t at = 0; at < data.size(); at += 512 * 1024) extents.push_back({map, at, 512 * 1024, 48 * 1024, "t"});
  const BandReaderOptions options{.max_band_bytes = 64 * 1024, .chunk_bytes = 16 * 1024, .threads = 2, .direct = direct()};
  auto reader = BandReader::open(extents, options);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  std::string got;
  for (size_t e = 0; e < extents.size(); ++e) got += take_all(**reader, e);
  EXPECT_EQ(got, data);
  const BandReaderStats stats = (*reader)->stats();
  EXPECT_EQ(stats.ring_bytes, 2 * (options.max_band_bytes + 2 * kPage));
  EXPECT_LE(stats.peak_ring_bytes_used, stats.ring_bytes);
  EXPECT_GE(stats.peak_ring_bytes_used, 2 * 48 * 1024) << "a band beyond the one in use was in flight";
  EXPECT_EQ(stats.bytes_read, data.size());
}

TEST(BandReader, TileStatisticsReadColdEqualThoseReadThroughTheMapping) {
  TempDir dir;
  std::vector<float> values(1536 * 1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7919) % 1009) * 0.01f - 5.0f;
  const auto bytes = *encode_from_f32(DType::kBF16, values);
  const safetensors::TensorToWrite tensors[] = {{"w", DType::kBF16, {1536, 1024}, bytes},
                                                {"v", DType::kBF16, {1024, 1536}, bytes}};
  ASSERT_TRUE(safetensors::write_file(dir / "m.safetensors", tensors, {}).ok());
  auto ckpt = open_checkpoint(dir / "m.safetensors");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  auto session = engine::ComputeSession::open(engine::SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  compute::Scheduler& scheduler = (*session)->scheduler();
  const TensorInfo& w = *(*ckpt)->find("w");
  const TensorInfo& v = *(*ckpt)->find("v");

  warm(dir / "m.safetensors");
  auto mapped_w = engine::tensor_tile_stats(scheduler, **ckpt, w, 256);
  auto mapped_v = engine::tensor_tile_stats(scheduler, **ckpt, v, 256);
  ASSERT_TRUE(mapped_w.ok() && mapped_v.ok());
  if (!evict(dir / "m.safetensors")) GTEST_SKIP() << "the file system of " << dir.path() << " keeps files cached";
  // Both tensors through one reader, as the index builder reads them.
  auto ew = engine::tile_stats_extent(**ckpt, w, 256);
  auto ev = engine::tile_stats_extent(**ckpt, v, 256);
  ASSERT_TRUE(ew.ok() && ew->has_value() && ev.ok() && ev->has_value());
  auto reader = BandReader::open({**ew, **ev});
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  auto read_w = engine::tensor_tile_stats(scheduler, **ckpt, w, 256, nullptr, 0, {}, {reader->get(), 0});
  auto read_v = engine::tensor_tile_stats(scheduler, **ckpt, v, 256, nullptr, 0, {}, {reader->get(), 1});
  ASSERT_TRUE(read_w.ok()) << read_w.status().to_string();
  ASSERT_TRUE(read_v.ok()) << read_v.status().to_string();
  EXPECT_EQ((*reader)->stats().bands_mapped, 0u);
  EXPECT_EQ((*reader)->stats().bytes_read, 2 * bytes.size());
  ASSERT_EQ(mapped_w->tiles.size(), read_w->tiles.size());
  EXPECT_EQ(std::memcmp(mapped_w->tiles.data(), read_w->tiles.data(), read_w->tiles.size() * sizeof(TM_TileStats)), 0);
  ASSERT_EQ(mapped_v->tiles.size(), read_v->tiles.size());
  EXPECT_EQ(std::memcmp(mapped_v->tiles.data(), read_v->tiles.data(), read_v->tiles.size() * sizeof(TM_TileStats)), 0);
}

}  // namespace
}  // namespace tensormorph
