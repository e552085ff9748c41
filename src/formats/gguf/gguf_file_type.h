// GGUF's `general.file_type`: which quantization mix llama.cpp's converter or quantizer wrote.
#pragma once

#include <cstdint>
#include <string>

namespace tensormorph::gguf {

/// The name of a `general.file_type` value as llama.cpp's llama_ftype enum spells it, without the
/// LLAMA_FTYPE_ prefix, followed by the number: "MOSTLY_Q4_K_M (15)"; "(removed from llama.cpp)"
/// is added for values llama.cpp dropped, "unknown (N)" given for values it never defined.
std::string file_type_text(uint32_t file_type);

}  // namespace tensormorph::gguf
