// `tensormorph export`: one tensor's values as a NumPy .npy file, decoded to float32 or as stored.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "cli/commands.h"
#include "cli/name_suggestions.h"
#include "core/atomic_file.h"
#include "core/printable.h"
#include "engine/matrix_shape.h"
#include "formats/npy/npy.h"
#include "tensormorph/decode.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::string tensor;
  std::string output;
  std::string dtype = "float32";
  ComputeOptions compute;
  OpenOptions open;
};

/// Values float32 rounded: how many, and the first one (its index and both texts).
struct Rounded {
  uint64_t count = 0;
  uint64_t first = 0;
  std::string stored, became;
};

template <typename T>
bool float_holds(T stored, float value) {
  if constexpr (std::is_floating_point_v<T>) {
    return (std::isnan(stored) && std::isnan(value)) || static_cast<T>(value) == stored;
  } else {
    // Compared in the integer domain; a float at or beyond the type's range cannot equal it.
    constexpr float kLimit = std::numeric_limits<T>::is_signed ? 0x1p63f : 0x1p64f;
    if (!(value < kLimit) || (std::numeric_limits<T>::is_signed && value < -0x1p63f) ||
        (!std::numeric_limits<T>::is_signed && value < 0)) {
      return false;
    }
    using Wide = std::conditional_t<std::numeric_limits<T>::is_signed, int64_t, uint64_t>;
    return static_cast<Wide>(value) == static_cast<Wide>(stored);
  }
}

/// An integer exactly; a float with the digits that round-trip it.
template <typename T>
std::string number_text(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char text[40];
    const double d = static_cast<double>(v);
    if (std::isfinite(d) && d == std::nearbyint(d) && std::fabs(d) < 1e20) {
      std::snprintf(text, sizeof text, "%.0f", d);  // 2147483648, not 2.14748365e+09
    } else {
      std::snprintf(text, sizeof text, "%.*g", std::numeric_limits<T>::max_digits10, d);
    }
    return text;
  } else {
    return std::to_string(v);
  }
}

template <typename T>
Rounded count_rounded(std::span<const std::byte> stored, std::span<const float> values) {
  Rounded r;
  for (uint64_t i = 0; i < values.size(); ++i) {
    T v;
    std::memcpy(&v, stored.data() + i * sizeof(T), sizeof(T));
    if (float_holds(v, values[i])) continue;
    if (r.count++ == 0) {
      r.first = i;
      r.stored = number_text(v);
      r.became = number_text(values[i]);
    }
  }
  return r;
}

/// The values of a type float32 cannot all hold that it rounded (nothing for other types).
Result<Rounded> rounded_values(const Checkpoint& ckpt, const TensorInfo& t, std::span<const float> values) {
  if (!ops::exact_summary_supported(t.dtype)) return Rounded{};
  TM_ASSIGN_OR_RETURN(auto rows, engine::matrix_rows(ckpt, t, 0, engine::as_matrix(t).rows));
  switch (t.dtype) {
    case DType::kI32: return count_rounded<int32_t>(rows.bytes, values);
    case DType::kU32: return count_rounded<uint32_t>(rows.bytes, values);
    case DType::kI64: return count_rounded<int64_t>(rows.bytes, values);
    case DType::kU64: return count_rounded<uint64_t>(rows.bytes, values);
    default: return count_rounded<double>(rows.bytes, values);
  }
}

std::string default_output(const std::string& tensor) {
  std::string name;
  for (char c : tensor) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return name + ".npy";
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("export", "Write one tensor's values as a .npy file (decoded float32 or as stored)");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor,-t", opt->tensor, "Exact tensor name")->required();
  sub->add_option("-o,--output", opt->output, "Output .npy path (default: <tensor>.npy); a FIFO or device is written in place");
  sub->add_option("--dtype", opt->dtype,
                  "float32 (decoded; the default) or stored (the stored elements, exact, for types NumPy has)")
      ->check(CLI::IsMember({"float32", "stored"}));
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path, opt->open);
            if (!ckpt) return static_cast<int>(kExitUserError);
            const TensorInfo* t = ckpt->find(opt->tensor);
            if (t == nullptr) {
              print_error(ckpt->path().string() + ": no tensor named " + quoted_name(opt->tensor) +
                          close_names_text(closest_tensor_names(*ckpt, opt->tensor), ckpt->tensors().size()));
              return static_cast<int>(kExitUserError);
            }
            const std::string where =
                ckpt->files()[t->file].path.string() + ": tensor " + quoted_name(t->name) + " at offset " +
                std::to_string(t->offset);
            std::string out = opt->output.empty() ? default_output(t->name) : opt->output;
            // Before any decoding: a mistyped directory fails at once, not after minutes of work.
            if (Status writable = check_output_directory(out); !writable.ok()) {
              print_error(writable.message());
              return static_cast<int>(kExitUserError);
            }
            if (opt->dtype == "stored") {
              const auto descr = npy::numpy_descr(t->dtype);
              if (!descr) {
                print_error(where + ": " + std::string(dtype_name(t->dtype)) +
                            " has no NumPy type; export it as --dtype float32");
                return static_cast<int>(kExitUserError);
              }
              auto rows = engine::matrix_rows(*ckpt, *t, 0, engine::as_matrix(*t).rows);
              if (!rows.ok()) {
                print_error(rows.status().message());
                return static_cast<int>(kExitUserError);
              }
              if (Status written = npy::write_array(out, *descr, t->shape, rows->bytes); !written.ok()) {
                print_error(written.message());
                return static_cast<int>(kExitUserError);
              }
              std::cerr << "wrote " << printable(out) << ": " << printable(t->name) << " " << t->shape_string() << " "
                        << dtype_name(t->dtype) << " as stored\n";
              return static_cast<int>(kExitOk);
            }
            if (!dtype_decodable(t->dtype)) {
              print_error(where + ": " + std::string(dtype_not_decodable_reason(t->dtype)));
              return static_cast<int>(kExitUserError);
            }
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            engine::Records records;
            auto values = engine::decode_tensor(session->scheduler(), *ckpt, *t, &records);
            if (!values.ok()) {
              print_error(values.status().message());
              return static_cast<int>(kExitUserError);
            }
            auto rounded = rounded_values(*ckpt, *t, *values);
            if (!rounded.ok()) {
              print_error(rounded.status().message());
              return static_cast<int>(kExitUserError);
            }
            Status written = npy::write_f32(out, t->shape, *values);
            if (!written.ok()) {
              print_error(written.message());
              return static_cast<int>(kExitUserError);
            }
            if (opt->compute.explain) print_placements(std::cerr, records);
            std::cerr << "wrote " << printable(out) << ": " << printable(t->name) << " " << t->shape_string()
                      << " float32\n";
            if (rounded->count > 0) {
              std::cerr << "tensormorph: warning: " << rounded->count << " of " << values->size() << " "
                        << dtype_name(t->dtype) << " values cannot be held by float32 and were rounded (element "
                        << rounded->first << ": " << rounded->stored << " became " << rounded->became
                        << "); --dtype stored writes them exactly\n";
            }
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
