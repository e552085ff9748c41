// tm.spectrum@1 and its cheaper rungs: singular values of a matrix in float64 with a per-value error
// bound, by LAPACK (OpenBLAS) on the host. One computation serves as the reference and as the CPU
// backend's kernel; the bounds are what each algorithm guarantees (docs/COMPUTE.md "Spectra"). The
// bounds and costs (spectrum_model.cpp) link without LAPACK, for backend modules.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "compute/ops/op_instance.h"
#include "compute/ops/reference.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// The backward-error constant c of the SVD's bound |s_i - sigma_i| <= c * eps * max(rows, cols) * s_1
/// (docs/COMPUTE.md: how it was established).
inline constexpr double kSpectrumSvdConstant = 4.0;
/// Columns the randomized range finder adds to k (oversampling).
inline constexpr uint64_t kSpectrumOversampling = 10;
/// Power iterations of the randomized range finder.
inline constexpr uint32_t kSpectrumPowerIterations = 2;

/// Rows of a tall matrix the Gram rung and the randomized residual decode or form at once (about 32 MiB).
uint64_t spectrum_band_rows(uint64_t cols);

/// Floating-point operations `method` performs on a rows x cols matrix (k: the randomized rung's).
double spectrum_flops(SpectrumMethod method, uint64_t rows, uint64_t cols, uint64_t k);
/// Host memory `method` needs beyond its input and outputs, at its peak.
uint64_t spectrum_working_bytes(SpectrumMethod method, uint64_t rows, uint64_t cols, uint64_t k);

/// The SVD's bound on every value: c eps max(rows, cols) s_1 (backward stability and Weyl).
double svd_value_bound(uint64_t rows, uint64_t cols, double largest);

/// The Gram rung's bounds of `values` (descending) into `bounds`, from `trace` = ||A||_F^2 as
/// computed: forming G errs by at most max(rows, cols) eps ||A||_F^2, the eigensolver by
/// c eps min(rows, cols) s_1^2; a value's error is then at most d / s_i and at most sqrt(d).
void gram_value_bounds(uint64_t rows, uint64_t cols, double trace, std::span<const double> values, std::span<double> bounds);

/// Computes `values` (descending) and `bounds` of `matrix` on `threads` BLAS threads (0: all).
/// A non-finite value is an INVALID_ARGUMENT naming its row and column; a decomposition that does
/// not converge is an INTERNAL error.
Status compute_spectrum(const MatrixView& matrix, SpectrumMethod method, std::span<double> values,
                        std::span<double> bounds, uint32_t threads);

}  // namespace tensormorph::ops
