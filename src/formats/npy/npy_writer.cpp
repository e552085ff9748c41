#include <fstream>
#include <string>

#include "formats/npy/npy.h"

namespace tensormorph::npy {

Status write_f32(const std::filesystem::path& path, std::span<const uint64_t> shape, std::span<const float> values) {
  std::string dims;
  for (uint64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (a, b) but (n,) for one dim
  if (shape.empty()) dims.clear();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' must be a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) return Status::InvalidArgument("shape too long for a .npy v1 header");

  std::filesystem::path tmp = path;
  tmp += ".tmp-tensormorph";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IoError(tmp.string() + ": cannot create");
    const char prefix[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(prefix, sizeof prefix);
    const auto len = static_cast<uint16_t>(header.size());
    const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    out.write(len_le, 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return Status::IoError(path.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IoError(path.string() + ": cannot rename temporary file: " + ec.message());
  return Status::Ok();
}

}  // namespace tensormorph::npy
