#include <string>

#include "core/atomic_file.h"
#include "formats/npy/npy.h"

namespace tensormorph::npy {

Status write_array(const std::filesystem::path& path, std::string_view descr, std::span<const uint64_t> shape,
                   std::span<const std::byte> data) {
  std::string dims;
  for (uint64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (a, b) but (n,) for one dim
  if (shape.empty()) dims.clear();
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' must be a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) return Status::InvalidArgument("shape too long for a .npy v1 header");

  // Never renames over a FIFO or device, and replaces the file a symbolic link names (atomic_file.h).
  TM_ASSIGN_OR_RETURN(AtomicOutput out, AtomicOutput::open(path));
  const char prefix[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const auto len = static_cast<uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  TM_RETURN_IF_ERROR(out.write(std::as_bytes(std::span(prefix))));
  TM_RETURN_IF_ERROR(out.write(std::as_bytes(std::span(len_le))));
  TM_RETURN_IF_ERROR(out.write(std::as_bytes(std::span(header))));
  TM_RETURN_IF_ERROR(out.write(data));
  TM_RETURN_IF_ERROR(out.commit());
  return Status::Ok();
}

Status write_f32(const std::filesystem::path& path, std::span<const uint64_t> shape, std::span<const float> values) {
  return write_array(path, "<f4", shape, std::as_bytes(values));
}

std::optional<std::string_view> numpy_descr(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "|b1";
    case DType::kU8: return "|u1";
    case DType::kI8: return "|i1";
    case DType::kU16: return "<u2";
    case DType::kI16: return "<i2";
    case DType::kU32: return "<u4";
    case DType::kI32: return "<i4";
    case DType::kU64: return "<u8";
    case DType::kI64: return "<i8";
    case DType::kF16: return "<f2";
    case DType::kF32: return "<f4";
    case DType::kF64: return "<f8";
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::npy
