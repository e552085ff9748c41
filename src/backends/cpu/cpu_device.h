// Facts about the host CPU the backend reports and models its costs with.
#pragma once

#include <cstdint>
#include <string>

namespace tensormorph::cpu {

/// The processor's model name from /proc/cpuinfo ("AMD EPYC"), or a generic name.
std::string cpu_model_name();
/// Physical RAM in bytes (0 when unknown).
uint64_t physical_memory_bytes();
/// Hardware threads (at least 1).
uint32_t hardware_threads();
/// Measures the multi-threaded read bandwidth of a buffer larger than the last-level cache in
/// GB/s (about 40 ms, mostly faulting the buffer in); 0 when the measurement fails.
double measure_read_bandwidth_gbps();

}  // namespace tensormorph::cpu
