// The CPU backend's file reads (src/backends/cpu/cpu_file_reads.h): items that copy their rows with
// pread give the bits of items that read the mapping, the chooser follows the timings it is given,
// and a file that shrinks after it was mapped is an error naming the offset, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/cpu_file_reads.h"
#include "backends/cpu/cpu_tile_stats.h"
#include "compute/constraints.h"
#include "core/quantize/quantize.h"
#include "formats/safetensors/safetensors.h"
#include "engine/compute_session.h"
#include "compute/ops/reference.h"
#include "engine/tensor_ops.h"
#include "tensormorph/mapped_file.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using cpu::FileReads;
using cpu::ReadPath;
using cpu::ReadPathChooser;

constexpr uint64_t kPrefix = 40;  // bytes before the matrix in its file: not a multiple of 64

/// A matrix stored in a file at offset kPrefix, mapped.
struct FileMatrix {
  testing::TempDir dir;
  std::filesystem::path path;
  std::shared_ptr<const MappedFile> map;
  ops::MatrixView matrix;

  FileRegion region() const { return map->region(kPrefix); }
};

/// Random K-quant blocks (no encoder here) with weight-like half scales: Q4_K's d and dmin (dmin
/// a few times d, as ggml's quantizer makes them, so the exact shortcut runs), Q6_K's d.
Result<std::vector<std::byte>> k_quant_blocks(DType dtype, uint64_t elems, std::mt19937_64& rng) {
  const DTypeInfo& info = dtype_info(dtype);
  std::vector<std::byte> bytes(elems / info.block_elems * info.block_bytes);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  for (size_t block = 0; block < bytes.size(); block += info.block_bytes) {
    const uint16_t d = static_cast<uint16_t>(0x1800 + rng() % 0x400), dmin = static_cast<uint16_t>(d + 0x800);
    if (dtype == DType::kQ4_K) {
      std::memcpy(&bytes[block], &d, 2);
      std::memcpy(&bytes[block + 2], &dmin, 2);
    } else {
      std::memcpy(&bytes[block + info.block_bytes - 2], &d, 2);
    }
  }
  return bytes;
}

/// Normal values with exact zeros, and (when `non_finite`) a NaN and infinities in the first rows.
std::unique_ptr<FileMatrix> make_file_matrix(DType dtype, uint64_t rows, uint64_t cols, bool non_finite) {
  std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 7919 + rows);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(rows * cols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = i % 97 == 0 ? 0.0f : normal(rng);
  if (non_finite) {
    values[3] = std::numeric_limits<float>::quiet_NaN();
    values[cols + 5] = std::numeric_limits<float>::infinity();
    values[2 * cols + 7] = -std::numeric_limits<float>::infinity();
  }
  auto encoded = dtype == DType::kQ4_K || dtype == DType::kQ6_K ? k_quant_blocks(dtype, rows * cols, rng)
                                                                 : encode_from_f32(dtype, values);
  EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
  auto m = std::make_unique<FileMatrix>();
  m->path = m->dir / "matrix.bin";
  std::string bytes(kPrefix, 'h');
  bytes.append(reinterpret_cast<const char*>(encoded->data()), encoded->size());
  bytes.append(24, 't');
  testing::write_bytes(m->path, bytes);
  auto map = MappedFile::open(m->path);
  EXPECT_TRUE(map.ok()) << map.status().to_string();
  m->map = *map;
  m->matrix = {dtype, m->map->bytes().subspan(kPrefix, encoded->size()), rows, cols};
  return m;
}

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }
bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

::testing::AssertionResult same_stats(const std::vector<TM_TileStats>& expected, const std::vector<TM_TileStats>& actual) {
  if (expected.size() != actual.size()) return ::testing::AssertionFailure() << "tile counts differ";
  for (size_t i = 0; i < expected.size(); ++i) {
    const TM_TileStats& e = expected[i];
    const TM_TileStats& a = actual[i];
    if (e.count != a.count || e.nan != a.nan || e.pos_inf != a.pos_inf || e.neg_inf != a.neg_inf || e.zeros != a.zeros || !same_bits(e.min, a.min) ||
        !same_bits(e.max, a.max) || !same_bits(e.absmax, a.absmax) || !same_bits(e.sum, a.sum) ||
        !same_bits(e.sum_sq, a.sum_sq)) {
      return ::testing::AssertionFailure() << "tile " << i << " differs: sum " << e.sum << " vs " << a.sum;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(ReadPathChooser, TheExplorerAlternatesUntilWarmThenEveryoneTakesTheChosenPath) {
  ReadPathChooser chooser;
  EXPECT_EQ(chooser.preferred(DType::kBF16), ReadPath::kMapping);  // nothing measured yet
  // The explorer's first items settle on the mapping, untimed.
  for (uint64_t i = 0; i < ReadPathChooser::kSettle; ++i) {
    const ReadPathChooser::Pick pick = chooser.next(DType::kBF16, true);
    EXPECT_EQ(pick.path, ReadPath::kMapping) << "item " << i;
    EXPECT_FALSE(pick.timed) << "item " << i;
  }
  for (uint32_t i = 0; i < 2 * ReadPathChooser::kWarmup; ++i) {
    const ReadPathChooser::Pick other_thread = chooser.next(DType::kBF16, false);
    EXPECT_EQ(other_thread.path, ReadPath::kMapping) << "item " << i;  // others wait, untimed
    EXPECT_FALSE(other_thread.timed);
    const ReadPathChooser::Pick pick = chooser.next(DType::kBF16, true);
    EXPECT_EQ(pick.path, i % 2 == 0 ? ReadPath::kMapping : ReadPath::kFile) << "item " << i;
    EXPECT_TRUE(pick.timed);
    chooser.record(DType::kBF16, pick.path, 1 << 20, pick.path == ReadPath::kFile ? 1e5 : 3e5);
  }
  EXPECT_EQ(chooser.preferred(DType::kBF16), ReadPath::kFile);
  // The explorer checks the mapping again after kFirstRetry items, then after gaps that double (no
  // check is recorded here, so none starts a burst); the other threads never leave the choice.
  int others_mapping = 0;
  std::vector<uint64_t> checks;
  for (uint64_t i = 0; i < 500; ++i) {
    others_mapping += chooser.next(DType::kBF16, false).path == ReadPath::kMapping;
    if (chooser.next(DType::kBF16, true).path == ReadPath::kMapping) checks.push_back(i);
  }
  EXPECT_EQ(others_mapping, 0);
  EXPECT_EQ(checks, (std::vector<uint64_t>{32, 96, 224, 480}));
  // Each storage type has its own timings: F32 has none and starts over.
  EXPECT_EQ(chooser.preferred(DType::kF32), ReadPath::kMapping);
  for (uint64_t i = 0; i < ReadPathChooser::kSettle; ++i) EXPECT_FALSE(chooser.next(DType::kF32, true).timed);
  EXPECT_EQ(chooser.next(DType::kF32, true).path, ReadPath::kMapping);
  EXPECT_EQ(chooser.next(DType::kF32, true).path, ReadPath::kFile);
}

TEST(ReadPathChooser, AFasterLookingCheckIsConfirmedOverAWholeWindowBeforeTheChoiceChanges) {
  ReadPathChooser chooser;
  double mapping_ns = 1e5, file_ns = 2e5;  // per 1 MiB item
  std::vector<ReadPath> taken;             // the explorer's items, in order
  const auto explore = [&](uint64_t items) {
    for (uint64_t i = 0; i < items; ++i) {
      const ReadPathChooser::Pick pick = chooser.next(DType::kF16, true);
      if (pick.timed) {
        chooser.record(DType::kF16, pick.path, 1 << 20, pick.path == ReadPath::kFile ? file_ns : mapping_ns);
      }
      taken.push_back(pick.path);
    }
  };
  const auto file_items = [&](size_t from) { return std::count(taken.begin() + from, taken.end(), ReadPath::kFile); };
  const size_t warm_at = ReadPathChooser::kSettle + 2 * ReadPathChooser::kWarmup;
  explore(warm_at + 200);
  EXPECT_EQ(chooser.preferred(DType::kF16), ReadPath::kMapping);
  EXPECT_EQ(file_items(warm_at), 2);  // the checks at 32 and 96: slower, no burst
  // pread becomes 4x faster. The next check (224 items after the choice) looks faster; the
  // explorer's next kWindow - 1 items confirm it, and then pread is chosen.
  file_ns = 0.25e5;
  const size_t check_at = warm_at + 224;
  explore(check_at - taken.size());
  EXPECT_EQ(file_items(warm_at), 2);
  EXPECT_EQ(chooser.preferred(DType::kF16), ReadPath::kMapping);
  explore(ReadPathChooser::kWindow);
  EXPECT_EQ(file_items(check_at), ReadPathChooser::kWindow);
  EXPECT_EQ(chooser.preferred(DType::kF16), ReadPath::kFile);
  // A new choice is checked again after kFirstRetry items (the check is slower: no burst).
  const size_t chosen_at = taken.size();
  explore(ReadPathChooser::kFirstRetry + 1);
  EXPECT_EQ(std::count(taken.begin() + chosen_at, taken.end(), ReadPath::kMapping), 1);
  EXPECT_EQ(taken.back(), ReadPath::kMapping);
  EXPECT_EQ(chooser.preferred(DType::kF16), ReadPath::kFile);
}

TEST(ReadPathChooser, PreadMustBeClearlyFasterToReplaceTheMapping) {
  ReadPathChooser chooser;
  // pread 20% faster: within the margin, the mapping stays.
  for (uint32_t i = 0; i < ReadPathChooser::kWarmup; ++i) {
    chooser.record(DType::kF32, ReadPath::kMapping, 1 << 20, 1.0e5);
    chooser.record(DType::kF32, ReadPath::kFile, 1 << 20, 0.8e5);
  }
  EXPECT_EQ(chooser.preferred(DType::kF32), ReadPath::kMapping);
  // Clearly faster (half the time, over the window): pread takes over.
  for (uint32_t i = 0; i < ReadPathChooser::kWindow; ++i) chooser.record(DType::kF32, ReadPath::kFile, 1 << 20, 0.5e5);
  EXPECT_EQ(chooser.preferred(DType::kF32), ReadPath::kFile);
  // One stalled mapping item is dropped from the estimate; it does not hand the choice back...
  chooser.record(DType::kF32, ReadPath::kMapping, 1 << 20, 1e7);
  EXPECT_EQ(chooser.preferred(DType::kF32), ReadPath::kFile);
  // ...but the mapping measuring faster does.
  for (uint32_t i = 0; i < ReadPathChooser::kWindow; ++i) chooser.record(DType::kF32, ReadPath::kMapping, 1 << 20, 0.45e5);
  EXPECT_EQ(chooser.preferred(DType::kF32), ReadPath::kMapping);
  // Empty items and timings that are not positive or not finite teach nothing.
  for (uint32_t i = 0; i < 2 * ReadPathChooser::kWindow; ++i) {
    chooser.record(DType::kF32, ReadPath::kFile, 0, 1.0);
    chooser.record(DType::kF32, ReadPath::kFile, 1 << 20, 0.0);
    chooser.record(DType::kF32, ReadPath::kFile, 1 << 20, std::nan(""));
    chooser.record(DType::kF32, ReadPath::kFile, 1 << 20, std::numeric_limits<double>::infinity());
  }
  EXPECT_EQ(chooser.preferred(DType::kF32), ReadPath::kMapping);
}

TEST(CpuFileReads, CopyFromFileReadsTheBytesOrNamesTheOffsetWhereTheFileEnds) {
  testing::TempDir dir;
  testing::write_bytes(dir / "f", "0123456789");
  auto map = MappedFile::open(dir / "f");
  ASSERT_TRUE(map.ok());
  std::byte out[4];
  ASSERT_TRUE(cpu::copy_from_file((*map)->region(0).descriptor, 3, out, 4).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out), 4), "3456");
  const Status short_read = cpu::copy_from_file((*map)->region(0).descriptor, 8, out, 4);
  EXPECT_EQ(short_read.code(), StatusCode::kIoError);
  EXPECT_NE(short_read.message().find("ends at offset 10"), std::string::npos) << short_read.to_string();
  EXPECT_EQ(cpu::copy_from_file(-1, 0, out, 4).code(), StatusCode::kIoError);
}

TEST(CpuFileReads, EveryReadPathGivesTheReferenceBits) {
  // Whole-width views copy their items' rows from the file; column slices read the mapping; measured
  // calls mix both while the chooser warms up; the item sizes cover items owning whole tiles and
  // items sharing a tile's rows, and the piece sizes copies of one row, of a few rows and of a
  // whole item.
  const uint64_t rows = 300, cols = 1024;
  struct Reads {
    FileReads mode;
    uint64_t piece_bytes;
  };
  const Reads reads_cases[] = {{FileReads::kNever, cpu::kFilePieceBytes},
                               {FileReads::kAlways, cpu::kFilePieceBytes},
                               {FileReads::kAlways, 1},
                               {FileReads::kAlways, 10000},
                               {FileReads::kMeasure, cpu::kFilePieceBytes},
                               {FileReads::kMeasure, 1}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const auto file = make_file_matrix(dtype, rows, cols, dtype == DType::kF32);
    for (uint32_t tile : {64u, 256u}) {
      for (const ops::ViewRange range : {ops::ViewRange{0, rows, 0, cols}, ops::ViewRange{7, rows, 0, cols},
                                         ops::ViewRange{0, rows, 256, cols}}) {
        std::vector<TM_TileStats> expected(ops::tile_grid(range, tile).count());
        ASSERT_TRUE(ops::tile_stats_reference(file->matrix, range, tile, expected).ok());
        for (const Reads reads : reads_cases) {
          for (uint64_t item_bytes : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 16}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " tile " + std::to_string(tile) + " rows from " +
                         std::to_string(range.row_begin) + " cols from " + std::to_string(range.col_begin) +
                         " reads " + std::to_string(static_cast<int>(reads.mode)) + " piece bytes " +
                         std::to_string(reads.piece_bytes) + " item bytes " + std::to_string(item_bytes));
            const cpu::TileStatsTuning tuning{item_bytes, reads.mode, 1, reads.piece_bytes};
            std::vector<TM_TileStats> out(expected.size());
            const Status status =
                cpu::tile_stats(file->matrix, range, tile, out, 2, cpu::Isa::kBaseline, tuning, file->region());
            ASSERT_TRUE(status.ok()) << status.to_string();
            EXPECT_TRUE(same_stats(expected, out));
            ASSERT_TRUE(cpu::tile_stats(file->matrix, range, tile, out, 2, cpu::best_isa(), tuning, file->region()).ok());
            EXPECT_TRUE(same_stats(expected, out));
          }
        }
      }
    }
  }
}

TEST(CpuFileReads, AMatrixWhoseFileShrankIsAnErrorNotACrash) {
  // With pread forced and every item eligible nothing touches the mapping past the new end of the
  // file (which would be SIGBUS); the short reads come back as an error naming the offset.
  const auto file = make_file_matrix(DType::kF32, 256, 1024, false);
  std::filesystem::resize_file(file->path, kPrefix + 1000);
  for (uint64_t item_bytes : {uint64_t{4096}, uint64_t{1} << 20}) {
    std::vector<TM_TileStats> out(ops::tile_grid({0, 256, 0, 1024}, 256).count());
    const Status status = cpu::tile_stats(file->matrix, {0, 256, 0, 1024}, 256, out, 2, cpu::Isa::kBaseline,
                                          {item_bytes, FileReads::kAlways, 1, 4096}, file->region());
    EXPECT_EQ(status.code(), StatusCode::kIoError) << status.to_string();
    EXPECT_NE(status.message().find("offset"), std::string::npos) << status.to_string();
  }
}

TEST(CpuFileReads, TheSchedulerHandsTheCheckpointsFileToTheCpuBackend) {
  // End to end: tensor_tile_stats passes the tensor's file region through the scheduler and the
  // plugin ABI (TM_TensorArg.host_file). With pread forced, a checkpoint truncated after it was
  // mapped fails with an I/O error naming the tensor, which only the file path can produce.
  testing::ScopedEnv options("TENSORMORPH_CPU_OPTIONS", "file_reads=pread");
  testing::TempDir dir;
  std::vector<float> values(512 * 1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 251) * 0.01f - 1.0f;
  const auto bytes = *encode_from_f32(DType::kF32, values);
  const safetensors::TensorToWrite tensors[] = {{"w", DType::kF32, {512, 1024}, bytes}};
  ASSERT_TRUE(safetensors::write_file(dir / "m.safetensors", tensors, {}).ok());
  auto ckpt = open_checkpoint(dir / "m.safetensors");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  engine::SessionOptions session_options;
  session_options.override_constraints = *compute::parse_constraints("only=cpu");
  auto session = engine::ComputeSession::open(session_options);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  const TensorInfo& w = *(*ckpt)->find("w");

  auto intact = engine::tensor_tile_stats((*session)->scheduler(), **ckpt, w, 256);
  ASSERT_TRUE(intact.ok()) << intact.status().to_string();
  std::vector<TM_TileStats> expected(intact->tiles.size());
  const ops::MatrixView view{DType::kF32, std::as_bytes(std::span(bytes)), 512, 1024};
  ASSERT_TRUE(ops::tile_stats_reference(view, {0, 512, 0, 1024}, 256, expected).ok());
  EXPECT_TRUE(same_stats(expected, intact->tiles));

  std::filesystem::resize_file(dir / "m.safetensors", w.offset + 4096);
  auto shrunk = engine::tensor_tile_stats((*session)->scheduler(), **ckpt, w, 256);
  ASSERT_FALSE(shrunk.ok());
  EXPECT_EQ(shrunk.status().code(), StatusCode::kIoError) << shrunk.status().to_string();
  EXPECT_NE(shrunk.status().to_string().find("tensor 'w'"), std::string::npos) << shrunk.status().to_string();
  EXPECT_NE(shrunk.status().to_string().find("offset"), std::string::npos) << shrunk.status().to_string();
}

}  // namespace
}  // namespace tensormorph
