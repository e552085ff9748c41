// Where Tensormorph keeps what it can rebuild: index sidecars of read-only checkpoints, and
// measurements of this machine that are slow to repeat at every start.
#pragma once

#include <filesystem>

namespace tensormorph {

/// $XDG_CACHE_HOME/tensormorph, else $HOME/.cache/tensormorph, else /tmp/.cache/tensormorph.
/// Not created here.
std::filesystem::path user_cache_dir();

}  // namespace tensormorph
