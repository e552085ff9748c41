// A test plugin: the CPU backend's own kernels under another name ("twin") whose traits say it
// does not compute on the host's cores, so the scheduler treats it as a device beside the CPU and
// splits an operation between the two when that pays. It stands in for a GPU where a test needs
// two backends that may share one operation (the browser test of split records); its results are
// the CPU's, so every merge must equal the whole bit for bit.
#include <cstdio>

#include "compute/ops/op_instance.h"
#include "tensormorph/c/plugin.h"

extern "C" const TM_PluginApi* tm_cpu_backend_get_api(uint32_t host_major, uint32_t host_minor);

namespace {

const TM_PluginApi* cpu_api() { return tm_cpu_backend_get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR); }

/// The CPU's traits, renamed and marked as not running on the host's cores.
TM_Error* twin_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  if (TM_Error* error = cpu_api()->device_traits(backend, &traits); error != nullptr) return error;
  std::snprintf(traits.device_name, sizeof traits.device_name, "CPU twin (test device)");
  traits.runs_on_host_cores = 0;
  tensormorph::ops::write_abi_struct(traits, out);
  return nullptr;
}

TM_PluginApi make_api() {
  TM_PluginApi api = *cpu_api();
  api.name = "twin";
  api.version = "test";
  api.device_traits = &twin_traits;
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) uint32_t tm_plugin_abi_version(void) {
  return TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
}

extern "C" __attribute__((visibility("default"))) const TM_PluginApi* tm_plugin_get_api(uint32_t host_major,
                                                                                     uint32_t /*host_minor*/) {
  static const TM_PluginApi api = make_api();
  return host_major == TM_PLUGIN_ABI_MAJOR ? &api : nullptr;
}
