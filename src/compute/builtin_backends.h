// The backends compiled into the binary (generated from the build's list; no names here).
#pragma once

#include <span>

#include "tensormorph/c/plugin.h"

namespace tensormorph::compute {

/// Entry points of the built-in backends, in build order: the host's own backend first,
/// as the build registers it first; load_backends opens it at load whatever the opening policy.
std::span<const TM_PluginGetApiFn> builtin_backend_entry_points();

}  // namespace tensormorph::compute
