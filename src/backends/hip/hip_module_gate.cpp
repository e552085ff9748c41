// The HIP plugin as the host loads it (plugins/libtm_hip.so): a gate in front of the real module
// (plugins/hip/libtm_hip_impl.so, the CUDA sources built by hipcc) that loads it only where an AMD
// GPU driver exists.
//
// Loading the HIP runtime costs ~22 ms of initialisers and relocations (a bare `dlopen` of
// libamdhip64.so.5 on the 2-vCPU development VM), and every command paid it on machines without
// an AMD GPU, which is nearly all of them: `tensormorph backends` took 39 ms with the module and
// 19 ms without. The ROCm runtime finds GPUs through the kernel driver's /dev/kfd; where that
// device node is absent it can find none, so the gate answers for it (zero devices, and why)
// without loading it. Everything else goes straight to the real module's function table.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <type_traits>

#include "tensormorph/c/plugin.h"

struct TM_Error {
  TM_StatusCode code;
};

namespace {

/// The kernel driver's device node, which the HIP runtime opens to find GPUs.
constexpr const char* kDriverNode = "/dev/kfd";
/// The real module, relative to the directory of this library.
constexpr const char* kModule = "hip/libtm_hip_impl.so";
/// How every reason starts, as the real module's own census does (gpu_backend.cpp).
constexpr const char* kNotRun = "built, not run on these machines: ";

/// Why no device is offered, when the real module was not loaded.
std::string& reason() {
  static std::string text;
  return text;
}

TM_StatusCode error_code(const TM_Error* error) { return error->code; }
const char* error_message(const TM_Error*) { return reason().c_str(); }
void error_destroy(TM_Error*) {}  // the gate creates no errors (device_count cannot fail)

TM_Error* device_count(uint32_t* count, char* why_none, size_t why_len) {
  *count = 0;
  if (why_none != nullptr && why_len > 0) std::snprintf(why_none, why_len, "%s", reason().c_str());
  return nullptr;
}

/// The table offered when the real module is not loaded: no devices, and the reason.
const TM_PluginApi kGateApi = {
    sizeof(TM_PluginApi), TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR, "hip", "1.0",
    &error_code, &error_message, &error_destroy, &device_count,
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};

/// plugins/hip/libtm_hip_impl.so beside this library.
std::string module_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&module_path), &info) == 0 || info.dli_fname == nullptr) return kModule;
  const std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? kModule : self.substr(0, slash + 1) + kModule;
}

/// The real module's table, or nullptr with reason() set.
const TM_PluginApi* load_module(uint32_t host_major, uint32_t host_minor) {
  const std::string path = module_path();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) {
    const char* error = dlerror();
    reason() = kNotRun + ("cannot load " + path + ": ") + (error ? error : "unknown error");
    return nullptr;
  }
  auto get_api = reinterpret_cast<TM_PluginGetApiFn>(dlsym(library, TM_PLUGIN_GET_API_SYMBOL));
  const TM_PluginApi* api = get_api != nullptr ? get_api(host_major, host_minor) : nullptr;
  if (api == nullptr) reason() = kNotRun + path + " offers no function table";
  return api;
}

}  // namespace

extern "C" {

/// The ABI version this gate (and the module behind it) was built against; no side effects.
__attribute__((visibility("default"))) uint32_t tm_plugin_abi_version(void) {
  return TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
}

/// The real module's table where the driver exists and the module loads, else the gate's own.
__attribute__((visibility("default"))) const TM_PluginApi* tm_plugin_get_api(uint32_t host_major, uint32_t host_minor) {
  if (host_major != TM_PLUGIN_ABI_MAJOR) return nullptr;
  if (::access(kDriverNode, R_OK | W_OK) != 0) {
    reason() = std::string(kNotRun) + "no AMD GPU driver here (" + kDriverNode +
               " is absent or not accessible), so the HIP runtime was not loaded";
    return &kGateApi;
  }
  const TM_PluginApi* api = load_module(host_major, host_minor);
  return api != nullptr ? api : &kGateApi;
}

}  // extern "C"

static_assert(std::is_same_v<decltype(&tm_plugin_abi_version), TM_PluginAbiVersionFn>);
static_assert(std::is_same_v<decltype(&tm_plugin_get_api), TM_PluginGetApiFn>);
