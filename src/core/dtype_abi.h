// Mapping between the library's DType and the plugin ABI's stable TM_DType ids.
#pragma once

#include <optional>

#include "tensormorph/c/plugin.h"
#include "tensormorph/dtype.h"

namespace tensormorph {

/// The ABI id of `dtype` (every DType has one).
TM_DType to_abi_dtype(DType dtype);
/// The DType of an ABI id; nullopt for ids this build does not know.
std::optional<DType> from_abi_dtype(TM_DType dtype);
/// Canonical name of an ABI id ("BF16"), or "unknown(<id>)".
std::string abi_dtype_name(TM_DType dtype);

}  // namespace tensormorph
