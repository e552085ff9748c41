// The GPU backend's remembered link calibration (src/backends/cuda/gpu_calibration.h) and its
// upload copy crew (copy_crew.h): the host-side parts, which need no device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/copy_crew.h"
#include "backends/cuda/gpu_calibration.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using gpu::DeviceIdentity;
using gpu::LinkRates;

DeviceIdentity device() {
  DeviceIdentity d;
  d.uuid = "5e1d2c3b4a5968778695a4b3c2d1e0ff";
  d.name = "NVIDIA H200";
  d.pci = "0000:19:00";
  d.memory_bytes = uint64_t{150} << 30;
  d.driver_version = 13000;
  d.runtime_version = 13000;
  d.module_version = "1.1";
  d.settings = "probe_mib=64;staging_mib=16;staging_slots=4;copy_threads=8";
  return d;
}

LinkRates rates() {
  LinkRates r;
  r.h2d_pinned = 55.25;
  r.h2d_pageable = 17.5;
  r.h2d_staged = 48.125;
  r.d2h_pinned = 55.0;
  r.d2h_pageable = 14.4;
  r.device_read = 4295.0;
  r.measured = true;
  return r;
}

void expect_same(const LinkRates& a, const LinkRates& b) {
  EXPECT_EQ(a.h2d_pinned, b.h2d_pinned);
  EXPECT_EQ(a.h2d_pageable, b.h2d_pageable);
  EXPECT_EQ(a.h2d_staged, b.h2d_staged);
  EXPECT_EQ(a.d2h_pinned, b.d2h_pinned);
  EXPECT_EQ(a.d2h_pageable, b.d2h_pageable);
  EXPECT_EQ(a.device_read, b.device_read);
  EXPECT_TRUE(b.measured);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

TEST(GpuCalibration, RemembersEveryRateExactlyForTheSameDevice) {
  testing::TempDir dir;
  const auto path = gpu::link_calibration_path(dir.path() / "cuda-calibration", device());
  EXPECT_EQ(path.filename(), "5e1d2c3b4a5968778695a4b3c2d1e0ff");
  ASSERT_TRUE(gpu::remember_link_rates(path, device(), rates(), 1'000'000).ok());
  const auto back = gpu::remembered_link_rates(path, device(), 1'000'000);
  ASSERT_TRUE(back.has_value());
  expect_same(rates(), *back);
  EXPECT_TRUE(gpu::remembered_link_rates(path, device(), 1'000'000 + gpu::kLinkCalibrationLifetimeSeconds - 1));
  size_t files = 0;  // written whole and renamed: no temporary stays behind
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST(GpuCalibration, TheFolderIsTheVendorsOwnInTheUserCache) {
  testing::TempDir dir;
  testing::ScopedEnv cache("XDG_CACHE_HOME", dir.path().string());
  EXPECT_EQ(gpu::link_calibration_dir("cuda"), dir.path() / "tensormorph" / "cuda-calibration");
}

TEST(GpuCalibration, AForeignDeviceDriverModuleOrSettingIsIgnored) {
  testing::TempDir dir;
  const auto path = dir.path() / "entry";
  ASSERT_TRUE(gpu::remember_link_rates(path, device(), rates(), 1'000'000).ok());
  std::vector<DeviceIdentity> others(8, device());
  others[0].uuid = "00000000000000000000000000000001";
  others[1].name = "NVIDIA H100";
  others[2].pci = "0000:1a:00";
  others[3].memory_bytes += 1;
  others[4].driver_version = 12080;
  others[5].runtime_version = 12080;
  others[6].module_version = "1.2";
  others[7].settings = "probe_mib=64;staging_mib=32;staging_slots=4;copy_threads=8";
  for (const auto& other : others) EXPECT_FALSE(gpu::remembered_link_rates(path, other, 1'000'000));
  // Too old, or from the future (the clock went back), or absent.
  EXPECT_FALSE(gpu::remembered_link_rates(path, device(), 1'000'000 + gpu::kLinkCalibrationLifetimeSeconds));
  EXPECT_FALSE(gpu::remembered_link_rates(path, device(), 999'999));
  EXPECT_FALSE(gpu::remembered_link_rates(dir.path() / "absent", device(), 1'000'000));
}

TEST(GpuCalibration, ACorruptEntryIsIgnoredAndOverwritten) {
  testing::TempDir dir;
  const auto path = dir.path() / "entry";
  ASSERT_TRUE(gpu::remember_link_rates(path, device(), rates(), 1'000'000).ok());
  const std::string good = read_file(path);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const std::vector<std::string> bad = {
      "",
      "garbage\n",
      good.substr(0, good.size() - 1),                      // the last line cut off
      good.substr(0, good.find("measured_unix")),           // a line missing
      good + "extra 1\n",                                   // a line too many
      replaced("calibration 1", "calibration 2"),           // another layout
      replaced("h2d_pinned 55.25", "h2d_pinned -55.25"),
      replaced("h2d_pinned 55.25", "h2d_pinned 0"),
      replaced("h2d_pinned 55.25", "h2d_pinned nan"),
      replaced("h2d_pinned 55.25", "h2d_pinned inf"),
      replaced("h2d_pinned 55.25", "h2d_pinned 1e300"),
      replaced("h2d_pinned 55.25", "h2d_pinned 55.25x"),
      replaced("h2d_pinned 55.25", "h2d_pinned  55.25"),
      replaced("h2d_pinned 55.25", "h2d_pageable 55.25"),   // fields out of order
      replaced("measured_unix 1000000", "measured_unix 1e6"),
      replaced("device 5e1d", "device 5e1e"),
      std::string(5000, 'x') + "\n",
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    write_file(path, text);
    EXPECT_FALSE(gpu::remembered_link_rates(path, device(), 1'000'000));
  }
  ASSERT_TRUE(gpu::remember_link_rates(path, device(), rates(), 1'000'000).ok());
  EXPECT_TRUE(gpu::remembered_link_rates(path, device(), 1'000'000));
}

TEST(GpuCalibration, NamesCannotForgeLinesOrPaths) {
  testing::TempDir dir;
  DeviceIdentity forged = device();
  forged.name = "x\nh2d_pinned 1 | driver 1";
  forged.uuid = "../../etc/passwd";
  const auto path = gpu::link_calibration_path(dir.path(), forged);
  EXPECT_EQ(path.parent_path(), dir.path());
  EXPECT_EQ(path.filename().string().find('/'), std::string::npos);
  ASSERT_TRUE(gpu::remember_link_rates(path, forged, rates(), 1'000'000).ok());
  const auto back = gpu::remembered_link_rates(path, forged, 1'000'000);
  ASSERT_TRUE(back.has_value());
  expect_same(rates(), *back);
  EXPECT_EQ(gpu::link_calibration_path(dir.path(), DeviceIdentity{}).filename(), "unidentified");
}

TEST(GpuCalibration, RatesThatAreNoMeasurementAreNotRemembered) {
  testing::TempDir dir;
  LinkRates r = rates();
  r.device_read = 0;
  EXPECT_FALSE(gpu::remember_link_rates(dir.path() / "entry", device(), r, 1'000'000).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "entry"));
}

TEST(GpuCalibration, NoRegularFileNoReadAndNoWrite) {
  testing::TempDir dir;
  const auto path = dir.path() / "entry";
  std::filesystem::create_directory(path);
  EXPECT_FALSE(gpu::remembered_link_rates(path, device(), 1'000'000));
  EXPECT_FALSE(gpu::remember_link_rates(path, device(), rates(), 1'000'000).ok());
}

/// Bytes 0, 1, 2, ... (mod 251) so a misplaced piece shows.
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i % 251);
  return v;
}

TEST(CopyCrew, CopiesChunksInOrderWithAnyNumberOfHelpersAndEitherCopy) {
  struct Setting {
    uint32_t helpers;
    FillCopy copy;
  };
  for (const Setting& setting : {Setting{0, FillCopy::kMemcpy}, Setting{1, FillCopy::kStream},
                                 Setting{3, FillCopy::kMemcpy}, Setting{11, FillCopy::kStream}}) {
    const uint32_t helpers = setting.helpers;
    SCOPED_TRACE(helpers);
    CopyCrew crew(helpers, setting.copy);
    EXPECT_EQ(crew.helpers(), helpers);
    const std::vector<uint8_t> src = pattern((size_t{13} << 20) + 12345);
    std::vector<uint8_t> dst(src.size(), 0xee);
    // Chunks of uneven sizes, a zero-sized one among them, at most four pending.
    const std::vector<size_t> sizes = {1, 4095, 0, 63, size_t{1} << 20, (size_t{3} << 20) + 7, size_t{5} << 20};
    size_t at = 0, posted = 0, waited = 0;
    std::vector<size_t> begins;
    for (size_t i = 0; at < src.size(); ++i) {
      const size_t n = std::min(sizes[i % sizes.size()], src.size() - at);
      ASSERT_TRUE(crew.post(src.data() + at, dst.data() + at, n).ok());
      begins.push_back(at);
      at += n;
      ++posted;
      if (posted - waited == 4) {
        ASSERT_TRUE(crew.wait_oldest().ok());
        ++waited;
      }
    }
    while (waited < posted) {
      ASSERT_TRUE(crew.wait_oldest().ok());
      ++waited;
    }
    EXPECT_FALSE(crew.wait_oldest().ok());  // nothing pending
    crew.reset();
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), src.size()), 0);
  }
}

TEST(CopyCrew, RefusesMoreThanItsPendingChunksAndResetsCleanly) {
  CopyCrew crew(2);
  const std::vector<uint8_t> src = pattern(size_t{8} << 20);
  std::vector<uint8_t> dst(src.size(), 0);
  const size_t n = src.size() / CopyCrew::kMaxPending;
  for (uint32_t i = 0; i < CopyCrew::kMaxPending; ++i) {
    ASSERT_TRUE(crew.post(src.data() + i * n, dst.data() + i * n, n).ok());
  }
  EXPECT_FALSE(crew.post(src.data(), dst.data(), 1).ok());
  ASSERT_TRUE(crew.wait_oldest().ok());
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), n), 0);
  // Abandoned work: after reset nothing is copying, and numbering starts again.
  crew.reset();
  EXPECT_FALSE(crew.wait_oldest().ok());
  std::vector<uint8_t> again(n, 0);
  ASSERT_TRUE(crew.post(src.data(), again.data(), n).ok());
  ASSERT_TRUE(crew.wait_oldest().ok());
  EXPECT_EQ(std::memcmp(again.data(), src.data(), n), 0);
}

}  // namespace
}  // namespace tensormorph
