#include "compute/plugin_loader.h"

#include <dlfcn.h>

#include <algorithm>

namespace tensormorph::compute {
namespace {

bool name_taken(const BackendSet& set, const std::string& name) {
  return std::any_of(set.backends.begin(), set.backends.end(),
                     [&](const auto& b) { return b->name() == name || b->name().rfind(name + ":", 0) == 0; });
}

// Creates every device a plugin table offers (or, deferred, its first device unopened); records
// why none when it offers none.
void add_devices(const TM_PluginApi* api, BackendOrigin origin, void* library, BackendSet& into,
                 BackendLoadReport report, DeviceOpening opening) {
  report.name = api->name ? api->name : "unnamed";
  if (name_taken(into, report.name)) {
    report.detail = "refused: a backend named '" + report.name + "' is already loaded";
    into.reports.push_back(report);
    if (library) dlclose(library);
    return;
  }
  if (opening == DeviceOpening::kWhenNeeded) {
    auto deferred = Backend::deferred(api, origin, library);
    if (!deferred.ok()) {
      report.detail = deferred.status().message();
      if (library) dlclose(library);
    } else {
      report.deferred = true;
      report.detail = "not opened: its device opens when an operation needs it";
      into.backends.push_back(std::move(deferred).value());
    }
    into.reports.push_back(report);
    return;
  }
  uint32_t count = 1;
  char why[512] = {0};
  if (api->device_count) {
    TM_Error* error = api->device_count(&count, why, sizeof why);
    if (error != nullptr) {
      report.detail = status_from_plugin_error(*api, error, report.name).message();
      count = 0;
    } else if (count == 0) {
      why[sizeof why - 1] = '\0';
      report.detail = why[0] ? why : "no device found";
    }
  }
  // The last created backend owns the library handle, so it is closed after every device is gone.
  for (uint32_t i = 0; i < count; ++i) {
    auto created = Backend::create(api, i, origin, i + 1 == count ? library : nullptr);
    if (!created.ok()) {
      report.detail = created.status().message();
      if (i + 1 == count && library) dlclose(library);
      continue;
    }
    report.available = true;
    into.backends.push_back(std::move(created).value());
  }
  if (count == 0 && library) dlclose(library);
  into.reports.push_back(report);
}

}  // namespace

std::vector<std::filesystem::path> plugin_search_path(const std::vector<std::string>& configured) {
  std::vector<std::filesystem::path> dirs(configured.begin(), configured.end());
  // Modules built with Tensormorph itself sit in plugins/ beside the binary holding this code: the
  // executable, or the Python package's native module (which Python, the executable, loaded).
  std::vector<std::filesystem::path> binaries;
  std::error_code ec;
  if (auto exe = std::filesystem::read_symlink("/proc/self/exe", ec); !ec) binaries.push_back(exe);
  Dl_info self{};
  if (dladdr(reinterpret_cast<const void*>(&plugin_search_path), &self) != 0 && self.dli_fname != nullptr &&
      self.dli_fname[0] == '/') {
    binaries.emplace_back(self.dli_fname);
  }
  for (const auto& binary : binaries) {
    const auto beside = binary.parent_path() / "plugins";
    if (std::filesystem::is_directory(beside, ec) &&
        std::find(dirs.begin(), dirs.end(), beside) == dirs.end()) {
      dirs.push_back(beside);
    }
  }
  return dirs;
}

void load_plugin_library(const std::filesystem::path& path, BackendSet& into, DeviceOpening opening) {
  BackendLoadReport report;
  report.builtin = false;
  report.library_path = path.string();
  report.name = path.stem().string();
  // RTLD_NODELETE: a plugin's device runtime (a vendor driver, an ICD loader) may keep threads and atexit
  // handlers that outlive our dlclose; keeping the code mapped makes unloading safe, and leak
  // reports at exit can still name the plugin's frames.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) {
    const char* err = dlerror();
    report.detail = std::string("cannot load: ") + (err ? err : "unknown dlopen error");
    into.reports.push_back(report);
    return;
  }
  auto version_fn = reinterpret_cast<TM_PluginAbiVersionFn>(dlsym(library, TM_PLUGIN_ABI_VERSION_SYMBOL));
  auto get_api = reinterpret_cast<TM_PluginGetApiFn>(dlsym(library, TM_PLUGIN_GET_API_SYMBOL));
  if (version_fn == nullptr || get_api == nullptr) {
    report.detail = "not a Tensormorph plugin: it does not export " TM_PLUGIN_ABI_VERSION_SYMBOL
                    " and " TM_PLUGIN_GET_API_SYMBOL;
    into.reports.push_back(report);
    dlclose(library);
    return;
  }
  const uint32_t version = version_fn();
  const uint32_t major = version >> 16, minor = version & 0xffffu;
  if (major != TM_PLUGIN_ABI_MAJOR) {
    report.detail = "refused: built for plugin ABI " + std::to_string(major) + "." + std::to_string(minor) +
                    " but this Tensormorph speaks " + std::to_string(TM_PLUGIN_ABI_MAJOR) + "." +
                    std::to_string(TM_PLUGIN_ABI_MINOR) + "; none of its functions were called";
    into.reports.push_back(report);
    dlclose(library);
    return;
  }
  const TM_PluginApi* api = get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
  if (api == nullptr || api->struct_size < sizeof(size_t) + 2 * sizeof(uint32_t) + 2 * sizeof(const char*) ||
      api->abi_major != TM_PLUGIN_ABI_MAJOR) {
    report.detail = "refused: the plugin returned no usable function table for ABI " +
                    std::to_string(TM_PLUGIN_ABI_MAJOR) + "." + std::to_string(TM_PLUGIN_ABI_MINOR);
    into.reports.push_back(report);
    dlclose(library);
    return;
  }
  add_devices(api, BackendOrigin{false, path.string()}, library, into, report, opening);
}

BackendSet load_backends(std::span<const TM_PluginGetApiFn> builtins,
                         const std::vector<std::filesystem::path>& search_path, DeviceOpening opening) {
  BackendSet set;
  for (size_t i = 0; i < builtins.size(); ++i) {
    const TM_PluginApi* api = builtins[i](TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
    BackendLoadReport report;
    if (api == nullptr) {
      report.detail = "built-in backend returned no function table";
      set.reports.push_back(report);
      continue;
    }
    // The first built-in is the host's own backend, which every operation can fall back to: open
    // from the start. The others open as plugins' devices do, so that a command that places no
    // work on them does not pay for their start-up (a device runtime's instance, device, kernels).
    add_devices(api, BackendOrigin{true, ""}, nullptr, set, report, i == 0 ? DeviceOpening::kAtLoad : opening);
  }
  for (const auto& dir : search_path) {
    std::error_code ec;
    std::vector<std::filesystem::path> libraries;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".so") libraries.push_back(entry.path());
    }
    if (ec) {
      BackendLoadReport unreadable;
      unreadable.library_path = dir.string();
      unreadable.builtin = false;
      unreadable.detail = "plugin directory unreadable: " + ec.message();
      set.reports.push_back(unreadable);
      continue;
    }
    std::sort(libraries.begin(), libraries.end());
    for (const auto& lib : libraries) load_plugin_library(lib, set, opening);
  }
  return set;
}

}  // namespace tensormorph::compute
