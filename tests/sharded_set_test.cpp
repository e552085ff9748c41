// Per-rank torch.save archives of ShardedTensors (tests/fixtures/sharded, written by torch's own
// ShardedTensor API in tests/fixtures/make_sharded_fixtures.py, as FSDP's local and sharded state
// dicts are): a directory of them opens as one checkpoint whose tensors equal the full tensors the
// fixture sharded, bit for bit; one rank's archive alone lists its shards by the part they hold.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

fs::path fixture(std::string_view name) { return fs::path(TM_SOURCE_DIR) / "tests/fixtures/sharded" / name; }

std::string fact(const Checkpoint& ckpt, std::string_view key) {
  for (const FormatFact& f : ckpt.facts()) {
    if (f.key == key) return f.value.dump();
  }
  return "";
}

/// Whether a note holds `part`; the notes are printed when not.
bool has_note(const Checkpoint& ckpt, std::string_view part) {
  std::string all;
  for (const std::string& note : ckpt.notes()) {
    if (note.find(part) != std::string::npos) return true;
    all += note + "\n";
  }
  ADD_FAILURE() << "no note holds \"" << part << "\"; the notes:\n" << all;
  return false;
}

TEST(ShardedSet, FsdpLocalFlatParameterIsWholeFromTheRanksShards) {
  auto opened = open_checkpoint(fixture("fsdp_local"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  EXPECT_EQ(ckpt.format(), CheckpointFormat::kPyTorchSharded);
  EXPECT_EQ(ckpt.tensors().size(), 2u);  // the flat parameter, and the buffer once
  testing::expect_tensors_as_listed(ckpt, fixture("fsdp_local.expected.json"));
  const TensorInfo* flat = ckpt.find("_fsdp_wrapped_module._flat_param");
  ASSERT_NE(flat, nullptr);
  ASSERT_EQ(flat->chunks.size(), 2u);
  EXPECT_EQ(flat->chunks[1].start, (std::vector<uint64_t>{12}));
  EXPECT_EQ(flat->chunks[1].sizes, (std::vector<uint64_t>{11}));  // the last rank's padding is not stored
  EXPECT_EQ(flat->chunks[1].file, 1u);
  EXPECT_EQ(fact(ckpt, "pytorch_sharded.archives"), "2");
  EXPECT_TRUE(has_note(ckpt, "1 copy of a tensor that is not sharded"));
}

TEST(ShardedSet, FsdpShardedParametersKeepTheirShapesAndDTypes) {
  auto opened = open_checkpoint(fixture("fsdp_sharded"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ((*opened)->tensors().size(), 3u);
  testing::expect_tensors_as_listed(**opened, fixture("fsdp_sharded.expected.json"));
  EXPECT_EQ((*opened)->find("embed.weight")->chunks.size(), 3u);
  // Every command sees the whole tensor: stats over the directory (a copy: the index is written
  // beside the first archive) count all 20 weights.
  testing::TempDir temp;
  fs::copy(fixture("fsdp_sharded"), temp / "set", fs::copy_options::recursive);
  const testing::CliResult stats = testing::run_cli({"stats", (temp / "set").string(), "--json"});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_NE(stats.out.find("\"layer.weight\""), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("\"count\": 20"), std::string::npos) << stats.out;
}

TEST(ShardedSet, OneRanksArchiveAloneListsItsShardsByThePartTheyHold) {
  auto opened = open_checkpoint(fixture("fsdp_sharded/rank1.pt"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ((*opened)->format(), CheckpointFormat::kPyTorch);
  const TensorInfo* part = (*opened)->find("layer.weight[2:4, 0:4]");
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(part->shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_NE((*opened)->find("embed.weight[2:4, 0:3]"), nullptr);
  EXPECT_TRUE(has_note(**opened, "'layer.weight' is a ShardedTensor [5, 4] of 3 shards, 1 of them here"));
}

TEST(ShardedSet, AMissingRanksArchiveIsNamedNotGuessedAround) {
  testing::TempDir temp;
  const fs::path set = temp / "fsdp_sharded";
  fs::copy(fixture("fsdp_sharded"), set, fs::copy_options::recursive);
  fs::remove(set / "rank2.pt");
  auto opened = open_checkpoint(set);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("ShardedTensor 'layer.weight' [5, 4] has 3 shards, but the 2 archives here hold 2 of them: "
                                           "a rank's file is missing"),
            std::string::npos)
      << opened.status().to_string();
}

TEST(ShardedSet, ArchivesOfDifferentTensorsAreRefusedNamingBoth) {
  testing::TempDir temp;
  const fs::path set = temp / "mixed";
  fs::create_directory(set);
  fs::copy_file(fixture("fsdp_local/rank0.pt"), set / "rank0.pt");
  fs::copy_file(fixture("fsdp_sharded/rank1.pt"), set / "rank1.pt");
  auto opened = open_checkpoint(set);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("has 2 shards, but the 2 archives here hold 1 of them"), std::string::npos)
      << opened.status().to_string();
}

}  // namespace
}  // namespace tensormorph
