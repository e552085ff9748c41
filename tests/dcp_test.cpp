// PyTorch Distributed Checkpoint directories (../shared/testdata/dcp, written by torch 2.11): the
// logical tensors read from `.metadata` and assembled from their chunks equal the consolidated
// safetensors twins bit for bit; damaged directories fail with messages naming file and tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/compute_session.h"
#include "engine/matrix_shape.h"
#include "engine/tensor_ops.h"
#include "formats/dcp/dcp.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

fs::path dcp_data(std::string_view name) { return testing::testdata_dir() / "dcp" / name; }

/// A writable copy of one of the shared DCP directories.
fs::path copy_of(const testing::TempDir& temp, std::string_view name) {
  const fs::path to = temp / name;
  fs::copy(dcp_data(name), to);
  for (const auto& entry : fs::directory_iterator(to)) {
    fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write);
  }
  return to;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Every logical tensor of `directory` equals the twin's tensor of the same name (the one-process
/// set's keys carry the outer state-dict key "model." twice; the twin has the inner names).
void expect_equal_to_twin(std::string_view directory, const std::map<std::string, size_t>& chunks_per_tensor) {
  auto opened = open_checkpoint(dcp_data(directory));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& checkpoint = **opened;
  EXPECT_EQ(checkpoint.format(), CheckpointFormat::kPyTorchDcp);
  auto twin = safetensors::open_file(dcp_data(std::string(directory) + ".consolidated.safetensors"));
  ASSERT_TRUE(twin.ok()) << twin.status().to_string();
  ASSERT_EQ(checkpoint.tensors().size(), (*twin)->tensors().size());
  for (const TensorInfo& tensor : checkpoint.tensors()) {
    SCOPED_TRACE(tensor.name);
    std::string twin_name = tensor.name;
    if (twin_name.starts_with("model.model.")) twin_name.erase(0, std::strlen("model."));
    const TensorInfo* expected = (*twin)->find(twin_name);
    ASSERT_NE(expected, nullptr);
    EXPECT_EQ(tensor.dtype, expected->dtype);
    EXPECT_EQ(tensor.shape, expected->shape);
    ASSERT_TRUE(chunks_per_tensor.contains(tensor.name));
    // One chunk: mapped in place (no chunk list); several: listed, gathered on first read.
    const size_t chunks = chunks_per_tensor.at(tensor.name);
    EXPECT_EQ(tensor.chunks.size(), chunks == 1 ? 0 : chunks);
    auto assembled = checkpoint.tensor_bytes(tensor);
    ASSERT_TRUE(assembled.ok()) << assembled.status().to_string();
    auto bytes = (*twin)->tensor_bytes(*expected);
    ASSERT_TRUE(bytes.ok());
    ASSERT_EQ(assembled->size(), bytes->size());
    EXPECT_EQ(std::memcmp(assembled->data(), bytes->data(), bytes->size()), 0);
    auto decoded = checkpoint.decode_f32(tensor);
    auto twin_decoded = (*twin)->decode_f32(*expected);
    ASSERT_TRUE(decoded.ok() && twin_decoded.ok());
    EXPECT_EQ(std::memcmp(decoded->data(), twin_decoded->data(), decoded->size() * sizeof(float)), 0);
  }
}

TEST(Dcp, OneProcessCheckpointEqualsItsConsolidatedTwin) {
  expect_equal_to_twin("dcp_1rank", {{"model.model.embed.weight", 1},
                                     {"model.model.layers.0.attn.q.weight", 1},
                                     {"model.model.layers.0.mlp.up.weight", 1},
                                     {"model.model.layers.0.norm.weight", 1},
                                     {"step", 1}});
}

TEST(Dcp, TwoProcessShardsOnEitherDimensionAssembleToTheirConsolidatedTwin) {
  // embed and mlp.up are sharded on dim 0, attn.q on dim 1; norm is replicated (stored once).
  expect_equal_to_twin("dcp_2rank", {{"model.embed.weight", 2},
                                     {"model.layers.0.attn.q.weight", 2},
                                     {"model.layers.0.mlp.up.weight", 2},
                                     {"model.layers.0.norm.weight", 1}});
  auto opened = dcp::open_directory(dcp_data("dcp_2rank"));
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ((*opened)->files().size(), 2u);
  EXPECT_TRUE(dcp::is_dcp_directory(dcp_data("dcp_2rank")));
  EXPECT_FALSE(dcp::is_dcp_directory(testing::testdata_dir() / "dcp"));
}

TEST(Dcp, RowBandsOfATensorShardedOnDimZeroAreReadFromItsChunksInPlace) {
  auto opened = open_checkpoint(dcp_data("dcp_2rank"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& checkpoint = **opened;
  auto twin = safetensors::open_file(dcp_data("dcp_2rank.consolidated.safetensors"));
  ASSERT_TRUE(twin.ok());
  for (const char* name : {"model.embed.weight", "model.layers.0.mlp.up.weight", "model.layers.0.attn.q.weight"}) {
    SCOPED_TRACE(name);
    const TensorInfo& t = *checkpoint.find(name);
    ASSERT_EQ(t.chunks.size(), 2u);
    const bool row_bands = t.chunks[0].sizes[1] == t.shape[1];  // attn.q is sharded on dim 1
    const uint64_t rows = engine::as_matrix(t).rows;
    // Where the two row bands meet (or, for column bands, the middle row).
    const uint64_t boundary = t.chunks[0].start[0] == 0 ? t.chunks[0].sizes[0] : t.chunks[0].start[0];
    const uint64_t half = row_bands ? boundary : rows / 2;
    auto expected = (*twin)->tensor_bytes(*(*twin)->find(name));
    ASSERT_TRUE(expected.ok());
    const uint64_t row_bytes = expected->size() / rows;
    // Inside one chunk: a view of that chunk's file; across the two: a copy of just those rows.
    for (auto [begin, end] : {std::pair<uint64_t, uint64_t>{0, 1}, {half, rows}, {half - 1, half + 1}}) {
      auto band = engine::matrix_rows(checkpoint, t, begin, end);
      ASSERT_TRUE(band.ok()) << band.status().to_string();
      ASSERT_EQ(band->bytes.size(), (end - begin) * row_bytes);
      EXPECT_EQ(std::memcmp(band->bytes.data(), expected->data() + begin * row_bytes, band->bytes.size()), 0);
      const bool one_chunk = end <= half || begin >= half;
      auto first_file = checkpoint.mapped(t.chunks[0].file), second_file = checkpoint.mapped(t.chunks[1].file);
      ASSERT_TRUE(first_file.ok() && second_file.ok());
      if (!row_bands) {  // column bands: the tensor is gathered, and the band is a view of that
        EXPECT_NE(band->keep.get(), first_file->get());
        EXPECT_NE(band->keep.get(), second_file->get());
      } else if (one_chunk) {
        EXPECT_TRUE(band->owned.empty());
        const bool in_first = t.chunks[0].start[0] == 0 ? end <= half : begin >= half;
        EXPECT_EQ(band->keep.get(), (in_first ? first_file : second_file)->get());
      } else {
        EXPECT_FALSE(band->owned.empty());
      }
    }
  }
}

TEST(Dcp, TileStatisticsReadEachBandFromTheChunksAndEqualTheTwins) {
  auto opened = open_checkpoint(dcp_data("dcp_2rank"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& checkpoint = **opened;
  auto twin = safetensors::open_file(dcp_data("dcp_2rank.consolidated.safetensors"));
  ASSERT_TRUE(twin.ok());
  auto session = engine::ComputeSession::open(engine::SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  for (const char* name : {"model.embed.weight", "model.layers.0.mlp.up.weight", "model.layers.0.attn.q.weight"}) {
    SCOPED_TRACE(name);
    const TensorInfo& t = *checkpoint.find(name);
    ASSERT_EQ(t.chunks.size(), 2u);
    // No one extent: planning one would gather the whole tensor before its turn (an index plans
    // every tensor's extent up front, so every sharded tensor would be held at once).
    auto extent = engine::tile_stats_extent(checkpoint, t, 8);
    ASSERT_TRUE(extent.ok()) << extent.status().to_string();
    EXPECT_FALSE(extent->has_value());
    auto sharded = engine::tensor_tile_stats((*session)->scheduler(), checkpoint, t, 8);
    auto whole = engine::tensor_tile_stats((*session)->scheduler(), **twin, *(*twin)->find(name), 8);
    ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    ASSERT_EQ(sharded->tiles.size(), whole->tiles.size());
    EXPECT_EQ(std::memcmp(sharded->tiles.data(), whole->tiles.data(), whole->tiles.size() * sizeof(TM_TileStats)), 0);
  }
}

TEST(Dcp, AGatheredTensorLastsAsLongAsItsReaders) {
  auto opened = open_checkpoint(dcp_data("dcp_2rank"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& checkpoint = **opened;
  const TensorInfo* sharded = checkpoint.find("model.embed.weight");
  ASSERT_NE(sharded, nullptr);
  ASSERT_EQ(sharded->chunks.size(), 2u);
  auto first = checkpoint.storage(*sharded);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = checkpoint.storage(*sharded);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->map.get(), second->map.get());  // gathered once while in use
  std::weak_ptr<const MappedFile> gathered = first->map;
  first = Status::Internal("dropped");
  second = Status::Internal("dropped");
  EXPECT_FALSE(gathered.expired());  // the last two gathered are kept for a while
  for (const char* other : {"model.layers.0.attn.q.weight", "model.layers.0.mlp.up.weight"}) {
    ASSERT_TRUE(checkpoint.storage(*checkpoint.find(other)).ok());
  }
  EXPECT_TRUE(gathered.expired());  // and let go once two more were gathered
  // A span has no owner, so tensor_bytes keeps the gathered tensor for the checkpoint's life.
  ASSERT_TRUE(checkpoint.tensor_bytes(*sharded).ok());
  auto again = checkpoint.storage(*sharded);
  ASSERT_TRUE(again.ok());
  gathered = again->map;
  again = Status::Internal("dropped");
  for (const char* other : {"model.layers.0.attn.q.weight", "model.layers.0.mlp.up.weight"}) {
    ASSERT_TRUE(checkpoint.storage(*checkpoint.find(other)).ok());
  }
  EXPECT_FALSE(gathered.expired());
}

TEST(Dcp, EveryCommandSeesTheWholeTensors) {
  // stats (through the index), export and info read a sharded checkpoint as its consolidated twin.
  testing::TempDir temp;
  const fs::path dir = copy_of(temp, "dcp_2rank");
  const fs::path twin = temp / "twin.safetensors";
  fs::copy(dcp_data("dcp_2rank.consolidated.safetensors"), twin);
  auto stats = [](const fs::path& path) {
    const testing::CliResult r = testing::run_cli({"stats", "--json", path.string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, nlohmann::json> by_name;
    const nlohmann::json parsed = nlohmann::json::parse(r.out);
    for (const auto& t : parsed.at("tensors")) by_name[t.at("name").get<std::string>()] = t;
    return by_name;
  };
  const auto sharded = stats(dir);
  const auto whole = stats(twin);
  ASSERT_EQ(sharded.size(), 4u);
  for (const auto& [name, t] : sharded) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(whole.contains(name));
    for (const char* key : {"count", "mean", "std", "min", "max", "absmax", "zeros"}) EXPECT_EQ(t.at(key), whole.at(name).at(key)) << key;
  }
  for (const char* name : {"model.layers.0.attn.q.weight", "model.embed.weight"}) {
    const testing::CliResult a = testing::run_cli({"export", dir.string(), "-t", name, "-o", (temp / "a.npy").string()});
    const testing::CliResult b = testing::run_cli({"export", twin.string(), "-t", name, "-o", (temp / "b.npy").string()});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(read_all(temp / "a.npy"), read_all(temp / "b.npy")) << name;
  }
  const testing::CliResult info = testing::run_cli({"info", dir.string()});
  EXPECT_NE(info.out.find("chunk at [0, 20] of [64, 20]: __1_0.distcp"), std::string::npos) << info.out;
}

TEST(Dcp, DamagedDirectoriesFailNamingTheFileAndTheTensor) {
  testing::TempDir temp;
  {
    const fs::path dir = copy_of(temp, "dcp_2rank");
    fs::remove(dir / "__1_0.distcp");
    auto layout = open_checkpoint(dir);
    ASSERT_FALSE(layout.ok());
    EXPECT_NE(layout.status().message().find("__1_0.distcp"), std::string::npos) << layout.status().to_string();
    EXPECT_NE(layout.status().message().find("model."), std::string::npos) << layout.status().to_string();
  }
  {
    const fs::path dir = temp / "truncated-data";
    fs::create_directory(dir);
    for (const auto& entry : fs::directory_iterator(dcp_data("dcp_2rank"))) fs::copy(entry.path(), dir / entry.path().filename());
    for (const auto& entry : fs::directory_iterator(dir)) fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write);
    const std::string data = read_all(dir / "__0_0.distcp");
    write_all(dir / "__0_0.distcp", data.substr(0, data.size() / 2));
    auto layout = open_checkpoint(dir);
    ASSERT_FALSE(layout.ok());
    EXPECT_NE(layout.status().message().find("__0_0.distcp"), std::string::npos) << layout.status().to_string();
    EXPECT_NE(layout.status().message().find("tensor '"), std::string::npos) << layout.status().to_string();
  }
  {
    const fs::path dir = temp / "truncated-metadata";
    fs::create_directory(dir);
    const std::string metadata = read_all(dcp_data("dcp_1rank") / ".metadata");
    write_all(dir / ".metadata", metadata.substr(0, metadata.size() - 40));
    auto layout = open_checkpoint(dir);
    ASSERT_FALSE(layout.ok());
    EXPECT_NE(layout.status().message().find(".metadata"), std::string::npos) << layout.status().to_string();
  }
  {
    // A storage record that points out of the directory (same length, so the pickle stays valid).
    const fs::path dir = temp / "escaping";
    fs::create_directory(dir);
    std::string metadata = read_all(dcp_data("dcp_1rank") / ".metadata");
    const size_t at = metadata.find("__0_0.distcp");
    ASSERT_NE(at, std::string::npos);
    metadata.replace(at, 12, "../_0.distcp");
    write_all(dir / ".metadata", metadata);
    auto layout = open_checkpoint(dir);
    ASSERT_FALSE(layout.ok());
    EXPECT_NE(layout.status().message().find("not a file name inside the checkpoint directory"), std::string::npos)
        << layout.status().to_string();
  }
}

}  // namespace
}  // namespace tensormorph
