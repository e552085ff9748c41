// The spectrum operations' bounds and costs, apart from the LAPACK computation (spectrum.cpp) so
// that a backend module states the same bounds without linking LAPACK.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "compute/ops/spectrum.h"

namespace tensormorph::ops {

uint64_t spectrum_band_rows(uint64_t cols) { return std::max<uint64_t>(1, (uint64_t{32} << 20) / (8 * cols)); }

double svd_value_bound(uint64_t rows, uint64_t cols, double largest) {
  // The computed values are exact for A + E with ||E|| <= c eps max(m, n) ||A||, and Weyl's
  // inequality moves no singular value by more than ||E||.
  return kSpectrumSvdConstant * DBL_EPSILON * static_cast<double>(std::max(rows, cols)) * largest;
}

void gram_value_bounds(uint64_t rows, uint64_t cols, double trace, std::span<const double> values, std::span<double> bounds) {
  // Forming G in float64 errs by at most q eps |A|^T |A| elementwise (norm <= ||A||_F^2 = trace),
  // the symmetric eigensolver by c eps p lambda_1; |s - sigma| = |lambda_s - lambda| / (s + sigma).
  const double p = static_cast<double>(std::min(rows, cols)), q = static_cast<double>(std::max(rows, cols));
  const double top = values.empty() ? 0 : values[0];
  const double d = DBL_EPSILON * (q * trace + kSpectrumSvdConstant * p * top * top);
  for (size_t i = 0; i < values.size(); ++i) bounds[i] = values[i] > 0 ? std::min(std::sqrt(d), d / values[i]) : std::sqrt(d);
}

double spectrum_flops(SpectrumMethod method, uint64_t rows, uint64_t cols, uint64_t k) {
  const double p = static_cast<double>(std::min(rows, cols)), q = static_cast<double>(std::max(rows, cols));
  switch (method) {
    case SpectrumMethod::kSvd: return 4 * q * p * p - 4.0 / 3.0 * p * p * p;
    case SpectrumMethod::kGram: return q * p * p + 4.0 / 3.0 * p * p * p;
    case SpectrumMethod::kRandomized: {
      const double l = std::min(static_cast<double>(k + kSpectrumOversampling), p);
      const double products = 2.0 * kSpectrumPowerIterations + 3.0;  // range, power steps, B, residual
      return products * 2 * p * q * l + 4 * (p + q) * l * l * (kSpectrumPowerIterations + 1);
    }
  }
  return 0;
}

uint64_t spectrum_working_bytes(SpectrumMethod method, uint64_t rows, uint64_t cols, uint64_t k) {
  const uint64_t p = std::min(rows, cols);
  switch (method) {
    case SpectrumMethod::kSvd: return 8 * (rows * cols + p * p + 130 * p + 128 * 128 + 64 * cols);  // A, R, a row panel and the band, T, a decode band
    case SpectrumMethod::kGram:
      return 8 * (p * p + p) + (cols <= rows ? 8 * std::min(rows, spectrum_band_rows(cols)) * cols : 8 * rows * cols);
    case SpectrumMethod::kRandomized: {
      const uint64_t l = std::min(k + kSpectrumOversampling, p);
      return 8 * (rows * cols + 2 * (rows + cols) * l + std::min(rows, spectrum_band_rows(cols)) * cols + l * l);
    }
  }
  return 0;
}

}  // namespace tensormorph::ops
