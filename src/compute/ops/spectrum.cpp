#include "compute/ops/spectrum.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensormorph/decode.h"

namespace tensormorph::ops {
namespace {

/// Rows of a tall matrix the Gram rung and the residual decode or form at once (about 32 MiB).
uint64_t chunk_rows(uint64_t cols) { return std::max<uint64_t>(1, (uint64_t{32} << 20) / (8 * cols)); }

/// Decodes rows [first, first + count) of `matrix` into `out` (row-major float64), refusing a
/// non-finite value: singular values of such a matrix are undefined and LAPACK would not say so.
Status decode_rows(const MatrixView& matrix, uint64_t first, uint64_t count, double* out) {
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(matrix.dtype, matrix.cols));
  for (uint64_t r = first; r < first + count; ++r) {
    double* row = out + (r - first) * matrix.cols;
    TM_RETURN_IF_ERROR(decode_to_f64(matrix.dtype, matrix.bytes.subspan(r * row_bytes, row_bytes), matrix.cols, row));
    for (uint64_t c = 0; c < matrix.cols; ++c) {
      if (!std::isfinite(row[c])) {
        return Status::InvalidArgument("the value at row " + std::to_string(r) + ", column " + std::to_string(c) + " is " +
                                       (std::isnan(row[c]) ? "NaN" : "infinite") +
                                       ": singular values are defined for finite matrices only");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<double>> decode_all(const MatrixView& matrix) {
  std::vector<double> a(matrix.rows * matrix.cols);
  TM_RETURN_IF_ERROR(decode_rows(matrix, 0, matrix.rows, a.data()));
  return a;
}

Status lapack_status(const char* routine, lapack_int info) {
  if (info == 0) return Status::Ok();
  if (info < 0) return Status::Internal(std::string(routine) + " rejected argument " + std::to_string(-info));
  return Status::Internal(std::string(routine) + " did not converge (info " + std::to_string(info) + ")");
}

/// Singular values of the row-major rows x cols matrix `a` (destroyed), descending.
Status svd_values(std::vector<double>& a, uint64_t rows, uint64_t cols, std::span<double> s) {
  // Row-major rows x cols is column-major cols x rows, the transpose: the same singular values.
  const auto n = static_cast<lapack_int>(cols), m = static_cast<lapack_int>(rows);
  double unused = 0;
  return lapack_status("dgesdd", LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', n, m, a.data(), n, s.data(), &unused, 1, &unused, 1));
}

/// Overwrites the row-major r x c matrix `q` (r >= c) with an orthonormal basis of its columns.
Status orthonormalize(std::vector<double>& q, uint64_t r, uint64_t c) {
  std::vector<double> tau(c);
  const auto rr = static_cast<lapack_int>(r), cc = static_cast<lapack_int>(c);
  TM_RETURN_IF_ERROR(lapack_status("dgeqrf", LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, rr, cc, q.data(), cc, tau.data())));
  return lapack_status("dorgqr", LAPACKE_dorgqr(LAPACK_ROW_MAJOR, rr, cc, cc, q.data(), cc, tau.data()));
}

Status svd_spectrum(const MatrixView& matrix, std::span<double> values, std::span<double> bounds) {
  TM_ASSIGN_OR_RETURN(auto a, decode_all(matrix));
  TM_RETURN_IF_ERROR(svd_values(a, matrix.rows, matrix.cols, values));
  // Backward stability: the computed values are exact for A + E with |E| <= c eps max(m, n) |A|,
  // and Weyl's inequality moves no singular value by more than |E|.
  const double bound = kSpectrumSvdConstant * DBL_EPSILON * static_cast<double>(std::max(matrix.rows, matrix.cols)) * values[0];
  std::fill(bounds.begin(), bounds.end(), bound);
  return Status::Ok();
}

Status gram_spectrum(const MatrixView& matrix, std::span<double> values, std::span<double> bounds) {
  const uint64_t p = std::min(matrix.rows, matrix.cols), q = std::max(matrix.rows, matrix.cols);
  const auto pp = static_cast<blasint>(p);
  std::vector<double> g(p * p, 0.0);
  if (matrix.cols <= matrix.rows) {
    // G = A^T A, accumulated over bands of rows so that a tall matrix is never decoded whole.
    const uint64_t band = std::min(matrix.rows, chunk_rows(matrix.cols));
    std::vector<double> rows(band * matrix.cols);
    for (uint64_t first = 0; first < matrix.rows; first += band) {
      const uint64_t count = std::min(band, matrix.rows - first);
      TM_RETURN_IF_ERROR(decode_rows(matrix, first, count, rows.data()));
      cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, pp, static_cast<blasint>(count), 1.0, rows.data(), pp,
                  1.0, g.data(), pp);
    }
  } else {
    TM_ASSIGN_OR_RETURN(auto a, decode_all(matrix));
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, pp, static_cast<blasint>(matrix.cols), 1.0, a.data(),
                static_cast<blasint>(matrix.cols), 0.0, g.data(), pp);
  }
  double trace = 0;
  for (uint64_t i = 0; i < p; ++i) trace += g[i * p + i];
  std::vector<double> eigen(p);
  TM_RETURN_IF_ERROR(lapack_status("dsyevd", LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'N', 'U', static_cast<lapack_int>(p),
                                                            g.data(), static_cast<lapack_int>(p), eigen.data())));
  for (uint64_t i = 0; i < p; ++i) values[i] = std::sqrt(std::max(eigen[p - 1 - i], 0.0));
  // Forming G in float64 errs by at most q eps |A|^T |A| elementwise (norm <= ||A||_F^2 = trace),
  // the symmetric eigensolver by c eps p lambda_1; a value's error is then at most
  // d / (s + sigma) <= d / s and at most sqrt(d).
  const double d = DBL_EPSILON * (static_cast<double>(q) * trace +
                                  kSpectrumSvdConstant * static_cast<double>(p) * values[0] * values[0]);
  for (uint64_t i = 0; i < p; ++i) bounds[i] = values[i] > 0 ? std::min(std::sqrt(d), d / values[i]) : std::sqrt(d);
  return Status::Ok();
}

Status randomized_spectrum(const MatrixView& matrix, std::span<double> values, std::span<double> bounds) {
  const uint64_t m = matrix.rows, n = matrix.cols, k = values.size();
  const uint64_t l = std::min(k + kSpectrumOversampling, std::min(m, n));
  TM_ASSIGN_OR_RETURN(auto a, decode_all(matrix));
  const auto mm = static_cast<blasint>(m), nn = static_cast<blasint>(n), ll = static_cast<blasint>(l);
  // A fixed seed: the same matrix gives the same answer every time.
  std::mt19937_64 rng(0x5eed5eedULL);
  std::normal_distribution<double> normal;
  std::vector<double> omega(n * l), y(m * l), z(n * l);
  for (double& v : omega) v = normal(rng);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, ll, nn, 1.0, a.data(), nn, omega.data(), ll, 0.0, y.data(), ll);
  TM_RETURN_IF_ERROR(orthonormalize(y, m, l));
  for (uint32_t it = 0; it < kSpectrumPowerIterations; ++it) {
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nn, ll, mm, 1.0, a.data(), nn, y.data(), ll, 0.0, z.data(), ll);
    TM_RETURN_IF_ERROR(orthonormalize(z, n, l));
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, ll, nn, 1.0, a.data(), nn, z.data(), ll, 0.0, y.data(), ll);
    TM_RETURN_IF_ERROR(orthonormalize(y, m, l));
  }
  // B^T = A^T Q (n x l); the singular values of B = Q^T A are those of Q Q^T A.
  std::vector<double> bt(n * l);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nn, ll, mm, 1.0, a.data(), nn, y.data(), ll, 0.0, bt.data(), ll);
  // The residual E = A - Q B, band by band: ||E||_F bounds ||E||_2.
  double residual_squares = 0;
  const uint64_t band = std::min(m, chunk_rows(n));
  std::vector<double> e(band * n);
  for (uint64_t first = 0; first < m; first += band) {
    const uint64_t count = std::min(band, m - first);
    std::copy(a.begin() + static_cast<std::ptrdiff_t>(first * n), a.begin() + static_cast<std::ptrdiff_t>((first + count) * n), e.begin());
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(count), nn, ll, -1.0, y.data() + first * l, ll,
                bt.data(), ll, 1.0, e.data(), nn);
    for (uint64_t i = 0; i < count * n; ++i) residual_squares += e[i] * e[i];
  }
  std::vector<double> s(l);
  double unused = 0;
  // Row-major n x l B^T is column-major l x n B (LAPACKE's row-major path would copy it).
  TM_RETURN_IF_ERROR(lapack_status("dgesdd", LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', ll, nn, bt.data(), ll, s.data(),
                                                            &unused, 1, &unused, 1)));
  // P = Q Q^T is a projector, so s_i = sigma_i(P A) <= sigma_i(A); Weyl on A = P A + E gives
  // sigma_i(A) <= s_i + ||E||_2. Rounding adds the SVD's own term.
  const double rounding = kSpectrumSvdConstant * DBL_EPSILON * static_cast<double>(std::max(m, n)) * (s[0] + std::sqrt(residual_squares));
  for (uint64_t i = 0; i < k; ++i) {
    values[i] = s[i];
    bounds[i] = std::sqrt(residual_squares) + rounding;
  }
  return Status::Ok();
}

}  // namespace

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
  const uint64_t p = std::min(rows, cols), q = std::max(rows, cols);
  switch (method) {
    case SpectrumMethod::kSvd: return 8 * (rows * cols + p * p + 8 * q);
    case SpectrumMethod::kGram:
      return 8 * (p * p + p) + (cols <= rows ? 8 * std::min(rows, chunk_rows(cols)) * cols : 8 * rows * cols);
    case SpectrumMethod::kRandomized: {
      const uint64_t l = std::min(k + kSpectrumOversampling, p);
      return 8 * (rows * cols + 2 * (rows + cols) * l + std::min(rows, chunk_rows(cols)) * cols + l * l);
    }
  }
  return 0;
}

Status compute_spectrum(const MatrixView& matrix, SpectrumMethod method, std::span<double> values,
                        std::span<double> bounds, uint32_t threads) {
  if (values.size() != bounds.size() || values.empty()) return Status::InvalidArgument("spectrum: outputs must be of one nonzero size");
  // OpenBLAS keeps one process-wide thread count; 0 restores all cores.
  openblas_set_num_threads(threads == 0 ? openblas_get_num_procs() : static_cast<int>(threads));
  switch (method) {
    case SpectrumMethod::kSvd: return svd_spectrum(matrix, values, bounds);
    case SpectrumMethod::kGram: return gram_spectrum(matrix, values, bounds);
    case SpectrumMethod::kRandomized: return randomized_spectrum(matrix, values, bounds);
  }
  return Status::InvalidArgument("spectrum: unknown method");
}

}  // namespace tensormorph::ops
