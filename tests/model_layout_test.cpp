// engine::place_of and engine::model_layout: stacks, blocks and role labels across naming
// conventions, their order, and invariants over every real checkpoint in the test data.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/model_layout.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using engine::model_layout;
using engine::place_of;
using engine::StackLayout;
using engine::TensorPlace;

// name -> expected (stack, block, role_label).
struct Expected {
  std::string name, stack;
  std::optional<uint64_t> block;
  std::string label;
};

void expect_places(const std::vector<Expected>& cases) {
  for (const auto& c : cases) {
    const TensorPlace p = place_of(c.name);
    EXPECT_EQ(p.stack, c.stack) << c.name;
    EXPECT_EQ(p.block, c.block) << c.name;
    EXPECT_EQ(p.role_label, c.label) << c.name;
    EXPECT_EQ(p.section, c.block ? "block" : p.section) << c.name;
  }
}

std::vector<StackLayout> layout_of(const std::vector<std::string>& names) {
  std::vector<TensorPlace> places;
  for (const auto& n : names) places.push_back(place_of(n));
  return model_layout(places);
}

TEST(ModelLayout, SplitsAtTheFirstNumber) {
  const TensorPlace p = place_of("model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(p.stack, "model.layers");
  EXPECT_EQ(p.block, 12u);
  EXPECT_EQ(p.role, "self_attn.q_proj.weight");
  EXPECT_EQ(p.role_label, "q");
  EXPECT_EQ(p.section, "block");
  // T5: only the first number is the block; the sub-layer number stays in the role.
  const TensorPlace t5 = place_of("encoder.block.3.layer.1.DenseReluDense.wi.weight");
  EXPECT_EQ(t5.stack, "encoder.block");
  EXPECT_EQ(t5.block, 3u);
  EXPECT_EQ(t5.role, "layer.1.DenseReluDense.wi.weight");
  EXPECT_EQ(t5.role_label, "up");
  // No number: no block, the whole name is the role.
  const TensorPlace e = place_of("model.embed_tokens.weight");
  EXPECT_EQ(e.stack, "");
  EXPECT_FALSE(e.block);
  EXPECT_EQ(e.role, "model.embed_tokens.weight");
  EXPECT_EQ(e.role_label, "model.embed_tokens");
  EXPECT_EQ(e.section, "embedding");
  // A number too large for a block number is not one; a number ending the name numbers no block.
  EXPECT_FALSE(place_of("h.99999999999999999999999.weight").block);
  EXPECT_FALSE(place_of("buffers.7").block);
}

TEST(ModelLayout, PyTorchSequentialAndResNet) {
  const TensorPlace seq = place_of("0.weight");
  EXPECT_EQ(seq.stack, "");
  EXPECT_EQ(seq.block, 0u);
  EXPECT_EQ(seq.role, "weight");
  EXPECT_EQ(seq.role_label, "weight");
  EXPECT_EQ(place_of("3.bias").role_label, "bias");
  const TensorPlace nested = place_of("0.0.weight");  // dfdx: Sequential of (Linear, ReLU)
  EXPECT_EQ(nested.stack, "");
  EXPECT_EQ(nested.block, 0u);
  EXPECT_EQ(nested.role, "0.weight");
  EXPECT_EQ(nested.role_label, "0");
  const TensorPlace resnet = place_of("layer1.0.conv1.weight");
  EXPECT_EQ(resnet.stack, "layer1");
  EXPECT_EQ(resnet.block, 0u);
  EXPECT_EQ(resnet.role, "conv1.weight");
  EXPECT_EQ(resnet.role_label, "conv1");
  EXPECT_EQ(place_of("layer4.1.downsample.0.weight").role_label, "downsample.0");
  EXPECT_EQ(place_of("fc.weight").section, "head");
  EXPECT_EQ(place_of("conv1.weight").section, "other");
  EXPECT_EQ(place_of("bn1.running_mean").section, "other");
}

TEST(ModelLayout, HuggingFaceLlamaMistralQwenGemmaPhi3) {
  expect_places({
      {"model.layers.0.input_layernorm.weight", "model.layers", 0, "attn_norm"},
      {"model.layers.0.self_attn.q_proj.weight", "model.layers", 0, "q"},
      {"model.layers.0.self_attn.q_proj.bias", "model.layers", 0, "q bias"},  // qwen2
      {"model.layers.0.self_attn.k_proj.weight", "model.layers", 0, "k"},
      {"model.layers.0.self_attn.v_proj.weight", "model.layers", 0, "v"},
      {"model.layers.0.self_attn.o_proj.weight", "model.layers", 0, "o"},
      {"model.layers.0.self_attn.q_norm.weight", "model.layers", 0, "self_attn.q_norm"},
      {"model.layers.0.post_attention_layernorm.weight", "model.layers", 0, "ffn_norm"},
      {"model.layers.0.pre_feedforward_layernorm.weight", "model.layers", 0, "ffn_norm"},  // gemma2
      {"model.layers.0.mlp.gate_proj.weight", "model.layers", 0, "gate"},
      {"model.layers.0.mlp.up_proj.weight", "model.layers", 0, "up"},
      {"model.layers.0.mlp.down_proj.weight", "model.layers", 0, "down"},
      {"model.layers.31.self_attn.qkv_proj.weight", "model.layers", 31, "qkv"},  // phi3
      {"model.layers.31.mlp.gate_up_proj.weight", "model.layers", 31, "gate_up"},
  });
  EXPECT_EQ(place_of("model.norm.weight").section, "final norm");
  EXPECT_EQ(place_of("lm_head.weight").section, "head");
  EXPECT_EQ(place_of("lm_head.weight").role_label, "lm_head");
  EXPECT_EQ(place_of("model.embed_tokens.weight").section, "embedding");
}

TEST(ModelLayout, GgufLlamaCppNames) {
  expect_places({
      {"blk.0.attn_norm.weight", "blk", 0, "attn_norm"},
      {"blk.0.attn_q.weight", "blk", 0, "q"},
      {"blk.0.attn_k.weight", "blk", 0, "k"},
      {"blk.0.attn_v.weight", "blk", 0, "v"},
      {"blk.0.attn_qkv.weight", "blk", 0, "qkv"},
      {"blk.0.attn_output.weight", "blk", 0, "o"},
      {"blk.0.ffn_norm.weight", "blk", 0, "ffn_norm"},
      {"blk.0.ffn_gate.weight", "blk", 0, "gate"},
      {"blk.0.ffn_up.weight", "blk", 0, "up"},
      {"blk.0.ffn_down.weight", "blk", 0, "down"},
      {"blk.0.ffn_gate_inp.weight", "blk", 0, "router"},
      {"blk.0.ffn_gate_exps.weight", "blk", 0, "ffn_gate_exps"},
  });
  EXPECT_EQ(place_of("token_embd.weight").section, "embedding");
  EXPECT_EQ(place_of("output_norm.weight").section, "final norm");
  EXPECT_EQ(place_of("output.weight").section, "head");
  EXPECT_EQ(place_of("rope_freqs.weight").section, "other");
}

TEST(ModelLayout, Gpt2AndBert) {
  expect_places({
      {"transformer.h.0.ln_1.weight", "transformer.h", 0, "attn_norm"},
      {"transformer.h.0.attn.c_attn.weight", "transformer.h", 0, "qkv"},
      {"transformer.h.0.attn.c_attn.bias", "transformer.h", 0, "qkv bias"},
      {"transformer.h.0.attn.c_proj.weight", "transformer.h", 0, "o"},
      {"transformer.h.0.ln_2.weight", "transformer.h", 0, "ffn_norm"},
      {"transformer.h.0.mlp.c_fc.weight", "transformer.h", 0, "up"},
      {"transformer.h.0.mlp.c_proj.weight", "transformer.h", 0, "down"},
      {"transformer.h.0.attn.bias", "transformer.h", 0, "attn.bias"},  // the causal mask buffer
      {"base_model.model.transformer.h.3.attn.c_attn.lora_A.weight", "base_model.model.transformer.h", 3, "qkv lora_A"},
      {"bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer", 0, "q"},
      {"bert.encoder.layer.0.attention.self.key.weight", "bert.encoder.layer", 0, "k"},
      {"bert.encoder.layer.0.attention.self.value.bias", "bert.encoder.layer", 0, "v bias"},
      {"bert.encoder.layer.0.attention.output.dense.weight", "bert.encoder.layer", 0, "o"},
      {"bert.encoder.layer.0.attention.output.LayerNorm.weight", "bert.encoder.layer", 0, "attn_norm"},
      {"bert.encoder.layer.0.intermediate.dense.weight", "bert.encoder.layer", 0, "up"},
      {"bert.encoder.layer.0.output.dense.weight", "bert.encoder.layer", 0, "down"},
      {"bert.encoder.layer.0.output.LayerNorm.bias", "bert.encoder.layer", 0, "ffn_norm bias"},
  });
  EXPECT_EQ(place_of("transformer.wte.weight").section, "embedding");
  EXPECT_EQ(place_of("transformer.wpe.weight").section, "embedding");
  EXPECT_EQ(place_of("transformer.ln_f.weight").section, "final norm");
  EXPECT_EQ(place_of("bert.embeddings.LayerNorm.weight").section, "embedding");
  EXPECT_EQ(place_of("bert.pooler.dense.weight").section, "head");
  EXPECT_EQ(place_of("cls.predictions.transform.LayerNorm.weight").section, "head");
}

TEST(ModelLayout, MixtureOfExpertsAndT5) {
  expect_places({
      {"model.layers.1.block_sparse_moe.gate.weight", "model.layers", 1, "router"},
      {"model.layers.1.block_sparse_moe.experts.0.w1.weight", "model.layers", 1, "e0 gate"},
      {"model.layers.1.block_sparse_moe.experts.0.w2.weight", "model.layers", 1, "e0 down"},
      {"model.layers.1.block_sparse_moe.experts.7.w3.weight", "model.layers", 1, "e7 up"},
      {"model.layers.1.mlp.experts.12.gate_proj.weight", "model.layers", 1, "e12 gate"},  // qwen2-moe
      {"model.layers.1.mlp.gate.weight", "model.layers", 1, "router"},
      {"layers.4.attention.wq.weight", "layers", 4, "q"},  // Meta's llama
      {"layers.4.attention.wo.weight", "layers", 4, "o"},
      {"layers.4.feed_forward.w1.weight", "layers", 4, "gate"},
      {"layers.4.feed_forward.w2.weight", "layers", 4, "down"},
      {"encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block", 0, "q"},
      {"encoder.block.0.layer.0.SelfAttention.o.weight", "encoder.block", 0, "o"},
      {"encoder.block.0.layer.0.layer_norm.weight", "encoder.block", 0, "attn_norm"},
      {"encoder.block.0.layer.1.DenseReluDense.wi.weight", "encoder.block", 0, "up"},
      {"encoder.block.0.layer.1.DenseReluDense.wo.weight", "encoder.block", 0, "down"},
      {"encoder.block.0.layer.1.layer_norm.weight", "encoder.block", 0, "ffn_norm"},
      {"decoder.block.0.layer.1.EncDecAttention.k.weight", "decoder.block", 0, "cross_k"},
      {"decoder.block.0.layer.1.layer_norm.weight", "decoder.block", 0, "cross_norm"},
      {"decoder.block.0.layer.2.DenseReluDense.wi_0.weight", "decoder.block", 0, "gate"},
      {"decoder.block.0.layer.2.DenseReluDense.wi_1.weight", "decoder.block", 0, "up"},
      {"decoder.block.0.layer.2.layer_norm.weight", "decoder.block", 0, "ffn_norm"},
      {"model.decoder.layers.2.encoder_attn.q_proj.weight", "model.decoder.layers", 2, "cross_q"},  // BART, Whisper
      {"model.decoder.layers.2.encoder_attn_layer_norm.weight", "model.decoder.layers", 2, "cross_norm"},
  });
  EXPECT_EQ(place_of("shared.weight").section, "embedding");
  EXPECT_EQ(place_of("encoder.final_layer_norm.weight").section, "final norm");
}

TEST(ModelLayout, RolesInCanonicalOrderThenFirstAppearance) {
  // Listed out of order, with something unknown first and a bias before its weight.
  const auto stacks = layout_of({
      "blk.0.custom_thing.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.bias", "blk.0.ffn_up.weight",
      "blk.0.attn_output.weight", "blk.0.attn_v.weight", "blk.0.attn_q.weight", "blk.0.ffn_norm.weight",
      "blk.0.attn_k.weight", "blk.0.ffn_gate.weight", "blk.0.attn_norm.weight", "blk.0.another.weight",
  });
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].roles, (std::vector<std::string>{
                                 "attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_v.weight",
                                 "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                                 "ffn_down.weight", "custom_thing.weight", "another.weight"}));
}

TEST(ModelLayout, ExpertsFollowTheDenseRolesByExpertNumber) {
  const auto stacks = layout_of({
      "model.layers.0.block_sparse_moe.experts.10.w1.weight", "model.layers.0.block_sparse_moe.experts.2.w2.weight",
      "model.layers.0.block_sparse_moe.experts.2.w1.weight", "model.layers.0.block_sparse_moe.gate.weight",
      "model.layers.0.self_attn.q_proj.weight",
  });
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].roles, (std::vector<std::string>{
                                 "self_attn.q_proj.weight", "block_sparse_moe.gate.weight",
                                 "block_sparse_moe.experts.2.w1.weight", "block_sparse_moe.experts.2.w2.weight",
                                 "block_sparse_moe.experts.10.w1.weight"}));
}

TEST(ModelLayout, BlocksInNumericOrder) {
  std::vector<std::string> names;
  for (int b : {0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9}) names.push_back("h." + std::to_string(b) + ".attn.c_attn.weight");
  const auto stacks = layout_of(names);
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].block_numbers, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // A Sequential with gaps (activations hold no parameters): the numbers there are.
  const auto sequential = layout_of({"0.weight", "0.bias", "2.weight", "2.bias", "4.weight"});
  ASSERT_EQ(sequential.size(), 1u);
  EXPECT_EQ(sequential[0].stack, "");
  EXPECT_EQ(sequential[0].block_numbers, (std::vector<uint64_t>{0, 2, 4}));
  EXPECT_EQ(sequential[0].roles, (std::vector<std::string>{"weight", "bias"}));
}

TEST(ModelLayout, SeveralStacks) {
  const auto enc_dec = layout_of({
      "shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block.1.layer.0.SelfAttention.q.weight",
      "decoder.block.0.layer.0.SelfAttention.q.weight", "decoder.block.0.layer.1.EncDecAttention.q.weight",
      "encoder.final_layer_norm.weight",
  });
  ASSERT_EQ(enc_dec.size(), 2u);
  EXPECT_EQ(enc_dec[0].stack, "encoder.block");
  EXPECT_EQ(enc_dec[0].block_numbers.size(), 2u);
  EXPECT_EQ(enc_dec[1].stack, "decoder.block");
  EXPECT_EQ(enc_dec[1].roles, (std::vector<std::string>{"layer.0.SelfAttention.q.weight", "layer.1.EncDecAttention.q.weight"}));
  const auto vlm = layout_of({
      "vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight",
      "vision_tower.vision_model.encoder.layers.0.layer_norm1.weight",
      "vision_tower.vision_model.encoder.layers.1.mlp.fc1.weight",
      "language_model.model.layers.0.self_attn.q_proj.weight",
      "language_model.model.layers.0.mlp.down_proj.weight",
  });
  ASSERT_EQ(vlm.size(), 2u);
  EXPECT_EQ(vlm[0].stack, "vision_tower.vision_model.encoder.layers");
  EXPECT_EQ(vlm[0].roles, (std::vector<std::string>{"layer_norm1.weight", "self_attn.q_proj.weight", "mlp.fc1.weight"}));
  EXPECT_EQ(vlm[1].stack, "language_model.model.layers");
  EXPECT_EQ(place_of("vision_tower.vision_model.encoder.layers.1.mlp.fc1.weight").role_label, "up");
}

// Every real checkpoint: places rebuild their names, labels are never empty, every (stack, role)
// is listed once in its stack, blocks are strictly increasing.
TEST(ModelLayout, RealCheckpointsKeepTheInvariants) {
  const auto dir = testing::testdata_dir() / "real";
  size_t opened = 0;
  std::map<std::string, std::vector<StackLayout>> layouts;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".safetensors" && ext != ".gguf" && ext != ".pth") continue;
    auto ckpt = open_checkpoint(entry.path());
    ASSERT_TRUE(ckpt.ok()) << entry.path() << ": " << ckpt.status().to_string();
    ++opened;
    std::vector<TensorPlace> places;
    for (const TensorInfo& t : (*ckpt)->tensors()) {
      const TensorPlace p = place_of(t.name);
      if (p.block) {
        EXPECT_EQ((p.stack.empty() ? "" : p.stack + ".") + std::to_string(*p.block) + "." + p.role, t.name);
        EXPECT_EQ(p.section, "block");
      } else {
        EXPECT_EQ(p.role, t.name);
        EXPECT_TRUE(p.section == "embedding" || p.section == "head" || p.section == "final norm" || p.section == "other")
            << t.name << ": " << p.section;
      }
      EXPECT_FALSE(p.role_label.empty()) << t.name;
      places.push_back(p);
    }
    const auto stacks = model_layout(places);
    std::set<std::string> names;
    for (const auto& s : stacks) {
      EXPECT_TRUE(names.insert(s.stack).second) << "stack listed twice: " << s.stack;
      EXPECT_FALSE(s.block_numbers.empty());
      for (size_t i = 1; i < s.block_numbers.size(); ++i) EXPECT_LT(s.block_numbers[i - 1], s.block_numbers[i]);
      EXPECT_EQ(std::set<std::string>(s.roles.begin(), s.roles.end()).size(), s.roles.size()) << s.stack;
    }
    for (const TensorPlace& p : places) {
      if (!p.block) continue;
      const auto s = std::find_if(stacks.begin(), stacks.end(), [&](const StackLayout& l) { return l.stack == p.stack; });
      ASSERT_NE(s, stacks.end()) << p.stack;
      EXPECT_NE(std::find(s->roles.begin(), s->roles.end(), p.role), s->roles.end()) << p.role;
      EXPECT_TRUE(std::binary_search(s->block_numbers.begin(), s->block_numbers.end(), *p.block));
    }
    layouts[entry.path().filename().string()] = stacks;
  }
  EXPECT_GE(opened, 6u);
  // What the manifest says of them.
  const auto& stories = layouts.at("stories260K.gguf");
  ASSERT_EQ(stories.size(), 1u);
  EXPECT_EQ(stories[0].stack, "blk");
  EXPECT_EQ(stories[0].block_numbers, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(stories[0].roles, (std::vector<std::string>{"attn_norm.weight", "attn_q.weight", "attn_k.weight",
                                                        "attn_v.weight", "attn_output.weight", "ffn_norm.weight",
                                                        "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}));
  const auto& peft = layouts.at("peft-gpt2_adapter_model.safetensors");
  ASSERT_EQ(peft.size(), 1u);
  EXPECT_EQ(peft[0].stack, "base_model.model.transformer.h");
  EXPECT_EQ(peft[0].block_numbers.size(), 12u);
  EXPECT_EQ(peft[0].block_numbers.back(), 11u);
  const auto& mnist = layouts.at("dfdx_mnist.safetensors");
  ASSERT_EQ(mnist.size(), 1u);
  EXPECT_EQ(mnist[0].stack, "");
  EXPECT_EQ(mnist[0].block_numbers, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(layouts.at("hqqsvd_test_bf16.safetensors").empty());
}

}  // namespace
}  // namespace tensormorph
