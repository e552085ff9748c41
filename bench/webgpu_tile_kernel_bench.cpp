// Where the WebGPU tile kernels' time goes: tm.tile_stats@1's lanes kernel (shipped for BF16 and
// F16) and words kernel (shipped for F32 at tiles 128 to 1024), at tile 256, and variants made by
// removing one part at a time (the exact sums, the squares, the float64 tree, the workgroup tail,
// everything but the loads) or by rewriting one, timed on one resident matrix in one process. A
// variant that removes work gives wrong statistics: it is a measurement, never a kernel. A variant
// that only rewrites must give the first variant's bytes; the tool says so, and flags one that does
// not. Speed is printed as a ratio to the first variant measured in the same run (the lanes kernel
// unless variants are named).
//
//   webgpu_tile_kernel_bench [--mib M] [--reps R] [VARIANT ...]     (default: all variants)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/webgpu/webgpu_device.h"
#include "backends/webgpu/wgsl_kernels.h"
#include "resident_weights.h"

namespace {

using namespace tensormorph;
using namespace tensormorph::webgpu;

constexpr uint64_t kCols = 4096, kTile = 256, kParts = kTile / kRowsPerGroup;

struct TileParams {
  uint32_t base_byte, row_bytes, band_rows, col_begin, col_end, tile, tiles_x, out_tile_row, default_nan,
      propagate_nan, parts;
};

/// Replaces the one occurrence of `from` in `code` (a missing pattern means the kernel changed).
bool replace_once(std::string& code, const std::string& from, const std::string& to) {
  const size_t at = code.find(from);
  if (at == std::string::npos) {
    std::fprintf(stderr, "pattern not found: %s\n", from.c_str());
    return false;
  }
  code.replace(at, from.size(), to);
  return true;
}

struct Variant {
  const char* name;
  bool same_result;  ///< a rewrite that must keep the first variant's bytes
  std::function<bool(std::string&, DType)> edit;
  uint64_t parts = kParts;  ///< partial records per tile the kernel writes (its dispatch's rows)
};

std::vector<Variant> variants() {
  return {
      {"lanes", true, [](std::string&, DType) { return true; }},
      {"no-fallback-tree", false,
       [](std::string& c, DType) { return replace_once(c, "if (tree_s || tree_q) {", "if (false) {"); }},
      {"no-squares", false,
       [](std::string& c, DType) {
         return replace_once(c, "if (squares_exact) { acc_q", "if (false) { acc_q") &&
                replace_once(c, "let tree_q = !no_value && !squares_exact;", "let tree_q = false;");
       }},
      {"no-exact-sums", false,
       [](std::string& c, DType) {
         return replace_once(c, "  if (mag == 0u) { c_zeros = c_zeros + 1u; return; }\n",
                             "  if (mag == 0u) { c_zeros = c_zeros + 1u; return; }\n  if (mag != 1u) { return; }\n");
       }},
      {"no-keys", false,
       [](std::string& c, DType) {
         return replace_once(c, "  let key = order_key(u);\n  k_min = min(k_min, key);\n  k_max = max(k_max, key);\n", "");
       }},
      {"no-tail", false,
       [](std::string& c, DType) {
         return replace_once(c, "for (var p = 4u; p >= 1u; p = p / 2u) {", "for (var p = 0u; p >= 1u; p = p / 2u) {") &&
                replace_once(c, "for (var p = 16u; p >= 1u; p = p / 2u) {", "for (var p = 0u; p >= 1u; p = p / 2u) {");
       }},
      {"branchy-shifts", true,
       [](std::string& c, DType) {
         return replace_once(c, R"(fn shl64(a: vec2<u32>, s: u32) -> vec2<u32> {
  let r = s & 31u;
  let carry = select(0u, a.x >> (32u - r), r != 0u);
  let lo = select(a.x << r, 0u, s >= 32u);
  let hi = select((a.y << r) | carry, a.x << r, s >= 32u);
  return select(vec2<u32>(lo, hi), vec2<u32>(0u, 0u), s >= 64u);
})",
                             R"(fn shl64(a: vec2<u32>, s: u32) -> vec2<u32> {
  if (s == 0u) { return a; }
  if (s >= 64u) { return vec2<u32>(0u, 0u); }
  if (s >= 32u) { return vec2<u32>(0u, a.x << (s - 32u)); }
  return vec2<u32>(a.x << s, (a.y << s) | (a.x >> (32u - s)));
})") &&
                replace_once(c, R"(fn shr64(a: vec2<u32>, s: u32) -> vec2<u32> {
  let r = s & 31u;
  let carry = select(0u, a.y << (32u - r), r != 0u);
  let lo = select((a.x >> r) | carry, a.y >> r, s >= 32u);
  let hi = select(a.y >> r, 0u, s >= 32u);
  return select(vec2<u32>(lo, hi), vec2<u32>(0u, 0u), s >= 64u);
})",
                             R"(fn shr64(a: vec2<u32>, s: u32) -> vec2<u32> {
  if (s == 0u) { return a; }
  if (s >= 64u) { return vec2<u32>(0u, 0u); }
  if (s >= 32u) { return vec2<u32>(a.y >> (s - 32u), 0u); }
  return vec2<u32>((a.x >> s) | (a.y << (32u - s)), a.y >> s);
})");
       }},
      {"lean-classes", true,
       [](std::string& c, DType) {
         return replace_once(c, R"(  if (!present || u != 0x80000000u) { all_minus_zero = false; }
  if (!present) { return; }
  let mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) { c_nan = c_nan + 1u; return; }
  if (mag == 0x7f800000u) {
    if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
    return;
  }
  let key = order_key(u);
  k_min = min(k_min, key);
  k_max = max(k_max, key);
  k_abs = max(k_abs, mag);
  if (mag == 0u) { c_zeros = c_zeros + 1u; return; }
)",
                             R"(  if (!present) { return; }
  let mag = u & 0x7fffffffu;
  let key = order_key(u);
  if (mag - 1u >= 0x7f7fffffu) {
    if (mag > 0x7f800000u) { c_nan = c_nan + 1u; return; }
    if (mag == 0x7f800000u) {
      if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
      return;
    }
    k_min = min(k_min, key);
    k_max = max(k_max, key);
    c_zeros = c_zeros + 1u;
    return;
  }
  k_min = min(k_min, key);
  k_max = max(k_max, key);
  k_abs = max(k_abs, mag);
)") && replace_once(c, "  let no_value = low_bit == 4096;\n",
                    "  let no_value = low_bit == 4096;\n  all_minus_zero = row_ok && col0 + T - 8u < P.col_end && c_zeros == T / 8u && "
                    "k_max == 0x7fffffffu;\n");
       }},
      {"loads-only", false,
       [](std::string& c, DType) {
         return replace_once(c, "  if (!present || u != 0x80000000u) { all_minus_zero = false; }\n",
                             "  k_abs = k_abs ^ u;\n  if (u != 1u) { return; }\n") &&
                replace_once(c, "if (tree_s || tree_q) {", "if (false) {");
       }},
      // A different kernel with the same dispatch shape at tile 256: the words kernel (32 values an
      // invocation, contiguous loads, exact row sums across a row's invocations).
      {"words", true,
       [](std::string& c, DType dtype) {
         c = tile_words_kernel(dtype, true);
         return words_tile_parts(kTile) == kParts;
       }},
      {"words-16", true, [](std::string& c, DType dtype) { c = tile_words_kernel(dtype, true, 16); return true; },
       words_tile_parts(kTile, 16)},
      {"words-unaligned", true, [](std::string& c, DType dtype) { c = tile_words_kernel(dtype, false); return true; }},
      // The words kernel counting with selects rather than early returns (one rare branch for
      // infinities and NaN).
      {"words-flat-observe", true,
       [](std::string& c, DType dtype) {
         c = tile_words_kernel(dtype, true);
         return replace_once(c, R"(fn observe(present: bool, u: u32) {
  if (!present) { return; }
  let mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) {
    if (mag > 0x7f800000u) { c_nan = c_nan + 1u; } else if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
    return;
  }
  c_zeros = c_zeros + select(0u, 1u, mag == 0u);
  let key = order_key(u);
  k_min = min(k_min, key);
  k_max = max(k_max, key);
  k_abs = max(k_abs, mag);
  min_nonzero = min(min_nonzero, mag - 1u);
})",
                             R"(fn observe(present: bool, u: u32) {
  let mag = u & 0x7fffffffu;
  let finite = present && mag < 0x7f800000u;
  if (present && mag >= 0x7f800000u) {
    if (mag > 0x7f800000u) { c_nan = c_nan + 1u; } else if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
  }
  c_zeros = c_zeros + select(0u, 1u, finite && mag == 0u);
  let key = order_key(u);
  k_min = min(k_min, select(0xff800000u, key, finite));
  k_max = max(k_max, select(0x007fffffu, key, finite));
  k_abs = max(k_abs, select(0u, mag, finite));
  min_nonzero = min(min_nonzero, select(0xffffffffu, mag - 1u, finite));
})");
       }},
      // The words kernel with one part removed (measurements, not kernels): F32 squares' float64 tree,
      // the exact integer sums, everything but the loads.
      {"words-no-f32-tree", false,
       [](std::string& c, DType dtype) {
         c = tile_words_kernel(dtype, true);
         if (dtype != DType::kF32) return true;
         return replace_once(c, "  {\n    var q0: vec2<u32>;", "  if (false) {\n    var q0: vec2<u32>;") &&
                replace_once(c, "    flags = flags | 2u;\n", "");
       }},
      {"words-no-int-sums", false,
       [](std::string& c, DType dtype) {
         c = tile_words_kernel(dtype, true);
         const bool f32 = dtype == DType::kF32;
         return replace_once(c, "fn sum64(present: bool, u: u32) {\n", "fn sum64(present: bool, u: u32) {\n  if (u != 1u) { return; }\n") &&
                replace_once(c, "fn sum32(present: bool, u: u32) {\n", "fn sum32(present: bool, u: u32) {\n  if (u != 1u) { return; }\n") &&
                (f32 || replace_once(c, "fn square64(present: bool, u: u32) {\n",
                                     "fn square64(present: bool, u: u32) {\n  if (u != 1u) { return; }\n"));
       }},
      {"words-loads-only", false,
       [](std::string& c, DType dtype) {
         c = tile_words_kernel(dtype, true);
         const bool f32 = dtype == DType::kF32;
         return replace_once(c, "fn observe(present: bool, u: u32) {\n", "fn observe(present: bool, u: u32) {\n  k_abs = k_abs ^ u;\n  if (u != 1u) { return; }\n") &&
                replace_once(c, "fn sum64(present: bool, u: u32) {\n", "fn sum64(present: bool, u: u32) {\n  if (u != 1u) { return; }\n") &&
                replace_once(c, "fn sum32(present: bool, u: u32) {\n", "fn sum32(present: bool, u: u32) {\n  if (u != 1u) { return; }\n") &&
                (f32 ? replace_once(c, "  {\n    var q0: vec2<u32>;", "  if (false) {\n    var q0: vec2<u32>;") &&
                           replace_once(c, "    flags = flags | 2u;\n", "")
                     : replace_once(c, "fn square64(present: bool, u: u32) {\n",
                                    "fn square64(present: bool, u: u32) {\n  if (u != 1u) { return; }\n"));
       }},
      // The words kernel with the former f64_add_pos (a generic sticky shift and generic 64-bit
      // shifts): what the leaner addition saves on F32 squares' trees.
      {"words-former-add", true,
       [](std::string& c, DType dtype) {
         c = tile_words_kernel(dtype, true);
         const size_t begin = c.find("fn f64_add_pos(");
         const size_t end = c.find("// The float64 of a finite float32 (exact).");
         if (begin == std::string::npos || end == std::string::npos) return false;
         c.replace(begin, end - begin, R"(fn f64_add_pos(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  var x = a;
  var y = b;
  if (b.y > a.y || (b.y == a.y && b.x > a.x)) { x = b; y = a; }
  let ey = y.y >> 20u;
  if (ey == 0u) { return x; }
  let ex = x.y >> 20u;
  let mx = vec2<u32>(x.x << 3u, (((x.y & 0xfffffu) | 0x100000u) << 3u) | (x.x >> 29u));
  let my = shr64_sticky(vec2<u32>(y.x << 3u, (((y.y & 0xfffffu) | 0x100000u) << 3u) | (y.x >> 29u)), ex - ey);
  var m = add64(mx, my);
  var e = ex;
  if ((m.y & 0x1000000u) != 0u) { m = shr64_sticky(m, 1u); e = e + 1u; }
  let low = m.x & 7u;
  m = shr64(m, 3u);
  if (low > 4u || (low == 4u && (m.x & 1u) == 1u)) {
    m = add64(m, vec2<u32>(1u, 0u));
    if ((m.y & 0x200000u) != 0u) { m = shr64(m, 1u); e = e + 1u; }
  }
  return vec2<u32>(m.x, (e << 20u) | (m.y & 0xfffffu));
}
)");
         return true;
       }},
      // The lanes kernel once more, last: a time unlike the first one's is the order, not the code
      // (before the warm-up, the first one's ran up to five times slower on an H200).
      {"lanes-again", true, [](std::string&, DType) { return true; }},
  };
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run(int argc, char** argv) {
  uint64_t mib = 1024;
  int reps = 10;
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) mib = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "usage: webgpu_tile_kernel_bench [--mib M] [--reps R] [VARIANT ...]\n");
      return 2;
    } else wanted.push_back(arg);
  }
  auto device_or = WebGpuDevice::open("");
  if (!device_or.ok()) {
    std::printf("webgpu unavailable: %s\n", device_or.status().message().c_str());
    return 1;
  }
  std::unique_ptr<WebGpuDevice> device = std::move(*device_or);
  std::printf("device: %s\n", device->facts().name.c_str());

  const uint64_t band_bytes = uint64_t{64} << 20;
  const uint64_t bytes = std::max<uint64_t>(band_bytes, (mib << 20) / band_bytes * band_bytes);
  const auto [f32, bf16] = tensormorph::bench::resident_weights(bytes);
  auto input = device->allocate(bytes);
  if (!input.ok()) return std::printf("allocate: %s\n", input.status().message().c_str()), 1;
  const float invalid = std::numeric_limits<float>::quiet_NaN();
  uint32_t default_nan;
  std::memcpy(&default_nan, &invalid, 4);

  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const uint64_t elem_bytes = dtype == DType::kF32 ? 4 : 2;
    const uint64_t row_bytes = kCols * elem_bytes;
    const uint64_t rows = bytes / row_bytes, band_rows = band_bytes / row_bytes;
    const uint64_t tiles_x = kCols / kTile, band_tiles = band_rows / kTile;
    constexpr uint64_t kMostParts = 64;  // the most partial records per tile of any variant
    const uint64_t record_bytes = band_tiles * kMostParts * tiles_x * kRowRecordWords * 4;
    const uint64_t grid_bytes = (rows / kTile) * tiles_x * 72;
    if (Status s = device->write(*input, 0, dtype == DType::kF32 ? f32.data() : bf16.data(), bytes); !s.ok()) {
      return std::printf("write: %s\n", s.message().c_str()), 1;
    }
    auto records = device->allocate(record_bytes);
    auto tiles = device->allocate(grid_bytes);
    auto reduce = device->pipeline("tile_reduce", tile_reduce_kernel());
    if (!records.ok() || !tiles.ok() || !reduce.ok()) return std::printf("set-up failed\n"), 1;
    std::vector<uint8_t> reference;
    double first_seconds = 0;
    // One pass of `pipeline` over the whole matrix, band by band, each band's tiles reduced.
    auto pass = [&](const api::ComputePipeline& pipeline, uint64_t parts) -> Status {
      for (uint64_t band = 0; band < rows / band_rows; ++band) {
        TileParams p{0, static_cast<uint32_t>(row_bytes), static_cast<uint32_t>(band_rows), 0, static_cast<uint32_t>(kCols),
                     static_cast<uint32_t>(kTile), static_cast<uint32_t>(tiles_x),
                     static_cast<uint32_t>(band * band_tiles), default_nan, 0, static_cast<uint32_t>(parts)};
        const Binding in{input->handle, band * band_bytes, band_bytes};
        const Binding rec{records->handle, 0, record_bytes};
        TM_RETURN_IF_ERROR(device->dispatch(pipeline, {in, rec}, &p, sizeof p, static_cast<uint32_t>(tiles_x),
                                            static_cast<uint32_t>(band_tiles * parts)));
        TM_RETURN_IF_ERROR(device->dispatch(*reduce, {rec, Binding{tiles->handle, 0, grid_bytes}}, &p, sizeof p,
                                            static_cast<uint32_t>(tiles_x), static_cast<uint32_t>(band_tiles)));
      }
      return device->finish();
    };
    // A GPU that has been idle runs the first kernels of a process several times slower (clocks,
    // first touches): the lanes kernel runs for two seconds before anything is timed.
    {
      auto warm = device->pipeline(std::string("warm-up") + std::string(dtype_info(dtype).name), tile_lanes_kernel(dtype, kTile));
      if (!warm.ok()) return std::printf("warm-up: %s\n", warm.status().message().c_str()), 1;
      for (const auto start = std::chrono::steady_clock::now(); seconds_since(start) < 2.0;) {
        if (Status s = pass(*warm, kParts); !s.ok()) return std::printf("warm-up: %s\n", s.message().c_str()), 1;
      }
    }
    for (const Variant& v : variants()) {
      if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), v.name) == wanted.end()) continue;
      std::string code = tile_lanes_kernel(dtype, kTile);
      if (!v.edit(code, dtype)) return 1;
      auto pipeline = device->pipeline(std::string(v.name) + std::string(dtype_info(dtype).name), code);
      if (!pipeline.ok()) return std::printf("%s: %s\n", v.name, pipeline.status().message().c_str()), 1;
      std::vector<double> times;
      for (int rep = 0; rep <= reps; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        if (Status s = pass(*pipeline, v.parts); !s.ok()) return std::printf("%s: %s\n", v.name, s.message().c_str()), 1;
        if (rep > 0) times.push_back(seconds_since(start));  // the first run compiles
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      std::vector<uint8_t> out(grid_bytes);
      if (Status s = device->read(*tiles, 0, out.data(), grid_bytes); !s.ok()) return 1;
      // The first variant run (lanes, unless others were named) is the reference for bytes and time.
      if (reference.empty() && v.same_result) {
        reference = out;
        first_seconds = median;
      }
      const char* verdict = reference.empty() ? "" : out == reference ? "same bytes" : "differs";
      std::printf("%-5s %-18s %8.2f ms  %7.1f GB/s  %5.2fx first  %s%s\n", std::string(dtype_info(dtype).name).c_str(),
                  v.name, median * 1e3, static_cast<double>(bytes) / median / 1e9,
                  first_seconds > 0 ? first_seconds / median : 0.0, verdict,
                  v.same_result && !reference.empty() && out != reference ? "  <-- WRONG" : "");
    }
    device->release(*records);
    device->release(*tiles);
  }
  device->release(*input);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
