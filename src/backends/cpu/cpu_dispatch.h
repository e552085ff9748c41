// Instruction sets the CPU kernels are compiled for. One binary carries every variant (through
// target attributes, never -march=native) and picks the best the running CPU supports.
#pragma once

#include <optional>
#include <string_view>

namespace tensormorph::cpu {

/// A compiled variant of the kernels.
enum class Isa {
  kBaseline,  ///< the build's default target (SSE2 on x86-64)
  kAvx2,      ///< x86-64-v3: AVX2, F16C, FMA, BMI2
  kAvx512,    ///< x86-64-v4: AVX-512 F/BW/DQ/VL/CD
};

#if defined(__x86_64__) && defined(__GNUC__)
#define TM_CPU_X86_TARGETS 1
#define TM_TARGET_AVX2 __attribute__((target("avx2,f16c,fma,bmi,bmi2,lzcnt,popcnt")))
#define TM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx2,f16c,fma,bmi,bmi2,lzcnt,popcnt")))
#else
#define TM_CPU_X86_TARGETS 0
#endif

/// True when this CPU (and OS) can run `isa`'s variant.
bool isa_supported(Isa isa);
/// The best variant this CPU runs.
Isa best_isa();
/// "baseline", "avx2", "avx512".
std::string_view isa_name(Isa isa);
/// The variant named `name`, or nullopt.
std::optional<Isa> isa_from_name(std::string_view name);

}  // namespace tensormorph::cpu
