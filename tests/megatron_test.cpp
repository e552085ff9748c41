// Megatron-LM tensor-parallel sets (tests/fixtures/megatron, written by
// tests/fixtures/make_megatron_fixtures.py in Megatron's layout): every model tensor assembled by
// its layer's role equals the full tensor the fixture was cut from, bit for bit; what cannot be
// inferred is listed per rank; damaged sets fail naming the directory or file.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

fs::path fixture(std::string_view name) { return fs::path(TM_SOURCE_DIR) / "tests/fixtures/megatron" / name; }

/// A writable copy of the fixture set.
fs::path copy_of_set(const testing::TempDir& temp) {
  const fs::path to = temp / "tp2";
  fs::copy(fixture("tp2"), to, fs::copy_options::recursive);
  return to;
}

TEST(Megatron, ModelTensorsAssembleToTheFullTensorsTheRanksWereCutFrom) {
  auto opened = open_checkpoint(fixture("tp2"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  EXPECT_EQ(ckpt.format(), CheckpointFormat::kMegatron);
  EXPECT_EQ(ckpt.files().size(), 2u);
  testing::expect_tensors_as_listed(ckpt, fixture("tp2.expected.json"));
  // Column- and row-parallel layers come in chunks, SwiGLU's input projection in two per rank;
  // norms and row-parallel biases are rank 0's copy.
  EXPECT_EQ(ckpt.find("model.decoder.layers.0.self_attention.linear_qkv.weight")->chunks.size(), 2u);
  EXPECT_EQ(ckpt.find("model.decoder.layers.0.mlp.linear_fc1.weight")->chunks.size(), 4u);
  EXPECT_TRUE(ckpt.find("model.decoder.final_layernorm.weight")->chunks.empty());
  // A layer of no known role, and state outside the model, stay per rank, and a note says why.
  for (const char* name : {"mp_rank_00/model.decoder.layers.0.mlp.mystery.weight",
                           "mp_rank_01/model.decoder.layers.0.mlp.mystery.weight", "mp_rank_01/optimizer.state.0.exp_avg"}) {
    EXPECT_NE(ckpt.find(name), nullptr) << name;
  }
  EXPECT_EQ(ckpt.find("model.decoder.layers.0.mlp.mystery.weight"), nullptr);
  bool noted = false;
  for (const std::string& note : ckpt.notes()) noted |= note.find("mystery.weight' cannot be inferred") != std::string::npos;
  EXPECT_TRUE(noted);
  // The iteration directory itself opens the same way.
  auto direct = open_checkpoint(fixture("tp2/iter_0000010"));
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_EQ((*direct)->tensors().size(), ckpt.tensors().size());
}

TEST(Megatron, PipelineStagesNumberTheirLayersIntoTheWholeModel) {
  auto opened = open_checkpoint(fixture("tp2pp2"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  EXPECT_EQ(ckpt.files().size(), 4u);
  testing::expect_tensors_as_listed(ckpt, fixture("tp2pp2.expected.json"));
  // Stage 1's layer 0 is the model's layer 2; its parts are in stage 1's archives.
  const TensorInfo* qkv = ckpt.find("model.decoder.layers.2.self_attention.linear_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(qkv->chunks.size(), 2u);
  EXPECT_EQ(qkv->chunks[0].file, 2u);
  EXPECT_EQ(qkv->chunks[1].file, 3u);
  EXPECT_EQ(ckpt.find("model.decoder.layers.3.self_attention.linear_qkv.weight"), nullptr);
  // The last stage's copy of the embedding stays per rank, with a note; other state per rank too.
  EXPECT_NE(ckpt.find("mp_rank_00_001/model.embedding.word_embeddings.weight"), nullptr);
  EXPECT_NE(ckpt.find("mp_rank_01_000/model.decoder.layers.0.mlp.mystery.weight"), nullptr);
  EXPECT_NE(ckpt.find("mp_rank_01_001/optimizer.state.0.exp_avg"), nullptr);
  bool noted = false;
  for (const std::string& note : ckpt.notes()) noted |= note.find("later pipeline stage") != std::string::npos;
  EXPECT_TRUE(noted);
  // Stats through the command line read across both stages.
  testing::TempDir temp;
  fs::copy(fixture("tp2pp2"), temp / "set", fs::copy_options::recursive);
  const testing::CliResult r = testing::run_cli({"stats", "--json", (temp / "set").string(), "--tensor", "*layers.2.mlp.linear_fc1.weight"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("tensors").size(), 1u);
}

TEST(Megatron, InterleavedModelChunksNumberTheirLayersInModelOrder) {
  auto opened = open_checkpoint(fixture("tp2pp2v2"));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const Checkpoint& ckpt = **opened;
  testing::expect_tensors_as_listed(ckpt, fixture("tp2pp2v2.expected.json"));
  // Chunk v of stage p holds layer 2v + p: layer 1 is stage 1's model0, layer 2 stage 0's model1.
  for (const auto& [layer, first_file] : {std::pair{1, 2u}, std::pair{2, 0u}}) {
    const TensorInfo* qkv = ckpt.find("model.decoder.layers." + std::to_string(layer) + ".self_attention.linear_qkv.weight");
    ASSERT_NE(qkv, nullptr) << layer;
    ASSERT_EQ(qkv->chunks.size(), 2u);
    EXPECT_EQ(qkv->chunks[0].file, first_file);
    EXPECT_EQ(qkv->chunks[1].file, first_file + 1);
  }
  EXPECT_EQ(ckpt.find("model.decoder.layers.4.self_attention.linear_qkv.weight"), nullptr);
  // The last chunk's tied embedding per rank under its chunk's name; other state per rank once.
  EXPECT_NE(ckpt.find("mp_rank_01_001/model1.embedding.word_embeddings.weight"), nullptr);
  EXPECT_NE(ckpt.find("mp_rank_00_001/optimizer.state.0.exp_avg"), nullptr);
  size_t optimizer_copies = 0;
  for (const TensorInfo& t : ckpt.tensors()) optimizer_copies += t.name.ends_with("optimizer.state.0.exp_avg");
  EXPECT_EQ(optimizer_copies, 4u);
  bool chunks_fact = false;
  for (const FormatFact& fact : ckpt.facts()) chunks_fact |= fact.key == "megatron.model_chunks_per_stage" && fact.value == 2;
  EXPECT_TRUE(chunks_fact);
}

TEST(Megatron, AMissingRankOfAPipelineStageIsNamed) {
  testing::TempDir temp;
  const fs::path set = temp / "set";
  fs::copy(fixture("tp2pp2"), set, fs::copy_options::recursive);
  fs::remove_all(set / "iter_0000010/mp_rank_00_001");
  auto opened = open_checkpoint(set);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("rank 0 of pipeline stage 1 is missing (mp_rank_00_001)"), std::string::npos)
      << opened.status().to_string();
}

TEST(Megatron, AUserRuleJoinsATensorWhoseLayerNameDoesNotTellItsSplit) {
  auto plain = open_checkpoint(fixture("tp2"));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const std::string name = "model.decoder.layers.0.mlp.mystery.weight";
  std::string ranks_hex;
  for (const char* rank : {"mp_rank_00/", "mp_rank_01/"}) {
    const TensorInfo* part = (*plain)->find(rank + name);
    ASSERT_NE(part, nullptr);
    ranks_hex += testing::to_hex(*(*plain)->tensor_bytes(*part));
  }
  OpenOptions rows;
  rows.tensor_parallel_rules = {"*.mystery.weight=0", "*.never.matches=1"};
  auto joined = open_checkpoint(fixture("tp2"), rows);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  const TensorInfo* whole = (*joined)->find(name);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->shape, (std::vector<uint64_t>{8, 4}));
  EXPECT_EQ(testing::to_hex(*(*joined)->tensor_bytes(*whole)), ranks_hex);  // rank 0's rows, then rank 1's
  EXPECT_EQ((*joined)->find("mp_rank_00/" + name), nullptr);
  bool unmatched = false;
  for (const std::string& note : (*joined)->notes()) unmatched |= note.find("'*.never.matches=1' matched no model tensor") != std::string::npos;
  EXPECT_TRUE(unmatched);

  OpenOptions columns;
  columns.tensor_parallel_rules = {"*mystery*=1"};
  auto by_column = open_checkpoint(fixture("tp2"), columns);
  ASSERT_TRUE(by_column.ok()) << by_column.status().to_string();
  EXPECT_EQ((*by_column)->find(name)->shape, (std::vector<uint64_t>{4, 8}));
  OpenOptions replicated;
  replicated.tensor_parallel_rules = {"*mystery*=replicated"};
  auto copy = open_checkpoint(fixture("tp2"), replicated);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(testing::to_hex(*(*copy)->tensor_bytes(*(*copy)->find(name))), ranks_hex.substr(0, ranks_hex.size() / 2));

  for (const char* bad : {"*mystery*", "*mystery*=sideways", "=0"}) {
    OpenOptions o;
    o.tensor_parallel_rules = {bad};
    auto refused = open_checkpoint(fixture("tp2"), o);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  OpenOptions too_deep;
  too_deep.tensor_parallel_rules = {"*mystery*=2"};
  auto refused = open_checkpoint(fixture("tp2"), too_deep);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has 2 dimensions"), std::string::npos) << refused.status().to_string();
  // Every command takes the rule.
  testing::TempDir temp;
  const fs::path set = copy_of_set(temp);
  const testing::CliResult info = testing::run_cli({"info", "--json", "--tp-split", "*mystery*=0", set.string()});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find(name), std::string::npos);
  EXPECT_EQ(info.out.find("mp_rank_00/" + name), std::string::npos);
}

TEST(Megatron, StatsReadTheAssembledTensors) {
  testing::TempDir temp;
  const fs::path set = copy_of_set(temp);
  const testing::CliResult r = testing::run_cli({"stats", "--json", set.string(), "--tensor", "*linear_fc1.weight"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json stats = nlohmann::json::parse(r.out);
  ASSERT_EQ(stats.at("tensors").size(), 1u);
  EXPECT_EQ(stats.at("tensors")[0].at("count").get<uint64_t>(), 24u * 8u);
  const testing::CliResult info = testing::run_cli({"info", set.string()});
  EXPECT_NE(info.out.find("chunk at [12, 0] of [6, 8]: iter_0000010/mp_rank_00/model_optim_rng.pt"), std::string::npos) << info.out;
}

TEST(Megatron, DamagedSetsFailNamingWhatIsWrong) {
  {
    testing::TempDir temp;
    const fs::path set = copy_of_set(temp);
    fs::remove_all(set / "iter_0000010/mp_rank_00");
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_NE(opened.status().message().find("rank 0 is missing"), std::string::npos) << opened.status().to_string();
  }
  {
    testing::TempDir temp;
    const fs::path set = copy_of_set(temp);
    fs::remove_all(set / "iter_0000010/mp_rank_01");
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_NE(opened.status().message().find("tensor_model_parallel_size=2"), std::string::npos) << opened.status().to_string();
  }
  {
    testing::TempDir temp;
    const fs::path set = copy_of_set(temp);
    std::ofstream(set / "latest_checkpointed_iteration.txt") << "20\n";
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_NE(opened.status().message().find("iter_0000020"), std::string::npos) << opened.status().to_string();
  }
  // latest_checkpointed_iteration.txt holding neither a number nor 'release', or far too much.
  for (const std::string& text : {std::string("latest\n"), std::string(100, '1')}) {
    testing::TempDir temp;
    const fs::path set = copy_of_set(temp);
    std::ofstream(set / "latest_checkpointed_iteration.txt") << text;
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), StatusCode::kFormatError) << opened.status().to_string();
    EXPECT_NE(opened.status().message().find("latest_checkpointed_iteration.txt: "), std::string::npos)
        << opened.status().to_string();
    EXPECT_NE(opened.status().message().find(text.size() > 64 ? "100 bytes; expected an iteration number" : "holds 'latest'"),
              std::string::npos)
        << opened.status().to_string();
  }
  {
    testing::TempDir temp;
    const fs::path set = copy_of_set(temp);
    fs::rename(set / "iter_0000010/mp_rank_01", set / "iter_0000010/mp_rank_00_001");
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), StatusCode::kFormatError) << opened.status().to_string();
    EXPECT_NE(opened.status().message().find("both mp_rank_XX and mp_rank_XX_YYY"), std::string::npos)
        << opened.status().to_string();
  }
  {
    testing::TempDir temp;
    const fs::path set = copy_of_set(temp);
    const fs::path archive = set / "iter_0000010/mp_rank_01/model_optim_rng.pt";
    fs::resize_file(archive, fs::file_size(archive) / 2);
    auto opened = open_checkpoint(set);
    ASSERT_FALSE(opened.ok());
    EXPECT_NE(opened.status().message().find("mp_rank_01/model_optim_rng.pt"), std::string::npos) << opened.status().to_string();
  }
}

}  // namespace
}  // namespace tensormorph
