// PyTorch zip checkpoints: the zip directory reader, the restricted pickle machine, torch object
// interpretation, and the fixtures written by tests/fixtures/make_pytorch_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/pytorch/pickle_vm.h"
#include "formats/pytorch/pytorch.h"
#include "formats/pytorch/torch_objects.h"
#include "formats/pytorch/zip_archive.h"
#include "tensormorph/decode.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using pytorch::PickleKind;
using pytorch::PickleValue;

fs::path fixture(std::string_view name) { return fs::path(TM_SOURCE_DIR) / "tests/fixtures/pytorch" / name; }

std::unique_ptr<Checkpoint> open_ok(const fs::path& path) {
  auto result = pytorch::open_file(path);
  EXPECT_TRUE(result.ok()) << result.status().to_string();
  return result.ok() ? std::move(result).value() : nullptr;
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

bool has_note(const Checkpoint& checkpoint, std::string_view needle) {
  return std::any_of(checkpoint.notes().begin(), checkpoint.notes().end(),
                     [&](const std::string& note) { return note.find(needle) != std::string::npos; });
}

std::string metadata_value(const Checkpoint& checkpoint, std::string_view key) {
  for (const MetadataEntry& entry : checkpoint.metadata()) {
    if (entry.key == key) return entry.value.get<std::string>();
  }
  return "<absent>";
}

std::vector<std::string> names_of(const Checkpoint& checkpoint) {
  std::vector<std::string> names;
  for (const TensorInfo& tensor : checkpoint.tensors()) names.push_back(tensor.name);
  return names;
}

// ----- the real checkpoint --------------------------------------------------------------------

TEST(PyTorchReal, Taef2DecoderOpensWith79HalfTensors) {
  const fs::path path = testing::testdata_dir() / "real/taef2_decoder.pth";
  auto checkpoint = open_ok(path);
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(checkpoint->format(), CheckpointFormat::kPyTorch);
  ASSERT_EQ(checkpoint->tensors().size(), 79u);
  uint64_t parameters = 0;
  for (const TensorInfo& tensor : checkpoint->tensors()) {
    EXPECT_EQ(tensor.dtype, DType::kF16) << tensor.name;
    EXPECT_TRUE(tensor.strides.empty()) << tensor.name;
    EXPECT_EQ(tensor.offset % 64, 0u) << tensor.name;
    EXPECT_EQ(tensor.nbytes, tensor.elements() * 2) << tensor.name;
    parameters += tensor.elements();
  }
  EXPECT_EQ(parameters, 1338499u);  // counted by python3 pickle + zipfile
  EXPECT_EQ(checkpoint->tensors().front().name, "1.weight");
  EXPECT_EQ(checkpoint->tensors().back().name, "19.bias");

  const TensorInfo* first = checkpoint->find("1.weight");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->shape, (std::vector<uint64_t>{64, 32, 3, 3}));
  EXPECT_EQ(first->offset, 11648u);
  EXPECT_EQ(first->nbytes, 36864u);
  const TensorInfo* conv = checkpoint->find("3.conv.0.weight");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->shape, (std::vector<uint64_t>{64, 64, 3, 3}));
  EXPECT_EQ(conv->offset, 48896u);
  const TensorInfo* last_weight = checkpoint->find("19.weight");
  ASSERT_NE(last_weight, nullptr);
  EXPECT_EQ(last_weight->shape, (std::vector<uint64_t>{3, 64, 3, 3}));
  EXPECT_EQ(last_weight->offset, 2695040u);
  const TensorInfo* bias = checkpoint->find("19.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(bias->offset, 2698624u);
  auto bytes = checkpoint->tensor_bytes(*bias);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(testing::to_hex(*bytes), "97355b351c35");

  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.archive_prefix"), "taef2_decoder");
  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.byteorder"), "little");
  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.format_version"), "1");
  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.storage_alignment"), "64");
  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.version"), "3");
  EXPECT_FALSE(has_note(*checkpoint, "recorded, not imported"));
}

TEST(PyTorchReal, Taef2ZipDirectoryUsesZip64EndRecords) {
  auto zip = pytorch::ZipArchive::open(testing::testdata_dir() / "real/taef2_decoder.pth");
  ASSERT_TRUE(zip.ok()) << zip.status().to_string();
  EXPECT_EQ(zip->entries().size(), 85u);
  const pytorch::ZipEntry* data0 = zip->find("taef2_decoder/data/0");
  ASSERT_NE(data0, nullptr);
  EXPECT_EQ(data0->method, pytorch::kZipMethodStored);
  EXPECT_EQ(data0->local_header_offset, 11542u);
  auto offset = zip->data_offset(*data0);
  ASSERT_TRUE(offset.ok()) << offset.status().to_string();
  EXPECT_EQ(*offset, 11648u);
}

// ----- fixtures against expected.json ---------------------------------------------------------

TEST(PyTorchFixtures, EveryGoodFixtureMatchesItsIndependentExpectations) {
  const auto expected = nlohmann::json::parse(testing::read_bytes(fixture("expected.json")));
  ASSERT_GE(expected.size(), 9u);
  for (const auto& [file, tensors] : expected.items()) {
    SCOPED_TRACE(file);
    auto checkpoint = open_ok(fixture(file));
    ASSERT_NE(checkpoint, nullptr);
    ASSERT_EQ(checkpoint->tensors().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& want = tensors[i];
      const TensorInfo& got = checkpoint->tensors()[i];
      SCOPED_TRACE(got.name);
      EXPECT_EQ(got.name, want["name"].get<std::string>());
      EXPECT_EQ(dtype_name(got.dtype), want["dtype"].get<std::string>());
      EXPECT_EQ(got.shape, want["shape"].get<std::vector<uint64_t>>());
      EXPECT_EQ(got.strides, want["strides"].get<std::vector<int64_t>>());
      EXPECT_EQ(got.offset, want["offset"].get<uint64_t>());
      EXPECT_EQ(got.nbytes, want["nbytes"].get<uint64_t>());
      auto bytes = checkpoint->tensor_bytes(got);
      ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
      EXPECT_EQ(testing::to_hex(*bytes), want["hex"].get<std::string>());
    }
  }
}

TEST(PyTorchFixtures, PlainStateDictHasAlignedDataScalarsAndEmptyTensors) {
  auto checkpoint = open_ok(fixture("state_dict.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint),
            (std::vector<std::string>{"fc.weight", "fc.bias", "emb.half", "emb.bf16", "step_ids", "scalar", "empty"}));
  for (const TensorInfo& tensor : checkpoint->tensors()) EXPECT_EQ(tensor.offset % 64, 0u) << tensor.name;
  EXPECT_EQ(checkpoint->find("emb.half")->dtype, DType::kF16);
  EXPECT_EQ(checkpoint->find("emb.bf16")->dtype, DType::kBF16);
  EXPECT_EQ(checkpoint->find("step_ids")->dtype, DType::kI64);
  const TensorInfo* scalar = checkpoint->find("scalar");
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->nbytes, 4u);
  const TensorInfo* empty = checkpoint->find("empty");
  EXPECT_EQ(empty->shape, (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(empty->nbytes, 0u);

  auto ids = checkpoint->tensor_bytes(*checkpoint->find("step_ids"));
  ASSERT_TRUE(ids.ok());
  int64_t values[3];
  std::memcpy(values, ids->data(), sizeof values);
  EXPECT_EQ(values[0], -1);
  EXPECT_EQ(values[2], int64_t{1} << 40);
  auto weights = checkpoint->decode_f32(*checkpoint->find("fc.weight"));
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  EXPECT_EQ(*weights, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));

  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.archive_prefix"), "state_dict");
  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.version"), "3");
  EXPECT_EQ(metadata_value(*checkpoint, "pytorch.byteorder"), "little");
  EXPECT_EQ(checkpoint->files().size(), 1u);
  EXPECT_EQ(checkpoint->files()[0].size, fs::file_size(fixture("state_dict.pt")));
}

TEST(PyTorchFixtures, NoExtensionPrefixAndZip64VariantsOpen) {
  auto noext = open_ok(fixture("state_dict_noext"));
  ASSERT_NE(noext, nullptr);
  EXPECT_EQ(noext->tensors().size(), 7u);
  EXPECT_EQ(metadata_value(*noext, "pytorch.archive_prefix"), "archive");

  auto prefixed = open_ok(fixture("prefixed.pth"));
  ASSERT_NE(prefixed, nullptr);
  EXPECT_EQ(names_of(*prefixed), (std::vector<std::string>{"w"}));
  EXPECT_EQ(metadata_value(*prefixed, "pytorch.archive_prefix"), "my_model-v2.final");

  auto zip64 = open_ok(fixture("zip64.pt"));
  ASSERT_NE(zip64, nullptr);
  EXPECT_EQ(names_of(*zip64), names_of(*noext));
  // Every central header of this fixture stores its sizes and offset in the Zip64 extra field.
  auto zip = pytorch::ZipArchive::open(fixture("zip64.pt"));
  ASSERT_TRUE(zip.ok()) << zip.status().to_string();
  for (const pytorch::ZipEntry& entry : zip->entries()) EXPECT_LT(entry.local_header_offset, zip->file_size());
}

TEST(PyTorchFixtures, NestedDictsJoinNamesAndIgnoreOtherValues) {
  auto checkpoint = open_ok(fixture("nested.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint),
            (std::vector<std::string>{"model.encoder.w", "model.head.b", "layers.0", "layers.1.0"}));
  EXPECT_EQ(checkpoint->find("layers.1.0")->dtype, DType::kI32);
  EXPECT_TRUE(has_note(*checkpoint, "non-tensor value")) << "ignored leaves are summarised";
  EXPECT_TRUE(has_note(*checkpoint, "'optimizer.param_groups.0.lr'"));
}

TEST(PyTorchFixtures, OrderedDictKeepsInsertionOrderAndIgnoresItsMetadata) {
  auto checkpoint = open_ok(fixture("ordered.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint), (std::vector<std::string>{"b.weight", "a.weight"}));
  EXPECT_EQ(checkpoint->find("a.weight")->shape, (std::vector<uint64_t>{1, 2}));
}

TEST(PyTorchFixtures, ViewsShareOneStorageWithStridesAndOffsets) {
  auto checkpoint = open_ok(fixture("views.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint),
            (std::vector<std::string>{"base", "alias", "transposed", "row1", "col1", "broadcast"}));
  const TensorInfo* base = checkpoint->find("base");
  const TensorInfo* alias = checkpoint->find("alias");
  EXPECT_EQ(alias->offset, base->offset);
  EXPECT_EQ(alias->shape, base->shape);
  EXPECT_EQ(base->nbytes, 48u);

  const TensorInfo* transposed = checkpoint->find("transposed");
  EXPECT_EQ(transposed->offset, base->offset);
  EXPECT_EQ(transposed->shape, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(transposed->strides, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(transposed->nbytes, 48u);
  auto values = checkpoint->decode_f32(*transposed);
  ASSERT_TRUE(values.ok()) << values.status().to_string();
  EXPECT_EQ(*values, (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));

  const TensorInfo* row = checkpoint->find("row1");
  EXPECT_EQ(row->offset, base->offset + 16);
  EXPECT_TRUE(row->strides.empty());
  EXPECT_EQ(row->nbytes, 16u);

  const TensorInfo* col = checkpoint->find("col1");
  EXPECT_EQ(col->offset, base->offset + 4);
  EXPECT_EQ(col->strides, (std::vector<int64_t>{4}));
  EXPECT_EQ(col->nbytes, 36u);
  values = checkpoint->decode_f32(*col);
  ASSERT_TRUE(values.ok()) << values.status().to_string();
  EXPECT_EQ(*values, (std::vector<float>{1, 5, 9}));

  const TensorInfo* broadcast = checkpoint->find("broadcast");
  EXPECT_EQ(broadcast->offset, base->offset + 32);
  EXPECT_EQ(broadcast->strides, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(broadcast->nbytes, 16u);
  values = checkpoint->decode_f32(*broadcast);
  ASSERT_TRUE(values.ok()) << values.status().to_string();
  EXPECT_EQ(*values, (std::vector<float>{8, 9, 10, 11, 8, 9, 10, 11}));
}

TEST(PyTorchFixtures, PickledModuleIsNamedLikeItsStateDict) {
  auto checkpoint = open_ok(fixture("module.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint),
            (std::vector<std::string>{"scale", "steps", "encoder.0.weight", "encoder.0.bias", "encoder.1.weight",
                                      "head.weight", "head.bias"}));
  EXPECT_EQ(checkpoint->find("steps")->dtype, DType::kI64);
  EXPECT_EQ(checkpoint->find("encoder.0.weight")->shape, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(checkpoint->find("encoder.1.weight")->shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(checkpoint->find("head.weight")->shape, (std::vector<uint64_t>{1, 2}));
  auto scale = checkpoint->decode_f32(*checkpoint->find("scale"));
  ASSERT_TRUE(scale.ok()) << scale.status().to_string();
  EXPECT_EQ(*scale, (std::vector<float>{2.0f}));
  EXPECT_TRUE(has_note(*checkpoint, "recorded, not imported: mymodels.TinyNet"));
  EXPECT_TRUE(has_note(*checkpoint, "recorded, not imported: mymodels.Sequential"));
  EXPECT_TRUE(has_note(*checkpoint, "recorded, not imported: mymodels.Linear"));
  EXPECT_FALSE(has_note(*checkpoint, "torch._utils"));
  EXPECT_FALSE(has_note(*checkpoint, "collections.OrderedDict"));
}

TEST(PyTorchFixtures, UnknownGlobalIsRecordedNeverExecuted) {
  auto checkpoint = open_ok(fixture("unknown_global.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint), (std::vector<std::string>{"weight"}));
  EXPECT_TRUE(has_note(*checkpoint, "recorded, not imported: posix.system"));
}

TEST(PyTorchFixtures, DeflatedPickleIsInflated) {
  auto checkpoint = open_ok(fixture("compressed_pickle.pt"));
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(names_of(*checkpoint), (std::vector<std::string>{"w"}));
  EXPECT_TRUE(has_note(*checkpoint, "inflated"));
}

// ----- refused and corrupt inputs -------------------------------------------------------------

struct Refusal {
  const char* file;
  StatusCode code;
  const char* needle;
};

TEST(PyTorchFixtures, BadInputsAreRefusedWithPreciseMessages) {
  const Refusal cases[] = {
      {"compressed_storage.pt", StatusCode::kUnsupported, "'compressed_storage/data/0' is compressed"},
      {"big_endian.pt", StatusCode::kUnsupported, "big-endian"},
      {"legacy.pt", StatusCode::kUnsupported,
       "legacy (pre-1.6) torch.save format is not supported; re-save with torch>=1.6"},
      {"raw_pickle.pkl", StatusCode::kUnsupported, "not a torch.save zip archive"},
      {"truncated.pt", StatusCode::kFormatError, "end-of-central-directory"},
      {"bad_cd_offset.pt", StatusCode::kFormatError, "central directory"},
      {"truncated_pickle.pt", StatusCode::kFormatError, "truncated_pickle/data.pkl: pickle byte"},
      {"missing_storage.pt", StatusCode::kFormatError, "tensor 'w': storage '9' has no archive entry"},
      {"view_out_of_bounds.pt", StatusCode::kFormatError, "outside its storage of 2 elements"},
      {"negative_stride.pt", StatusCode::kFormatError, "negative stride -1"},
      {"no_data_pkl.zip", StatusCode::kFormatError, "no '<name>/data.pkl' entry"},
  };
  for (const Refusal& refusal : cases) {
    SCOPED_TRACE(refusal.file);
    auto result = pytorch::open_file(fixture(refusal.file));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), refusal.code) << result.status().to_string();
    EXPECT_NE(result.status().message().find(refusal.needle), std::string::npos) << result.status().message();
    EXPECT_NE(result.status().message().find(fixture(refusal.file).string()), std::string::npos)
        << "the message names the file: " << result.status().message();
  }
}

TEST(PyTorchFixtures, TensorErrorsNameThePickleOffset) {
  auto result = pytorch::open_file(fixture("view_out_of_bounds.pt"));
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("view_out_of_bounds/data.pkl byte "), std::string::npos)
      << result.status().message();
}

TEST(PyTorchFixtures, EmptyAndMissingFiles) {
  testing::TempDir dir;
  testing::write_bytes(dir / "empty.pt", "");
  auto empty = pytorch::open_file(dir / "empty.pt");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kFormatError);
  auto missing = pytorch::open_file(dir / "missing.pt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(PyTorchFixtures, OpenCheckpointDispatchesZipAndLegacyFiles) {
  auto zip = open_checkpoint(fixture("state_dict_noext"));
  ASSERT_TRUE(zip.ok()) << zip.status().to_string();
  EXPECT_EQ((*zip)->format(), CheckpointFormat::kPyTorch);
  EXPECT_EQ((*zip)->tensors().size(), 7u);
  auto legacy = open_checkpoint(fixture("legacy.pt"));
  ASSERT_FALSE(legacy.ok());
  EXPECT_EQ(legacy.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(legacy.status().message().find("legacy (pre-1.6)"), std::string::npos) << legacy.status().message();
}

// ----- the pickle machine on its own ----------------------------------------------------------

Result<pytorch::PickleTree> run(std::string_view hex, const pytorch::PickleLimits& limits = {}) {
  return pytorch::run_pickle(from_hex(hex), "test.pkl", limits);
}

// {'a': [1, 2.5, 'x', None, True, 10**30, -7, b'by'], 'b': (frozenset([1]), {2, 3}, bytearray(b'z'))}
// as Python's pickle writes it with protocols 0, 1, 4 and 5.
constexpr std::string_view kSamplePickles[] = {
    // protocol 0
    "286470300a56610a70310a286c70320a49310a6146322e350a6156780a70330a614e614930310a614c313030303030303030"
    "303030303030303030303030303030303030303030304c0a61492d370a61635f636f646563730a656e636f64650a70340a28"
    "5662790a70350a566c6174696e310a70360a7470370a5270380a617356620a70390a28635f5f6275696c74696e5f5f0a6672"
    "6f7a656e7365740a7031300a28286c7031310a49310a61747031320a527031330a635f5f6275696c74696e5f5f0a7365740a"
    "7031340a28286c7031350a49320a6149330a61747031360a527031370a635f5f6275696c74696e5f5f0a6279746561727261"
    "790a7031380a2867340a28567a0a7031390a67360a747032300a527032310a747032320a527032330a747032340a732e",
    // protocol 1
    "7d71002858010000006171015d7102284b0147400400000000000058010000007871034e4930310a4c313030303030303030"
    "303030303030303030303030303030303030303030304c0a4af9ffffff635f636f646563730a656e636f64650a7104285802"
    "0000006279710558060000006c6174696e31710674710752710865580100000062710928635f5f6275696c74696e5f5f0a66"
    "726f7a656e7365740a710a285d710b4b016174710c52710d635f5f6275696c74696e5f5f0a7365740a710e285d710f284b02"
    "4b0365747110527111635f5f6275696c74696e5f5f0a6279746561727261790a71122868042858010000007a711368067471"
    "14527115747116527117747118752e",
    // protocol 4
    "8004956b000000000000007d94288c0161945d94284b014740040000000000008c0178944e888a0d00000040eaed7446d09c"
    "2c9f0c4af9ffffff4302627994658c016294284b0191948f94284b024b03908c086275696c74696e73948c09627974656172"
    "72617994939443017a94859452948794752e",
    // protocol 5
    "80059555000000000000007d94288c0161945d94284b014740040000000000008c0178944e888a0d00000040eaed7446d09c"
    "2c9f0c4af9ffffff4302627994658c016294284b0191948f94284b024b03909601000000000000007a948794752e",
};

TEST(PickleMachine, DecodesEveryProtocolToTheSameTree) {
  for (std::string_view hex : kSamplePickles) {
    auto tree = run(hex);
    ASSERT_TRUE(tree.ok()) << tree.status().to_string();
    const PickleValue* root = tree->root();
    ASSERT_EQ(root->kind, PickleKind::kDict);
    ASSERT_EQ(root->entries.size(), 2u);
    EXPECT_EQ(root->entries[0].first->text, "a");
    const PickleValue* list = root->entries[0].second;
    ASSERT_EQ(list->kind, PickleKind::kList);
    ASSERT_EQ(list->items.size(), 8u);
    EXPECT_EQ(list->items[0]->integer, 1);
    EXPECT_EQ(list->items[1]->kind, PickleKind::kFloat);
    EXPECT_EQ(list->items[1]->real, 2.5);
    EXPECT_EQ(list->items[2]->text, "x");
    EXPECT_EQ(list->items[3]->kind, PickleKind::kNone);
    EXPECT_EQ(list->items[4]->kind, PickleKind::kBool);
    EXPECT_TRUE(list->items[4]->boolean);
    EXPECT_EQ(list->items[5]->kind, PickleKind::kBigInt);
    EXPECT_EQ(list->items[6]->integer, -7);
    EXPECT_EQ(list->items[7]->kind, PickleKind::kBytes);
    EXPECT_EQ(list->items[7]->text, "by");
    const PickleValue* tuple = root->entries[1].second;
    ASSERT_EQ(tuple->kind, PickleKind::kTuple);
    ASSERT_EQ(tuple->items.size(), 3u);
    EXPECT_EQ(tuple->items[0]->kind, PickleKind::kSet);
    EXPECT_EQ(tuple->items[0]->items.size(), 1u);
    EXPECT_EQ(tuple->items[1]->kind, PickleKind::kSet);
    EXPECT_EQ(tuple->items[1]->items.size(), 2u);
    EXPECT_EQ(tuple->items[2]->kind, PickleKind::kBytes);
    EXPECT_EQ(tuple->items[2]->text, "z");
  }
}

TEST(PickleMachine, ErrorsNameTheByteOffset) {
  // PROTO 2, BINGET 7 (never stored).
  auto missing_memo = run("800268072e");
  ASSERT_FALSE(missing_memo.ok());
  EXPECT_NE(missing_memo.status().message().find("test.pkl: pickle byte 2: memo key 7"), std::string::npos)
      << missing_memo.status().message();
  auto unknown = run("8002ff");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("pickle byte 2: unknown opcode 0xff"), std::string::npos);
  auto no_stop = run("80024b01");
  ASSERT_FALSE(no_stop.ok());
  EXPECT_NE(no_stop.status().message().find("pickle byte 4"), std::string::npos);
  auto underflow = run("8002612e");  // APPEND on an empty stack
  ASSERT_FALSE(underflow.ok());
  EXPECT_NE(underflow.status().message().find("stack underflow"), std::string::npos);
  auto long_string = run("80025800ffffff2e");  // BINUNICODE claiming 4 GB
  ASSERT_FALSE(long_string.ok());
  EXPECT_EQ(long_string.status().code(), StatusCode::kFormatError);
  auto protocol = run("80062e");
  ASSERT_FALSE(protocol.ok());
  EXPECT_EQ(protocol.status().code(), StatusCode::kUnsupported);
}

TEST(PickleMachine, LimitsStopHostileGrowth) {
  pytorch::PickleLimits limits;
  limits.max_stack = 64;
  std::string hex = "8002";
  for (int i = 0; i < 200; ++i) hex += "5d";
  auto deep = run(hex + "2e", limits);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kResourceExhausted);

  limits = {};
  limits.max_nodes = 100;
  hex = "80025d";  // one list, then APPEND of fresh ints until the budget runs out
  for (int i = 0; i < 200; ++i) hex += "4b0161";
  auto wide = run(hex + "2e", limits);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.status().code(), StatusCode::kResourceExhausted);

  limits = {};
  limits.max_memo = 4;
  hex = "80024b01";
  for (int i = 0; i < 8; ++i) hex += "710" + std::to_string(i);  // BINPUT i
  auto memo = run(hex + "2e", limits);
  ASSERT_FALSE(memo.ok());
  EXPECT_EQ(memo.status().code(), StatusCode::kResourceExhausted);
}

TEST(PickleMachine, GlobalsAreSymbolicAndCallsAreRecorded) {
  // GLOBAL 'os system', SHORT_BINUNICODE 'x', TUPLE1, REDUCE, STOP.
  auto tree = run("8002636f730a73797374656d0a8c01788552" "2e");
  ASSERT_TRUE(tree.ok()) << tree.status().to_string();
  const PickleValue* root = tree->root();
  ASSERT_EQ(root->kind, PickleKind::kObject);
  ASSERT_NE(root->callable_global(), nullptr);
  EXPECT_EQ(root->callable_global()->text, "os.system");
  EXPECT_EQ(tree->called_globals(), (std::vector<std::string>{"os.system"}));
}

// Pickles walked against a real archive's storages, with no tensors of their own.
Result<pytorch::TorchTensors> collect(std::string_view hex) {
  auto zip = pytorch::ZipArchive::open(fixture("state_dict.pt"));
  if (!zip.ok()) return zip.status();
  TM_ASSIGN_OR_RETURN(pytorch::PickleTree tree, run(hex));
  return pytorch::collect_tensors(tree, *zip, "state_dict/", "test.pkl");
}

TEST(TorchObjects, CyclesTerminateAndDeepNestingIsRefused) {
  // A list that contains itself: EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP.
  auto cycle = collect("80025d71006800612e");
  ASSERT_TRUE(cycle.ok()) << cycle.status().to_string();
  EXPECT_TRUE(cycle->tensors.empty());

  std::string hex = "8002";
  for (int i = 0; i < 300; ++i) hex += "5d";
  for (int i = 0; i < 299; ++i) hex += "61";
  auto deep = collect(hex + "2e");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("deeper than"), std::string::npos) << deep.status().message();
}

// _rebuild_tensor_v2 over state_dict.pt's storage '0' (6 floats), as Python's pickler writes it.
constexpr std::string_view kTensorPickle =
    "63746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a71002828580700000073746f72616765710163"
    "746f7263680a466c6f617453746f726167650a71025801000000307103580300000063707571044b06747105514b004b06857106"
    "4b018571078963636f6c6c656374696f6e730a4f726465726564446963740a71082952710974710a52710b";

// x0 = [leaf]; x(i+1) = [x(i), x(i)] for `levels` levels: 2^levels paths through few nodes.
std::string doubling_dag(std::string_view leaf_hex, int levels) {
  std::string hex = "80025d" + std::string(leaf_hex) + (leaf_hex.empty() ? "" : "61");
  for (int i = 0; i < levels; ++i) hex += "71c8" "5d" "68c8" "61" "68c8" "61";  // BINPUT 200; []; (GET 200; APPEND) x2
  return hex + "2e";
}

TEST(TorchObjects, SharedSubtreesWithoutTensorsAreWalkedOnce) {
  auto dag = collect(doubling_dag("4b01", 60));  // 2^60 paths to one int
  ASSERT_TRUE(dag.ok()) << dag.status().to_string();
  EXPECT_TRUE(dag->tensors.empty());
}

TEST(TorchObjects, SharedTensorsAreListedUnderEveryPathUpToALimit) {
  auto zip = pytorch::ZipArchive::open(fixture("state_dict.pt"));
  ASSERT_TRUE(zip.ok());
  auto small = run(doubling_dag(kTensorPickle, 3));
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  auto listed = pytorch::collect_tensors(*small, *zip, "state_dict/", "test.pkl");
  ASSERT_TRUE(listed.ok()) << listed.status().to_string();
  ASSERT_EQ(listed->tensors.size(), 8u);
  EXPECT_EQ(listed->tensors.front().name, "0.0.0.0");
  EXPECT_EQ(listed->tensors.back().name, "1.1.1.0");
  EXPECT_EQ(listed->tensors.front().shape, (std::vector<uint64_t>{6}));
  EXPECT_EQ(listed->tensors.front().offset, listed->tensors.back().offset);

  auto huge = run(doubling_dag(kTensorPickle, 60));
  ASSERT_TRUE(huge.ok()) << huge.status().to_string();
  pytorch::CollectLimits limits;
  limits.max_tensors = 1000;
  auto capped = pytorch::collect_tensors(*huge, *zip, "state_dict/", "test.pkl", limits);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.status().code(), StatusCode::kResourceExhausted) << capped.status().to_string();
  limits = {};
  limits.max_visits = 5000;
  auto visits = pytorch::collect_tensors(*huge, *zip, "state_dict/", "test.pkl", limits);
  ASSERT_FALSE(visits.ok());
  EXPECT_NE(visits.status().message().find("paths"), std::string::npos) << visits.status().to_string();
}

// ----- fuzz-ish robustness --------------------------------------------------------------------

TEST(PyTorchRobustness, EveryPrefixOfASmallFixtureFailsCleanly) {
  const std::string bytes = testing::read_bytes(fixture("prefixed.pth"));
  ASSERT_GT(bytes.size(), 1000u);
  testing::TempDir dir;
  const fs::path path = dir / "prefix.pt";
  for (size_t length = 0; length < bytes.size(); ++length) {
    testing::write_bytes(path, std::string_view(bytes).substr(0, length));
    auto result = pytorch::open_file(path);
    ASSERT_FALSE(result.ok()) << "prefix of " << length << " bytes opened";
    ASSERT_NE(result.status().message().find(path.string()), std::string::npos) << result.status().message();
  }
  testing::write_bytes(path, bytes);
  EXPECT_TRUE(pytorch::open_file(path).ok());
}

void put_u32(std::string& bytes, uint64_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + static_cast<uint64_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

TEST(PyTorchRobustness, ByteFlipsInDataPklNeverCrash) {
  const fs::path source = fixture("module.pt");
  const std::string original = testing::read_bytes(source);
  auto zip = pytorch::ZipArchive::open(source);
  ASSERT_TRUE(zip.ok());
  const pytorch::ZipEntry* pickle = zip->find("module/data.pkl");
  ASSERT_NE(pickle, nullptr);
  auto data = zip->data_offset(*pickle);
  ASSERT_TRUE(data.ok());
  const uint64_t begin = *data;
  const uint64_t size = pickle->uncompressed_size;

  testing::TempDir dir;
  const fs::path path = dir / "mutant.pt";
  std::mt19937 rng(20240611);
  int opened = 0;
  int pickle_errors = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string mutant = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const uint64_t at = begin + rng() % size;
      mutant[at] = static_cast<char>(static_cast<unsigned char>(mutant[at]) ^ (1u << (rng() % 8)));
    }
    // Fix the CRC so the mutation reaches the pickle machine instead of the checksum.
    put_u32(mutant, pickle->central_header_offset + 16, pytorch::zip_crc32(std::string_view(mutant).substr(begin, size)));
    testing::write_bytes(path, mutant);
    auto result = pytorch::open_file(path);
    if (result.ok()) {
      ++opened;
      for (const TensorInfo& tensor : (*result)->tensors()) {
        auto bytes = (*result)->tensor_bytes(tensor);
        ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
      }
    } else {
      ASSERT_NE(result.status().message().find(path.string()), std::string::npos) << result.status().message();
      if (result.status().message().find("pickle byte") != std::string::npos ||
          result.status().message().find("data.pkl byte") != std::string::npos) {
        ++pickle_errors;
      }
    }
  }
  EXPECT_GT(pickle_errors, 100) << "mutations should reach the pickle machine";
  EXPECT_GT(opened, 10) << "some mutations only change values";
}

TEST(PyTorchRobustness, ByteFlipsAnywhereNeverCrash) {
  const std::string original = testing::read_bytes(fixture("zip64.pt"));
  testing::TempDir dir;
  const fs::path path = dir / "mutant.pt";
  std::mt19937 rng(7);
  int crc_errors = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::string mutant = original;
    const uint64_t at = rng() % mutant.size();
    mutant[at] = static_cast<char>(rng() & 0xFF);
    testing::write_bytes(path, mutant);
    auto result = pytorch::open_file(path);
    if (result.ok()) {
      for (const TensorInfo& tensor : (*result)->tensors()) ASSERT_TRUE((*result)->tensor_bytes(tensor).ok());
    } else if (result.status().message().find("CRC-32") != std::string::npos) {
      ++crc_errors;
    }
  }
  EXPECT_GT(crc_errors, 0);
}

// A stored zip archive with the given (name, data) entries in order, names repeated as given.
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                       std::vector<uint64_t>* central_offsets, std::vector<uint64_t>* local_offsets) {
  std::string file, directory;
  const auto le = [](std::string& out, uint64_t value, unsigned width) {
    for (unsigned i = 0; i < width; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
  };
  std::vector<uint64_t> central_in_directory;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = pytorch::zip_crc32(data);
    local_offsets->push_back(file.size());
    le(file, 0x04034b50, 4);
    le(file, 20, 2), le(file, 0, 2), le(file, 0, 2), le(file, 0, 4);
    le(file, crc, 4), le(file, data.size(), 4), le(file, data.size(), 4);
    le(file, name.size(), 2), le(file, 0, 2);
    file += name + data;
    central_in_directory.push_back(directory.size());
    le(directory, 0x02014b50, 4);
    le(directory, 20, 2), le(directory, 20, 2), le(directory, 0, 2), le(directory, 0, 2), le(directory, 0, 4);
    le(directory, crc, 4), le(directory, data.size(), 4), le(directory, data.size(), 4);
    le(directory, name.size(), 2), le(directory, 0, 2), le(directory, 0, 2), le(directory, 0, 2);
    le(directory, 0, 2), le(directory, 0, 4), le(directory, local_offsets->back(), 4);
    directory += name;
  }
  const uint64_t directory_offset = file.size();
  for (uint64_t offset : central_in_directory) central_offsets->push_back(directory_offset + offset);
  file += directory;
  le(file, 0x06054b50, 4);
  le(file, 0, 4), le(file, entries.size(), 2), le(file, entries.size(), 2);
  le(file, directory.size(), 4), le(file, directory_offset, 4), le(file, 0, 2);
  return file;
}

// Python's zipfile (so torch.load) reads the last of two same-named entries; refuse the ambiguity.
TEST(ZipArchive, DuplicateEntryNamesAreRefusedNamingBothOffsets) {
  testing::TempDir dir;
  const auto path = dir / "duplicate.pt";
  std::vector<uint64_t> central, local;
  testing::write_bytes(path, stored_zip({{"archive/data.pkl", "\x80\x02}q\x00."},
                                         {"archive/data/0", std::string(16, 'a')},
                                         {"archive/data/0", std::string(16, 'b')}},
                                        &central, &local));
  for (const Status& status : {pytorch::ZipArchive::open(path).status(), pytorch::open_file(path).status()}) {
    EXPECT_EQ(status.code(), StatusCode::kFormatError) << status.to_string();
    const std::string& message = status.message();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("duplicate entry name 'archive/data/0'"), std::string::npos) << message;
    for (uint64_t offset : {central[1], central[2], local[1], local[2]}) {
      EXPECT_NE(message.find(std::to_string(offset)), std::string::npos) << offset << ": " << message;
    }
  }
  std::vector<uint64_t> unused_central, unused_local;
  testing::write_bytes(path, stored_zip({{"archive/data.pkl", "x"}, {"archive/data/0", "y"}}, &unused_central,
                                        &unused_local));
  EXPECT_TRUE(pytorch::ZipArchive::open(path).ok());
}

}  // namespace
}  // namespace tensormorph
