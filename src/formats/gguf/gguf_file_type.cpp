#include "formats/gguf/gguf_file_type.h"

#include <string_view>

namespace tensormorph::gguf {
namespace {

struct Named {
  uint32_t value;
  std::string_view name;
  bool removed;
};

// Follows llama.cpp's enum llama_ftype (include/llama.h): the values are what GGUF files store in
// general.file_type, so they must never be renumbered here.
constexpr Named kFileTypes[] = {
    {0, "ALL_F32", false},
    {1, "MOSTLY_F16", false},
    {2, "MOSTLY_Q4_0", false},
    {3, "MOSTLY_Q4_1", false},
    {4, "MOSTLY_Q4_1_SOME_F16", true},
    {5, "MOSTLY_Q4_2", true},
    {6, "MOSTLY_Q4_3", true},
    {7, "MOSTLY_Q8_0", false},
    {8, "MOSTLY_Q5_0", false},
    {9, "MOSTLY_Q5_1", false},
    {10, "MOSTLY_Q2_K", false},
    {11, "MOSTLY_Q3_K_S", false},
    {12, "MOSTLY_Q3_K_M", false},
    {13, "MOSTLY_Q3_K_L", false},
    {14, "MOSTLY_Q4_K_S", false},
    {15, "MOSTLY_Q4_K_M", false},
    {16, "MOSTLY_Q5_K_S", false},
    {17, "MOSTLY_Q5_K_M", false},
    {18, "MOSTLY_Q6_K", false},
    {19, "MOSTLY_IQ2_XXS", false},
    {20, "MOSTLY_IQ2_XS", false},
    {21, "MOSTLY_Q2_K_S", false},
    {22, "MOSTLY_IQ3_XS", false},
    {23, "MOSTLY_IQ3_XXS", false},
    {24, "MOSTLY_IQ1_S", false},
    {25, "MOSTLY_IQ4_NL", false},
    {26, "MOSTLY_IQ3_S", false},
    {27, "MOSTLY_IQ3_M", false},
    {28, "MOSTLY_IQ2_S", false},
    {29, "MOSTLY_IQ2_M", false},
    {30, "MOSTLY_IQ4_XS", false},
    {31, "MOSTLY_IQ1_M", false},
    {32, "MOSTLY_BF16", false},
    {33, "MOSTLY_Q4_0_4_4", true},
    {34, "MOSTLY_Q4_0_4_8", true},
    {35, "MOSTLY_Q4_0_8_8", true},
    {36, "MOSTLY_TQ1_0", false},
    {37, "MOSTLY_TQ2_0", false},
    {38, "MOSTLY_MXFP4_MOE", false},
    {1024, "GUESSED", false},
};

}  // namespace

std::string file_type_text(uint32_t file_type) {
  const std::string number = std::to_string(file_type);
  for (const Named& n : kFileTypes) {
    if (n.value != file_type) continue;
    return std::string(n.name) + " (" + number + (n.removed ? ", removed from llama.cpp)" : ")");
  }
  return "unknown (" + number + ")";
}

}  // namespace tensormorph::gguf
