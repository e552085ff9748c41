// Entry point of the built-in CPU backend (registered with tm_register_builtin_backend).
#pragma once

#include <cstdint>

#include "tensormorph/c/plugin.h"

/// The CPU backend's function table for a host speaking ABI `host_major.host_minor`; NULL when
/// the major version differs. Options (TM_BackendCreateArgs::options): "bandwidth_gbps=<x>"
/// skips the ~20 ms bandwidth calibration, "isa=baseline|avx2|avx512" pins the kernel variant.
extern "C" const TM_PluginApi* tm_cpu_backend_get_api(uint32_t host_major, uint32_t host_minor);
