#include "backends/cpu/cpu_dispatch.h"

namespace tensormorph::cpu {

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kBaseline: return true;
#if TM_CPU_X86_TARGETS
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi2") &&
             __builtin_cpu_supports("popcnt");
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512cd");
#else
    case Isa::kAvx2:
    case Isa::kAvx512: return false;
#endif
  }
  return false;
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::kAvx512) ? Isa::kAvx512
                          : isa_supported(Isa::kAvx2) ? Isa::kAvx2
                                                      : Isa::kBaseline;
  return best;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kBaseline: return "baseline";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

}  // namespace tensormorph::cpu
