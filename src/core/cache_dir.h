// Where Tensormorph keeps what it can rebuild: index sidecars of read-only checkpoints, and
// measurements of this machine that are slow to repeat at every start.
#pragma once

#include <filesystem>

namespace tensormorph {

/// $XDG_CACHE_HOME/tensormorph, else $HOME/.cache/tensormorph, else the password database's home
/// directory's .cache/tensormorph, else a directory below /tmp that only this user can enter
/// (/tmp/tensormorph-cache-UID, created 0700 and checked). The tensormorph folder itself is not
/// created here.
std::filesystem::path user_cache_dir();

}  // namespace tensormorph
