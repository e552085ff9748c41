// Exact quantiles: tm.radix_histogram@1 on the CPU against its reference, radix selection against
// sorting for every decodable dtype, and `tensormorph quantiles` against numpy on real files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_kernels.h"
#include "compute/ops/radix_histogram.h"
#include "core/quantize/quantize.h"
#include "engine/quantiles.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/decode.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using testing::run_cli;
using testing::TempDir;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Bytes of `dtype` holding `elems` values: weights-like normal values with zeros of both signs,
/// NaN and infinities planted (where the dtype has them), re-encoded from float32; raw random bits
/// for the block types (random scales and quants, non-finite scales included).
std::vector<std::byte> sample(DType dtype, uint64_t elems, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(elems);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& x : v) x = normal(rng);
  for (uint64_t i = 0; i < elems; i += 61) v[i] = (i / 61) % 2 ? 0.0f : -0.0f;
  for (uint64_t i = 3; i < elems; i += 89) v[i] = v[i - 1];  // ties
  if (elems > 400) {
    v[7] = kNaN;
    v[100] = kInf;
    v[200] = -kInf;
  }
  if (auto encoded = encode_from_f32(dtype, v); encoded.ok()) return *encoded;
  const DTypeInfo& info = dtype_info(dtype);
  std::vector<std::byte> bytes(elems / info.block_elems * info.block_bytes);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  return bytes;
}

/// The element count of a sample of `dtype`: whole blocks.
uint64_t sample_elems(DType dtype, uint64_t about) {
  const uint64_t block = dtype_info(dtype).block_elems;
  return std::max<uint64_t>(1, about / block) * block;
}

/// A RadixPass over host bytes through the CPU reference.
engine::RadixPass reference_pass(DType dtype, std::span<const std::byte> bytes, uint64_t elems) {
  return [=](const ops::RadixParams& params, std::span<const uint64_t> prefixes, std::span<uint64_t> counts,
             std::span<uint64_t, ops::kRadixClasses> classes) {
    return ops::radix_histogram_reference({dtype, bytes, elems}, params, prefixes, counts, classes);
  };
}

/// What the sorted finite values say, as numpy computes each quantile (independent of radix
/// selection): -0.0 ordered below +0.0.
struct Sorted {
  std::vector<double> v;
  explicit Sorted(std::vector<double> values) : v(std::move(values)) {
    std::sort(v.begin(), v.end(), [](double a, double b) { return a < b || (a == b && std::signbit(a) && !std::signbit(b)); });
  }
  double inverted_cdf(double q) const {
    const double index = static_cast<double>(v.size()) * q - 1;
    const double previous = std::floor(index);
    double rank = index - previous > 0 ? previous + 1 : previous;
    rank = std::clamp(rank, 0.0, static_cast<double>(v.size() - 1));
    return v[static_cast<size_t>(rank)];
  }
  double linear(double q) const {
    const double h = static_cast<double>(v.size() - 1) * q;
    if (h >= static_cast<double>(v.size() - 1)) return v.back();
    const double lo = std::floor(h), t = h - lo;
    const double a = v[static_cast<size_t>(lo)], b = v[static_cast<size_t>(lo) + 1];
    const double diff = b - a;
    return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
  }
};

std::vector<double> finite_values(DType dtype, std::span<const std::byte> bytes, uint64_t elems) {
  std::vector<float> decoded(elems);
  EXPECT_TRUE(decode_to_f32(dtype, bytes, elems, decoded.data()).ok());
  std::vector<double> out;
  for (float x : decoded) {
    if (std::isfinite(x)) out.push_back(x);
  }
  return out;
}

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

const std::vector<double> kProbabilities = {0, 1e-6, 0.001, 0.01, 0.1, 0.25, 0.3, 0.5, 0.75, 0.9, 0.99, 0.999, 1};

void expect_matches_sorting(DType dtype, std::span<const std::byte> bytes, uint64_t elems, const std::string& label) {
  auto q = engine::quantiles_of(reference_pass(dtype, bytes, elems), dtype, {kProbabilities, true});
  ASSERT_TRUE(q.ok()) << label << ": " << q.status().to_string();
  const Sorted sorted(finite_values(dtype, bytes, elems));
  ASSERT_EQ(q->finite, sorted.v.size()) << label;
  if (sorted.v.empty()) {
    EXPECT_TRUE(q->values.empty()) << label;
    return;
  }
  ASSERT_EQ(q->values.size(), kProbabilities.size()) << label;
  for (size_t i = 0; i < kProbabilities.size(); ++i) {
    const double p = kProbabilities[i];
    EXPECT_TRUE(same_bits(q->values[i].inverted_cdf, sorted.inverted_cdf(p)))
        << label << " inverted_cdf at " << p << ": " << q->values[i].inverted_cdf << " vs " << sorted.inverted_cdf(p);
    EXPECT_TRUE(same_bits(q->values[i].linear, sorted.linear(p)))
        << label << " linear at " << p << ": " << q->values[i].linear << " vs " << sorted.linear(p);
  }
  EXPECT_TRUE(same_bits(q->median, sorted.linear(0.5))) << label;
  EXPECT_TRUE(same_bits(q->robust_range[0], sorted.linear(0.001))) << label;
  EXPECT_TRUE(same_bits(q->robust_range[1], sorted.linear(0.999))) << label;
  std::vector<double> deviations;
  for (double x : sorted.v) deviations.push_back(std::fabs(x - q->median));
  ASSERT_TRUE(q->median_absolute_deviation.has_value()) << label;
  EXPECT_TRUE(same_bits(*q->median_absolute_deviation, Sorted(deviations).linear(0.5))) << label;
}

TEST(RadixSelection, EqualsSortingForEveryDecodableDtype) {
  for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
    const DType dtype = static_cast<DType>(d);
    if (!dtype_decodable(dtype)) continue;
    for (const uint64_t about : {uint64_t{1}, uint64_t{5}, uint64_t{4099}}) {
      const uint64_t elems = sample_elems(dtype, about);
      const auto bytes = sample(dtype, elems, 11 + static_cast<uint32_t>(d));
      expect_matches_sorting(dtype, bytes, elems, std::string(dtype_name(dtype)) + " x" + std::to_string(elems));
    }
  }
}

TEST(RadixSelection, EdgeCases) {
  auto f32 = [](std::vector<float> v) { return std::vector<std::byte>(reinterpret_cast<const std::byte*>(v.data()),
                                                                      reinterpret_cast<const std::byte*>(v.data() + v.size())); };
  const std::vector<std::pair<std::string, std::vector<float>>> cases = {
      {"one element", {0.25f}},
      {"all equal", std::vector<float>(1000, -3.5f)},
      {"zeros of both signs", {0.0f, -0.0f, 0.0f, -0.0f, -0.0f}},
      {"no finite value", {kNaN, kInf, -kInf}},
      {"extremes", {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(), 1.0f}},
      {"two values", {1.0f, 2.0f}},
  };
  for (const auto& [label, values] : cases) {
    const auto bytes = f32(values);
    expect_matches_sorting(DType::kF32, bytes, values.size(), label);
  }
  // The answer's -0.0 is below +0.0: the lowest of {+0, -0} is -0, the highest +0.
  const auto zeros = f32({0.0f, -0.0f});
  auto q = engine::quantiles_of(reference_pass(DType::kF32, zeros, 2), DType::kF32, {{0, 1}, false});
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(std::signbit(q->values[0].inverted_cdf));
  EXPECT_FALSE(std::signbit(q->values[1].inverted_cdf));
}

TEST(RadixSelection, PassesTakenFollowTheDtype) {
  // BF16's keys are known after the top digit, F32's after two, the deviation key after four more.
  for (const auto& [dtype, value_passes] : {std::pair{DType::kBF16, 1u}, std::pair{DType::kF32, 2u}}) {
    const uint64_t elems = 5000;
    const auto bytes = sample(dtype, elems, 3);
    auto q = engine::quantiles_of(reference_pass(dtype, bytes, elems), dtype, {{0.5}, false});
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->passes, value_passes) << dtype_name(dtype);
    auto with_mad = engine::quantiles_of(reference_pass(dtype, bytes, elems), dtype, {{0.5}, true});
    ASSERT_TRUE(with_mad.ok());
    EXPECT_EQ(with_mad->passes, value_passes + 4) << dtype_name(dtype);
  }
}

TEST(RadixSelection, CountsThatChangeBetweenPassesAreAnErrorNotAnAnswer) {
  const uint64_t elems = 4096;
  auto first = sample(DType::kF32, elems, 5);
  auto second = sample(DType::kF32, elems, 6);
  int calls = 0;
  const engine::RadixPass changing = [&](const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                                         std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes) {
    const auto& bytes = calls++ == 0 ? first : second;
    return ops::radix_histogram_reference({DType::kF32, bytes, elems}, params, prefixes, counts, classes);
  };
  auto q = engine::quantiles_of(changing, DType::kF32, {{0.1, 0.5, 0.9}, false});
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInternal);
  EXPECT_NE(q.status().message().find("change"), std::string::npos) << q.status().message();
}

TEST(RadixSelection, ProbabilitiesOutsideTheUnitIntervalAreRefused) {
  const auto bytes = sample(DType::kF32, 16, 1);
  for (double p : {-0.1, 1.5, std::nan("")}) {
    auto q = engine::quantiles_of(reference_pass(DType::kF32, bytes, 16), DType::kF32, {{p}, false});
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(RadixHistogramCpu, EqualsTheReferenceForAnyThreadCountOnRandomBits) {
  std::mt19937_64 rng(17);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ4_K, DType::kQ8_0, DType::kF8E4M3}) {
    const uint64_t elems = sample_elems(dtype, 300000);
    const DTypeInfo& info = dtype_info(dtype);
    std::vector<std::byte> bytes(elems / info.block_elems * info.block_bytes);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    const std::vector<uint64_t> prefixes = {0x3c00, 0x43ff, 0xbc23, 0x8000, 0x7fff, 0x3c00};  // one repeated
    for (const ops::RadixParams params : {ops::RadixParams{ops::RadixKey::kValue, 16, 16, 0},
                                          ops::RadixParams{ops::RadixKey::kValue, 0, 16, 0},
                                          ops::RadixParams{ops::RadixKey::kValue, 20, 12, 0},      // the index's histogram
                                          ops::RadixParams{ops::RadixKey::kMagnitude, 19, 12, 0},  // no prefixes
                                          ops::RadixParams{ops::RadixKey::kMagnitude, 13, 3, 0},
                                          ops::RadixParams{ops::RadixKey::kDeviation, 48, 16, -0.5}}) {
      const bool with_prefixes = params.shift + params.bits < ops::radix_key_bits(params.key);
      const std::span<const uint64_t> p = with_prefixes ? std::span<const uint64_t>(prefixes) : std::span<const uint64_t>();
      std::vector<uint64_t> want(ops::radix_count_slots(params, p.size()));
      std::array<uint64_t, ops::kRadixClasses> want_classes{};
      ASSERT_TRUE(ops::radix_histogram_reference({dtype, bytes, elems}, params, p, want, want_classes).ok());
      for (const uint32_t threads : {1u, 2u, 3u, 0u}) {
        std::vector<uint64_t> got(want.size(), 77);
        std::array<uint64_t, ops::kRadixClasses> got_classes{};
        ASSERT_TRUE(cpu::radix_histogram({dtype, bytes, elems}, params, p, got, got_classes, threads).ok());
        EXPECT_EQ(got, want) << dtype_name(dtype) << " shift " << params.shift << " threads " << threads;
        EXPECT_EQ(got_classes, want_classes) << dtype_name(dtype) << " threads " << threads;
      }
    }
  }
}

TEST(RadixHistogram, MalformedParametersAreRefusedByName) {
  const std::vector<uint64_t> one = {1};
  std::vector<uint64_t> counts(1 << 16);
  std::array<uint64_t, ops::kRadixClasses> classes{};
  const std::vector<float> v = {1.0f};
  const ops::TensorView t{DType::kF32, std::as_bytes(std::span(v)), 1};
  // A digit past the key, a prefix above the top digit, too wide a digit, a non-finite centre.
  EXPECT_FALSE(ops::radix_histogram_reference(t, {ops::RadixKey::kValue, 24, 16, 0}, {}, counts, classes).ok());
  EXPECT_FALSE(ops::radix_histogram_reference(t, {ops::RadixKey::kValue, 16, 16, 0}, one, counts, classes).ok());
  EXPECT_FALSE(ops::radix_histogram_reference(t, {ops::RadixKey::kValue, 0, 17, 0}, {}, counts, classes).ok());
  EXPECT_FALSE(ops::radix_histogram_reference(t, {ops::RadixKey::kDeviation, 48, 16, std::nan("")}, {}, counts, classes).ok());
  std::vector<uint64_t> short_counts(100);
  const auto status = ops::radix_histogram_reference(t, {ops::RadixKey::kValue, 16, 16, 0}, {}, short_counts, classes);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(TM_OP_RADIX_HISTOGRAM), std::string::npos) << status.message();
}

// ---- The command against numpy ----------------------------------------------------------------

/// The Debian interpreter (its python3-numpy), else whatever python3 is first on PATH.
std::string python() { return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

nlohmann::json run_numpy(const std::filesystem::path& file, const std::string& probabilities) {
  const std::string script = std::string(TM_SOURCE_DIR) + "/tests/numpy_quantiles.py";
  const std::string command = python() + " '" + script + "' '" + file.string() + "' " + probabilities;
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return {};
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << "numpy reference failed: " << command;
  return nlohmann::json::parse(out, nullptr, false);
}

/// A safetensors file of the tensors numpy can read: random shapes, 1-D and N x 1, planted
/// non-finite values and zeros of both signs, all-equal values, one element.
std::filesystem::path write_numpy_file(const TempDir& dir) {
  std::mt19937_64 rng(23);
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<uint64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::vector<Tensor> tensors;
  auto add = [&](std::string name, DType dtype, std::vector<uint64_t> shape) {
    uint64_t elems = 1;
    for (uint64_t d : shape) elems *= d;
    tensors.push_back({std::move(name), dtype, std::move(shape), sample(dtype, elems, static_cast<uint32_t>(rng()))});
  };
  add("w.f32", DType::kF32, {333, 257});
  add("w.bf16", DType::kBF16, {128, 384});
  add("w.f16", DType::kF16, {77, 91});
  add("vector.f32", DType::kF32, {5001});
  add("column.bf16", DType::kBF16, {999, 1});
  add("one.f32", DType::kF32, {1});
  std::vector<float> equal(4000, 0.125f);
  tensors.push_back({"equal.f32", DType::kF32, {40, 100}, *encode_from_f32(DType::kF32, equal)});
  std::vector<std::byte> bytes(3000);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  tensors.push_back({"codes.i8", DType::kI8, {3000}, bytes});
  std::vector<safetensors::TensorToWrite> write;
  for (const auto& t : tensors) write.push_back({t.name, t.dtype, t.shape, t.bytes});
  const auto path = dir / "numpy.safetensors";
  EXPECT_TRUE(safetensors::write_file(path, write, {}).ok());
  return path;
}

TEST(QuantilesCommand, EqualsNumpyOnEveryTensor) {
  TempDir dir;
  const auto file = write_numpy_file(dir);
  const std::string probabilities = "0,0.001,0.01,0.25,0.5,0.7,0.99,0.999,1";
  const auto want = run_numpy(file, probabilities);
  ASSERT_TRUE(want.is_object()) << "numpy reference printed no JSON";
  const auto r = run_cli({"quantiles", file.string(), "-p", probabilities, "--mad", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(got.is_object()) << r.out;
  EXPECT_EQ(got["schema"], "tensormorph.quantiles/1");
  ASSERT_EQ(got["tensors"].size(), want.size());
  for (const auto& t : got["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    const auto& w = want.at(name);
    EXPECT_EQ(t["finite"], w["finite"]);
    EXPECT_EQ(t["nan"], w["nan"]);
    EXPECT_EQ(t["pos_inf"], w["pos_inf"]);
    EXPECT_EQ(t["neg_inf"], w["neg_inf"]);
    ASSERT_EQ(t["quantiles"].size(), w["linear"].size());
    // Compared as numbers: numpy's partition may return either zero where the answer is a zero.
    for (size_t i = 0; i < t["quantiles"].size(); ++i) {
      EXPECT_EQ(t["quantiles"][i]["linear"].get<double>(), w["linear"][i].get<double>()) << "linear " << i;
      EXPECT_EQ(t["quantiles"][i]["inverted_cdf"].get<double>(), w["inverted_cdf"][i].get<double>()) << "inverted " << i;
    }
    EXPECT_EQ(t["median"].get<double>(), w["median"].get<double>());
    EXPECT_EQ(t["robust_range"][0].get<double>(), w["robust_range"][0].get<double>());
    EXPECT_EQ(t["robust_range"][1].get<double>(), w["robust_range"][1].get<double>());
    EXPECT_EQ(t["median_absolute_deviation"].get<double>(), w["median_absolute_deviation"].get<double>());
  }
}

TEST(QuantilesCommand, TableCsvExplainAndErrors) {
  TempDir dir;
  const auto file = write_numpy_file(dir);
  auto r = run_cli({"quantiles", file.string(), "--tensor", "w.*", "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("w.bf16"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("vector.f32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("99.9%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(TM_OP_RADIX_HISTOGRAM), std::string::npos) << "placement records: " << r.out;
  r = run_cli({"quantiles", file.string(), "--tensor", "one.f32", "--csv", "-p", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("name,dtype,count,finite"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one.f32,F32,1,1,0,0,0,0.5,"), std::string::npos) << r.out;
  r = run_cli({"quantiles", file.string(), "-p", "1.5"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  r = run_cli({"quantiles", file.string(), "--tensor", "nothing*"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no tensor matches"), std::string::npos) << r.err;
  r = run_cli({"quantiles", (dir / "missing.safetensors").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.safetensors"), std::string::npos) << r.err;
}

TEST(QuantilesCommand, ResultsAreKeptBesideTheIndexUntilTheFileChanges) {
  TempDir dir;
  const auto file = write_numpy_file(dir);
  const std::vector<std::string> args = {"quantiles", file.string(), "-p", "0.01,0.5", "--json", "--explain"};
  auto first = run_cli(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second = run_cli(args);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto a = nlohmann::json::parse(first.out), b = nlohmann::json::parse(second.out);
  EXPECT_FALSE(a["placements"].empty());
  EXPECT_TRUE(b["placements"].empty()) << "asking twice reads nothing: " << b["placements"].dump();
  ASSERT_EQ(a["tensors"].size(), b["tensors"].size());
  for (size_t i = 0; i < a["tensors"].size(); ++i) {
    EXPECT_EQ(a["tensors"][i]["source"], "computed");
    EXPECT_EQ(b["tensors"][i]["source"], "stored");
    EXPECT_EQ(a["tensors"][i]["quantiles"], b["tensors"][i]["quantiles"]);
    EXPECT_EQ(a["tensors"][i]["median"], b["tensors"][i]["median"]);
  }
  EXPECT_TRUE(std::filesystem::exists(file.string() + ".tmindex.analyses.json"));
  auto again = run_cli({"quantiles", file.string(), "-p", "0.01,0.5", "--json", "--recompute"});
  EXPECT_EQ(nlohmann::json::parse(again.out)["tensors"][0]["source"], "computed");
  // Another file under the same name: nothing kept for the old one is used.
  std::vector<float> other(5001, 2.5f);
  const safetensors::TensorToWrite replaced[] = {{"vector.f32", DType::kF32, {5001}, std::as_bytes(std::span(other))}};
  ASSERT_TRUE(safetensors::write_file(file, replaced, {}).ok());
  auto fresh = run_cli({"quantiles", file.string(), "-p", "0.01,0.5", "--json"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  const auto f = nlohmann::json::parse(fresh.out);
  ASSERT_EQ(f["tensors"].size(), 1u);
  EXPECT_EQ(f["tensors"][0]["source"], "computed");
  EXPECT_EQ(f["tensors"][0]["median"], 2.5);
}

TEST(QuantilesCommand, ConstraintsNamingNoBackendAreRefusedAndUnmetPreferencesSaid) {
  TempDir dir;
  const auto file = write_numpy_file(dir);
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (dir / "settings.json").string());
  auto r = run_cli({"quantiles", file.string(), "--tensor", "one.f32", "--compute", "prefer=cdua"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("prefer=cdua names no backend (known: cpu"), std::string::npos) << r.err;
  // A persisted constraint naming no backend is a warning: the plugin may come back.
  testing::write_bytes(dir / "settings.json", R"({"compute": {"never": ["vulkan"]}})");
  r = run_cli({"quantiles", file.string(), "--tensor", "one.f32"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: the setting compute never=vulkan names no backend"), std::string::npos) << r.err;
  if (TM_CUDA_MODULE_BUILT) {
    // The CUDA module beside the binary loads everywhere; without a device it cannot serve.
    r = run_cli({"quantiles", file.string(), "--tensor", "one.f32", "--compute", "prefer=cuda", "--recompute"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("note: the preferred backend did not run"), std::string::npos) << r.err;
  }
}

TEST(QuantilesCommand, RealCheckpoints) {
  // GGUF, safetensors BF16 and a PyTorch archive: every tensor answers, and the median lies
  // inside the robust range. Copies, so that the results kept beside them stay out of testdata.
  const auto real = testing::testdata_dir() / "real";
  TempDir dir;
  for (const char* name : {"stories260K.gguf", "ollama_llama-2-tiny-random.gguf", "hqqsvd_test_bf16.safetensors",
                           "taef2_decoder.pth"}) {
    ASSERT_TRUE(std::filesystem::exists(real / name)) << real / name;
    const auto path = dir / name;
    std::filesystem::copy_file(real / name, path);
    const auto r = run_cli({"quantiles", path.string(), "--json", "-p", "0.5"});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out;
    for (const auto& t : j["tensors"]) {
      if (t["finite"].get<uint64_t>() == 0) continue;
      EXPECT_LE(t["robust_range"][0].get<double>(), t["median"].get<double>()) << t["name"];
      EXPECT_GE(t["robust_range"][1].get<double>(), t["median"].get<double>()) << t["name"];
    }
  }
}

// ---- The exactness ladder ----------------------------------------------------------------------

/// A file with one weights-like F32 matrix (NaN, infinities and zeros planted) and its finite
/// values sorted, for checking what the approximate rungs bound.
struct LadderFixture {
  TempDir dir;
  std::filesystem::path file = dir.path() / "ladder.safetensors";
  Sorted sorted{{}};
  LadderFixture() {
    std::mt19937 rng(7);
    std::student_t_distribution<float> heavy(3.0f);  // heavy tails, as trained weights have
    std::vector<float> v(512 * 1024);
    for (auto& x : v) x = 0.02f * heavy(rng);
    v[5] = kNaN;
    v[6] = kInf;
    v[7] = -kInf;
    v[8] = 0.0f;
    v[9] = -0.0f;
    std::vector<double> finite;
    for (float x : v) {
      if (std::isfinite(x)) finite.push_back(x);
    }
    sorted = Sorted(std::move(finite));
    const safetensors::TensorToWrite tensors[] = {{"w", DType::kF32, {512, 1024}, std::as_bytes(std::span(v))}};
    EXPECT_TRUE(safetensors::write_file(file, tensors, {}).ok());
  }
  void settings(const std::string& compute) const { testing::write_bytes(dir.path() / "settings.json", compute); }
};

constexpr const char* kLadderProbabilities = "0,0.001,0.01,0.25,0.5,0.75,0.99,0.999,1";

/// Each value's interval holds the true quantile (both definitions) and the estimate.
void expect_intervals_hold(const nlohmann::json& t, const Sorted& sorted) {
  ASSERT_EQ(t["exactness"], "approximate") << t.dump();
  for (const auto& v : t["quantiles"]) {
    const double q = v["probability"].get<double>();
    ASSERT_TRUE(v.contains("interval")) << v.dump();
    const double lo = v["interval"][0].get<double>(), hi = v["interval"][1].get<double>();
    EXPECT_LE(lo, sorted.inverted_cdf(q)) << "q " << q;
    EXPECT_GE(hi, sorted.inverted_cdf(q)) << "q " << q;
    EXPECT_LE(lo, sorted.linear(q)) << "q " << q;
    EXPECT_GE(hi, sorted.linear(q)) << "q " << q;
    EXPECT_LE(lo, v["linear"].get<double>());
    EXPECT_GE(hi, v["linear"].get<double>());
  }
}

TEST(QuantileLadder, OverTheTimeBudgetTheLadderIsPrintedAndTheExitCodeIsThree) {
  LadderFixture f;
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (f.dir.path() / "settings.json").string());
  f.settings(R"({"compute": {"time_budget_seconds": 1e-9}})");
  auto r = run_cli({"quantiles", f.file.string(), "-p", kLadderProbabilities});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("needs consent"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("over the time budget"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exact "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sample "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("histogram "), std::string::npos) << "no index yet, so no stored histogram: " << r.err;
  EXPECT_NE(r.err.find("--consent"), std::string::npos) << r.err;

  r = run_cli({"quantiles", f.file.string(), "-p", kLadderProbabilities, "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["needs_consent"], 1);
  const auto& ladder = j["tensors"][0]["needs_consent"]["ladder"];
  ASSERT_EQ(ladder.size(), 2u) << ladder.dump();
  EXPECT_EQ(ladder[0]["id"], "exact");
  EXPECT_EQ(ladder[1]["id"], "sample");
  EXPECT_GT(ladder[0]["estimated_ms"].get<double>(), 0.0);
  EXPECT_FALSE(ladder[1]["error_bound"].get<std::string>().empty());

  // Consent to exact runs it anyway and gives what no budget gives.
  r = run_cli({"quantiles", f.file.string(), "-p", kLadderProbabilities, "--json", "--consent", "exact"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto exact = nlohmann::json::parse(r.out)["tensors"][0];
  EXPECT_EQ(exact["exactness"], "exact");
  for (const auto& v : exact["quantiles"]) {
    EXPECT_EQ(v["linear"].get<double>(), f.sorted.linear(v["probability"].get<double>()));
  }
  // The sample's intervals hold the true values; nothing approximate is kept as a result.
  r = run_cli({"quantiles", f.file.string(), "-p", kLadderProbabilities, "--json", "--consent", "sample", "--recompute"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto sampled = nlohmann::json::parse(r.out)["tensors"][0];
  EXPECT_EQ(sampled["rung"], "sample");
  expect_intervals_hold(sampled, f.sorted);
}

TEST(QuantileLadder, TheIndexHistogramIsARungThatReadsNoData) {
  LadderFixture f;
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (f.dir.path() / "settings.json").string());
  ASSERT_EQ(run_cli({"index", f.file.string()}).exit_code, 0);
  f.settings(R"({"compute": {"time_budget_seconds": 1e-9}})");
  auto r = run_cli({"quantiles", f.file.string(), "-p", kLadderProbabilities, "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const auto planned = nlohmann::json::parse(r.out);
  const auto& ladder = planned["tensors"][0]["needs_consent"]["ladder"];
  ASSERT_EQ(ladder.size(), 3u) << ladder.dump();
  EXPECT_EQ(ladder[1]["id"], "histogram");
  r = run_cli({"quantiles", f.file.string(), "-p", kLadderProbabilities, "--json", "--explain", "--consent", "approximate"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& t = j["tensors"][0];
  EXPECT_EQ(t["rung"], "histogram") << "the cheapest approximate rung";
  EXPECT_TRUE(j["placements"].empty()) << "read off the index: " << j["placements"].dump();
  EXPECT_EQ(t["nan"], 1);
  EXPECT_EQ(t["pos_inf"], 1);
  EXPECT_EQ(t["finite"], f.sorted.v.size());
  expect_intervals_hold(t, f.sorted);
  // Each interval is one bin (clamped to the extremes): at most 1/8 of a power of two wide.
  for (const auto& v : t["quantiles"]) {
    const double lo = v["interval"][0].get<double>(), hi = v["interval"][1].get<double>();
    EXPECT_LE(hi - lo, std::max(std::fabs(lo), std::fabs(hi)) / 8 + 1e-37) << v.dump();
  }
  // The table marks approximate values.
  r = run_cli({"quantiles", f.file.string(), "--consent", "histogram"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("~"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rung 'histogram'"), std::string::npos) << r.out;
}

TEST(QuantileLadder, AMemoryBudgetBelowTheWorkingMemoryLeavesOnlyApproximateRungs) {
  LadderFixture f;
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (f.dir.path() / "settings.json").string());
  // The radix pass's outputs are 512 KiB and each thread's counters and chunk 1.25 MiB more; the
  // sample's decode writes 1 MiB.
  f.settings(R"({"compute": {"memory_budget_bytes": 1500000}})");
  auto r = run_cli({"quantiles", f.file.string(), "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  const auto plan = nlohmann::json::parse(r.out)["tensors"][0]["needs_consent"];
  EXPECT_NE(plan["reason"].get<std::string>().find("working memory"), std::string::npos) << plan.dump();
  for (const auto& rung : plan["ladder"]) EXPECT_NE(rung["id"], "exact") << plan.dump();
  // Exact cannot be consented to when it cannot run: the command says so and still exits 3.
  r = run_cli({"quantiles", f.file.string(), "--consent", "exact"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("not on offer"), std::string::npos) << r.err;
  r = run_cli({"quantiles", f.file.string(), "--json", "--consent", "sample"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_intervals_hold(nlohmann::json::parse(r.out)["tensors"][0], f.sorted);
}

TEST(QuantileLadder, TimeBudgetSettingParsesAndRefusesNonsense) {
  TempDir dir;
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (dir.path() / "settings.json").string());
  EXPECT_EQ(run_cli({"config", "set", "compute.time_budget", "1.5m"}).exit_code, 0);
  auto r = run_cli({"config", "get", "compute.time_budget"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("90s"), std::string::npos) << r.out;
  r = run_cli({"config", "set", "compute.time_budget", "soon"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not a time"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli({"config", "set", "compute.time_budget", "off"}).exit_code, 0);
  EXPECT_NE(run_cli({"config", "get", "compute.time_budget"}).out.find("off"), std::string::npos);
}

}  // namespace
}  // namespace tensormorph
