// The CPU backend's remembered bandwidth measurement (cpu_calibration.h).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_calibration.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using cpu::MachineIdentity;

const MachineIdentity kMachine{"AMD EPYC 9654 96-Core Processor", 192, uint64_t{768} << 30};

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

TEST(CpuCalibration, RemembersAMeasurementForTheSameMachine) {
  testing::TempDir dir;
  const auto path = dir.path() / "nested" / "cpu-calibration";
  cpu::remember_read_bandwidth_gbps(path, kMachine, 123.25, 1'000'000);
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, kMachine, 1'000'000), 123.25);
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, kMachine, 1'000'000 + cpu::kCalibrationLifetimeSeconds - 1),
            123.25);
  // Written whole and renamed: no temporary file stays behind.
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST(CpuCalibration, ForgetsAnotherMachineAndOldOrFutureMeasurements) {
  testing::TempDir dir;
  const auto path = dir.path() / "cpu-calibration";
  cpu::remember_read_bandwidth_gbps(path, kMachine, 50.0, 1'000'000);
  MachineIdentity other = kMachine;
  other.threads = 96;
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, other, 1'000'000), 0.0);
  other = kMachine;
  other.memory_bytes += 4096;
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, other, 1'000'000), 0.0);
  other = kMachine;
  other.model = "AMD EPYC 9655";
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, other, 1'000'000), 0.0);
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, kMachine, 1'000'000 + cpu::kCalibrationLifetimeSeconds), 0.0);
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, kMachine, 999'999), 0.0);  // the clock went back
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(dir.path() / "absent", kMachine, 1'000'000), 0.0);
}

TEST(CpuCalibration, IgnoresMalformedFiles) {
  testing::TempDir dir;
  const auto path = dir.path() / "cpu-calibration";
  cpu::remember_read_bandwidth_gbps(path, kMachine, 50.0, 1'000'000);
  std::ifstream in(path);
  std::string identity;
  std::getline(in, identity);
  in.close();
  const std::vector<std::string> bad = {
      "",
      "garbage\n",
      identity + "\n",
      identity + "\nread_gbps 50\n",
      identity + "\nread_gbps -3\nmeasured_unix 1000000\n",
      identity + "\nread_gbps nan\nmeasured_unix 1000000\n",
      identity + "\nread_gbps inf\nmeasured_unix 1000000\n",
      identity + "\nread_gbps 0\nmeasured_unix 1000000\n",
      identity + "\nwrite_gbps 50\nmeasured_unix 1000000\n",
      identity + "\nread_gbps 50\nmeasured 1000000\n",
      identity + "\nread_gbps fifty\nmeasured_unix 1000000\n",
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    write_file(path, text);
    EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, kMachine, 1'000'000), 0.0);
  }
  write_file(path, identity + "\nread_gbps 50\nmeasured_unix 1000000\n");
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, kMachine, 1'000'000), 50.0);
  // A model name cannot spill into the lines after the identity.
  MachineIdentity forged = kMachine;
  forged.model = "x\nread_gbps 1";
  cpu::remember_read_bandwidth_gbps(path, forged, 7.0, 1'000'000);
  EXPECT_EQ(cpu::remembered_read_bandwidth_gbps(path, forged, 1'000'000), 7.0);
}

}  // namespace
}  // namespace tensormorph
