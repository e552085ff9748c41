// DeepSpeed ZeRO checkpoints (tests/fixtures/deepspeed, written by
// tests/fixtures/make_deepspeed_fixtures.py in DeepSpeed's layout): every parameter cut from the
// ranks' flat fp32 partitions equals the full parameter the fixture partitioned, bit for bit; the
// model states' own tensors are listed beside them; damaged checkpoints fail naming what is wrong.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

fs::path fixture(std::string_view name) { return fs::path(TM_SOURCE_DIR) / "tests/fixtures/deepspeed" / name; }

/// The checkpoint lists exactly the tensors `expected_file` lists, each with its dtype, shape and bytes.
void expect_fixture_tensors(const Checkpoint& ckpt, std::string_view expected_file) {
  std::ifstream in(fixture(expected_file));
  EXPECT_EQ(ckpt.tensors().size(), nlohmann::json::parse(in).size());
  testing::expect_tensors_as_listed(ckpt, fixture(expected_file));
}

std::string fact(const Checkpoint& ckpt, std::string_view key) {
  for (const FormatFact& f : ckpt.facts()) {
    if (f.key == key && !f.file) return f.value.dump();
  }
  return "";
}

TEST(DeepSpeed, Zero2ParametersAreCutFromTheRanksPartitionsInParamShapesOrder) {
  auto opened = open_checkpoint(fixture("zero2"));  // through its `latest` file
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  EXPECT_EQ(ckpt.format(), CheckpointFormat::kDeepSpeed);
  ASSERT_EQ(ckpt.files().size(), 3u);  // model states, then rank 0 and rank 1
  EXPECT_EQ(ckpt.files()[2].path.filename(), "zero_pp_rank_1_mp_rank_00_optim_states.pt");
  expect_fixture_tensors(ckpt, "zero2.expected.json");
  EXPECT_EQ(fact(ckpt, "deepspeed.zero_stage"), "2");
  EXPECT_EQ(fact(ckpt, "deepspeed.world_size"), "2");
  EXPECT_EQ(fact(ckpt, "deepspeed.param_groups"), "2");
  EXPECT_EQ(fact(ckpt, "deepspeed.padding_elements"), "3");  // 27 -> 28 and 6 -> 8
  // embed.weight [5, 3] is elements [0, 15) of group 0, whose partitions hold 14 each: rows 0-3 and
  // the first two of row 4 on rank 0, the last element on rank 1.
  const TensorInfo* embed = ckpt.find("embed.weight");
  ASSERT_EQ(embed->chunks.size(), 3u);
  EXPECT_EQ(embed->chunks[0].sizes, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(embed->chunks[1].start, (std::vector<uint64_t>{4, 0}));
  EXPECT_EQ(embed->chunks[1].sizes, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(embed->chunks[2].start, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(embed->chunks[2].file, 2u);
  // layers.0.weight lies in rank 1's partition: mapped in place, right after embed's last element.
  const TensorInfo* weight = ckpt.find("layers.0.weight");
  EXPECT_TRUE(weight->chunks.empty());
  EXPECT_EQ(weight->file, 2u);
  EXPECT_EQ(weight->offset, embed->chunks[2].offset + 4);
  // The shared parameter is its source's tensor; the module's half-precision copies are not listed.
  EXPECT_EQ(ckpt.find("lm_head.weight")->chunks.size(), 3u);
  EXPECT_EQ(ckpt.find("frozen.weight")->dtype, DType::kF32);
  bool pieces_listed = false;
  for (const MetadataEntry& m : ckpt.metadata()) {
    if (m.key == "deepspeed.pieces.norm.bias") {
      pieces_listed = true;
      ASSERT_EQ(m.value.size(), 2u);
      EXPECT_EQ(m.value[0].get<std::string>().find("zero_pp_rank_0_mp_rank_00_optim_states.pt group 1 elements [3, 4) at byte "), 0u)
          << m.value;
      EXPECT_NE(m.value[1].get<std::string>().find("group 1 elements [0, 2) at byte "), std::string::npos) << m.value;
    }
  }
  EXPECT_TRUE(pieces_listed);
}

TEST(DeepSpeed, Zero3ParametersAreEachCutIntoOnePiecePerRank) {
  auto opened = open_checkpoint(fixture("zero3/global_step3"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  expect_fixture_tensors(ckpt, "zero3.expected.json");
  EXPECT_EQ(fact(ckpt, "deepspeed.zero_stage"), "3");
  EXPECT_EQ(fact(ckpt, "deepspeed.padding_elements"), "3");  // a, b and d pad one each
  EXPECT_EQ(ckpt.find("a.weight")->chunks.size(), 4u);  // [0, 5) and [5, 9) of [3, 3]: two blocks each
  EXPECT_TRUE(ckpt.find("d.scale")->chunks.empty());    // one element: rank 1 holds only padding
}

TEST(DeepSpeed, Zero3FrozenParametersAreCutFromEveryRanksModelStates) {
  auto opened = open_checkpoint(fixture("zero3/global_step3"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  // The two frozen float16 parameters are in zero3.expected.json (checked bytes and all above);
  // rank 1's model states join the files they are read from.
  ASSERT_EQ(ckpt.files().size(), 4u);
  EXPECT_EQ(ckpt.files()[3].path.filename(), "zero_pp_rank_1_mp_rank_00_model_states.pt");
  const TensorInfo* embed = ckpt.find("frozen.embed");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kF16);
  ASSERT_EQ(embed->chunks.size(), 4u);  // [0, 5) from rank 0, [5, 9) from rank 1: two blocks each
  EXPECT_EQ(embed->chunks[2].start, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(embed->chunks[2].file, 3u);
  const TensorInfo* gain = ckpt.find("frozen.gain");
  ASSERT_NE(gain, nullptr);
  EXPECT_TRUE(gain->chunks.empty());  // rank 0's part holds it whole: mapped in place
  EXPECT_EQ(gain->file, 0u);

  // A rank's model states missing, or its fragment of the wrong length: errors naming the file.
  testing::TempDir temp;
  const fs::path copy = temp / "zero3";
  fs::copy(fixture("zero3"), copy, fs::copy_options::recursive);
  const fs::path rank1 = copy / "global_step3" / "zero_pp_rank_1_mp_rank_00_model_states.pt";
  fs::rename(rank1, temp / "aside.pt");
  auto missing = open_checkpoint(copy / "global_step3");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("rank 1's model states (zero_pp_rank_1_mp_rank_00_model_states.pt) are missing"),
            std::string::npos)
      << missing.status().to_string();
  fs::copy_file(fixture("zero3/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt"), rank1);  // no fragments at all
  auto wrong = open_checkpoint(copy / "global_step3");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("zero_pp_rank_1_mp_rank_00_model_states.pt: frozen_param_fragments has no 'frozen.embed'"),
            std::string::npos)
      << wrong.status().to_string();
}

TEST(DeepSpeed, InfoListsEachParametersPiecesAndTheFlatLayout) {
  const testing::CliResult info = testing::run_cli({"info", fixture("zero2").string()});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("chunk at [4, 2] of [1, 1]: global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt"), std::string::npos)
      << info.out;
  EXPECT_NE(info.out.find("param group 0: 3 parameters, 27 elements in flat fp32 partitions of [14, 14] elements per rank, 1 padding"),
            std::string::npos)
      << info.out;
}

TEST(DeepSpeed, ModelParallelRanksAreJoinedByLayerRoleFromTheirDataParallelPartitions) {
  auto opened = open_checkpoint(fixture("tp2"));  // the tag directory itself
  ASSERT_FALSE(opened.ok());  // tp2 holds global_step7 and no `latest`
  opened = open_checkpoint(fixture("tp2/global_step7"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  ASSERT_EQ(ckpt.files().size(), 6u);  // per model-parallel rank: model states, then data-parallel ranks 0 and 1
  EXPECT_EQ(ckpt.files()[3].path.filename(), "mp_rank_01_model_states.pt");
  expect_fixture_tensors(ckpt, "tp2.expected.json");
  EXPECT_EQ(fact(ckpt, "deepspeed.model_parallel_size"), "2");
  EXPECT_EQ(fact(ckpt, "deepspeed.world_size"), "2");
  EXPECT_EQ(fact(ckpt, "deepspeed.tensors_joined"), "6");  // 5 weights of known role and the qkv bias
  EXPECT_EQ(fact(ckpt, "deepspeed.tensors_per_rank"), "2");
  // Each rank's SwiGLU part [gate rows; up rows] is 3 rows in its data-parallel rank 0 and 1 in
  // rank 1: the 3 rows are cut at the gate/up boundary, so each model-parallel rank gives 3 blocks.
  const TensorInfo* gated = ckpt.find("language_model.encoder.layers.0.mlp.dense_h_to_4h.weight");
  ASSERT_NE(gated, nullptr);
  ASSERT_EQ(gated->chunks.size(), 6u);
  EXPECT_EQ(gated->chunks[0].start, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(gated->chunks[0].sizes, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(gated->chunks[1].start, (std::vector<uint64_t>{4, 0}));  // its first up row, right after its 2 gate rows
  EXPECT_EQ(gated->chunks[1].offset, gated->chunks[0].offset + 6 * 4);
  EXPECT_EQ(gated->chunks[2].file, 2u);                               // the last up row, in data-parallel rank 1
  EXPECT_EQ(gated->chunks[5].start, (std::vector<uint64_t>{7, 0}));
  EXPECT_EQ(gated->chunks[5].file, 5u);
  bool noted = false;
  for (const std::string& note : ckpt.notes()) noted = noted || note.find("listed per rank (mp_rank_MM/<name>)") != std::string::npos;
  EXPECT_TRUE(noted);
  for (const MetadataEntry& m : ckpt.metadata()) EXPECT_TRUE(m.key.starts_with("deepspeed.pieces.mp_rank_0")) << m.key;

  // A rule joins what the names do not tell.
  OpenOptions options;
  options.tensor_parallel_rules = {"*.mystery.weight=0"};
  auto ruled = open_checkpoint(fixture("tp2/global_step7"), options);
  ASSERT_TRUE(ruled.ok()) << ruled.status().to_string();
  const TensorInfo* mystery = (*ruled)->find("language_model.encoder.layers.0.mlp.mystery.weight");
  ASSERT_NE(mystery, nullptr);
  EXPECT_EQ(mystery->shape, (std::vector<uint64_t>{6, 1}));
  EXPECT_EQ((*ruled)->find("mp_rank_00/language_model.encoder.layers.0.mlp.mystery.weight"), nullptr);
}

TEST(DeepSpeed, ModelStatesOfModelParallelRanksWithoutZeroAreJoined) {
  // latest_checkpointed_iteration.txt names 80000/, which holds mp_rank_00/01_model_states.pt.
  auto opened = open_checkpoint(fixture("cpm_tp2"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  EXPECT_EQ(ckpt.format(), CheckpointFormat::kDeepSpeed);
  EXPECT_EQ(ckpt.files().size(), 2u);
  expect_fixture_tensors(ckpt, "cpm_tp2.expected.json");
  EXPECT_EQ(fact(ckpt, "deepspeed.zero_stage"), "0");
  EXPECT_EQ(fact(ckpt, "deepspeed.tensors_joined"), "6");
  EXPECT_EQ(fact(ckpt, "deepspeed.tensors_per_rank"), "0");
  bool noted = false;
  for (const std::string& note : ckpt.notes()) noted = noted || note == "mp_rank_01: 1 tensors outside module (optimizer state, ...) are not listed";
  EXPECT_TRUE(noted);
  // One rank's model states alone are a plain PyTorch archive, as before.
  auto one = open_checkpoint(fixture("cpm_tp2/80000/mp_rank_01_model_states.pt"));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ((*one)->format(), CheckpointFormat::kPyTorch);
  EXPECT_EQ((*one)->find("module.word_embeddings.weight")->shape, (std::vector<uint64_t>{4, 3}));
}

TEST(DeepSpeed, Zero3ModelParallelRanksAreEachReadWithTheirOwnModelStates) {
  // The zero3 fixture's archives copied as a second model-parallel rank: its names tell no split,
  // so each rank's parameters are listed per rank, and a rule joins them.
  testing::TempDir temp;
  const fs::path set = temp / "global_step3";
  fs::copy(fixture("zero3/global_step3"), set, fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(fixture("zero3/global_step3"))) {
    std::string name = entry.path().filename().string();
    name.replace(name.find("mp_rank_00"), 10, "mp_rank_01");
    fs::copy_file(entry.path(), set / name);
  }
  auto opened = open_checkpoint(set);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ((*opened)->files().size(), 8u);  // per model-parallel rank: 2 optimizer states, 2 model states
  for (const char* name : {"a.weight", "d.scale", "frozen.embed", "pos.buffer"}) {
    const TensorInfo* first = (*opened)->find(std::string("mp_rank_00/") + name);
    const TensorInfo* second = (*opened)->find(std::string("mp_rank_01/") + name);
    ASSERT_TRUE(first != nullptr && second != nullptr) << name;
    EXPECT_GE(second->file, 4u) << name;
    EXPECT_EQ(testing::to_hex(*(*opened)->tensor_bytes(*first)), testing::to_hex(*(*opened)->tensor_bytes(*second))) << name;
  }
  OpenOptions options;
  options.tensor_parallel_rules = {"frozen.embed=1"};
  auto joined = open_checkpoint(set, options);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  const TensorInfo* embed = (*joined)->find("frozen.embed");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<uint64_t>{3, 6}));
  std::ifstream in(fixture("zero3.expected.json"));
  const std::string half = nlohmann::json::parse(in)["frozen.embed"]["hex"];  // 3 rows of 3 F16 values
  std::string rows;
  for (size_t r = 0; r < 3; ++r) rows += half.substr(r * 12, 12) + half.substr(r * 12, 12);
  EXPECT_EQ(testing::to_hex(*(*joined)->tensor_bytes(*embed)), rows);
}

/// The zero2 fixture copied, with one rank's optimizer states replaced by a damaged stand-in.
fs::path damaged_copy(const testing::TempDir& temp, std::string_view malformed, int rank) {
  const fs::path to = temp / "zero2";
  fs::copy(fixture("zero2"), to, fs::copy_options::recursive);
  if (!malformed.empty()) {
    const fs::path target = to / "global_step5" / ("zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt");
    fs::copy_file(fixture("malformed") / (std::string(malformed) + ".pt"), target, fs::copy_options::overwrite_existing);
  }
  return to;
}

void expect_failure(const fs::path& set, std::initializer_list<std::string_view> parts) {
  auto opened = open_checkpoint(set);
  ASSERT_FALSE(opened.ok());
  for (std::string_view part : parts) EXPECT_NE(opened.status().message().find(part), std::string::npos) << opened.status().to_string();
}

TEST(DeepSpeed, DamagedCheckpointsFailNamingWhatIsWrong) {
  {
    testing::TempDir temp;
    const fs::path set = damaged_copy(temp, "", 0);
    fs::remove(set / "global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt");
    expect_failure(set, {"data-parallel rank 1 is missing (zero_pp_rank_1_mp_rank_00_optim_states.pt)", "partition_count=2"});
  }
  {
    testing::TempDir temp;
    const fs::path set = damaged_copy(temp, "", 0);
    fs::remove(set / "global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt");
    expect_failure(set, {"data-parallel rank 0 is missing"});
  }
  {
    testing::TempDir temp;
    expect_failure(damaged_copy(temp, "rank1_partition_count_4", 1),
                   {"zero_pp_rank_1_mp_rank_00_optim_states.pt: partition_count=4", "holds 2 ranks"});
  }
  {
    testing::TempDir temp;
    expect_failure(damaged_copy(temp, "rank1_group0_short", 1),
                   {"mp_rank_00_model_states.pt: param_shapes group 0, parameter 'layers.0.bias'", "[24, 27)", "hold 24 ([14, 10])"});
  }
  {
    testing::TempDir temp;
    expect_failure(damaged_copy(temp, "rank1_group0_long", 1), {"param_shapes group 0 accounts for 27 elements", "hold 36", "multiple of 4"});
  }
  {
    testing::TempDir temp;
    expect_failure(damaged_copy(temp, "rank1_group1_f16", 1),
                   {"zero_pp_rank_1_mp_rank_00_optim_states.pt: single_partition_of_fp32_groups group 1 is F16"});
  }
  {
    testing::TempDir temp;
    expect_failure(damaged_copy(temp, "rank1_group0_2d", 1), {"group 0 has shape [7, 2]; expected a 1-D flat partition"});
  }
  {
    testing::TempDir temp;
    expect_failure(damaged_copy(temp, "rank0_stage_5", 0), {"zero_pp_rank_0_mp_rank_00_optim_states.pt: zero_stage is 5", "pickle byte"});
  }
  {
    testing::TempDir temp;
    const fs::path set = damaged_copy(temp, "", 0);
    std::ofstream(set / "latest") << "global_step9\n";
    expect_failure(set, {"names tag 'global_step9'", "is not a directory"});
  }
  {
    testing::TempDir temp;
    const fs::path set = damaged_copy(temp, "", 0);
    const fs::path archive = set / "global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt";
    fs::resize_file(archive, fs::file_size(archive) / 2);
    expect_failure(set, {"zero_pp_rank_1_mp_rank_00_optim_states.pt"});
  }
}

TEST(DeepSpeed, RanksOfAnotherStageOrModelStatesWithoutShapesAreRefused) {
  {
    testing::TempDir temp;
    const fs::path set = temp / "global_step3";
    fs::copy(fixture("zero3/global_step3"), set, fs::copy_options::recursive);
    fs::copy_file(fixture("zero2/global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt"), set / "zero_pp_rank_1_mp_rank_00_optim_states.pt",
                  fs::copy_options::overwrite_existing);
    expect_failure(set, {"zero_pp_rank_1_mp_rank_00_optim_states.pt: zero_stage=2, but rank 0's is 3"});
  }
  {
    testing::TempDir temp;
    const fs::path set = damaged_copy(temp, "", 0);
    fs::copy_file(set / "global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt", set / "global_step5/mp_rank_00_model_states.pt",
                  fs::copy_options::overwrite_existing);
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), StatusCode::kUnsupported) << opened.status().to_string();
    EXPECT_NE(opened.status().message().find("mp_rank_00_model_states.pt: no param_shapes"), std::string::npos) << opened.status().to_string();
  }
}

TEST(DeepSpeed, ModelParallelSetsMissingARankFailNamingIt) {
  const auto without = [](const testing::TempDir& temp, std::initializer_list<const char*> names) {
    const fs::path set = temp / "global_step7";
    fs::copy(fixture("tp2/global_step7"), set, fs::copy_options::recursive);
    for (const char* name : names) fs::remove(set / name);
    return set;
  };
  {
    testing::TempDir temp;
    expect_failure(without(temp, {"zero_pp_rank_1_mp_rank_01_optim_states.pt"}),
                   {"data-parallel rank 1 is missing (zero_pp_rank_1_mp_rank_01_optim_states.pt), yet "
                    "zero_pp_rank_0_mp_rank_01_optim_states.pt says partition_count=2"});
  }
  {
    testing::TempDir temp;
    expect_failure(without(temp, {"mp_rank_01_model_states.pt", "zero_pp_rank_0_mp_rank_01_optim_states.pt",
                                  "zero_pp_rank_1_mp_rank_01_optim_states.pt"}),
                   {"mp_rank_00_model_states.pt: says mp_world_size=2, but ", "holds 1 model-parallel rank (mp_rank_00)"});
  }
  {
    testing::TempDir temp;
    expect_failure(without(temp, {"mp_rank_01_model_states.pt"}),
                   {"mp_rank_01 has optimizer states (zero_pp_rank_0_mp_rank_01_optim_states.pt) but no model states "
                    "(mp_rank_01_model_states.pt"});
  }
}

}  // namespace
}  // namespace tensormorph
