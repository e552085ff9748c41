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

/// A column-major m x n matrix with m >= n: `matrix` or its transpose (the same singular values).
struct TallMatrix {
  std::vector<double> values;
  lapack_int m = 0, n = 0;
};

Result<TallMatrix> decode_tall(const MatrixView& matrix) {
  TallMatrix t;
  if (matrix.rows < matrix.cols) {
    // Row-major rows x cols is already column-major cols x rows.
    TM_ASSIGN_OR_RETURN(t.values, decode_all(matrix));
    t.m = static_cast<lapack_int>(matrix.cols);
    t.n = static_cast<lapack_int>(matrix.rows);
    return t;
  }
  t.m = static_cast<lapack_int>(matrix.rows);
  t.n = static_cast<lapack_int>(matrix.cols);
  t.values.resize(matrix.rows * matrix.cols);
  // Bands of 64 rows, so that each column receives a run of whole cache lines.
  constexpr uint64_t kBand = 64;
  std::vector<double> band(kBand * matrix.cols);
  for (uint64_t first = 0; first < matrix.rows; first += kBand) {
    const uint64_t count = std::min(kBand, matrix.rows - first);
    TM_RETURN_IF_ERROR(decode_rows(matrix, first, count, band.data()));
    for (uint64_t c = 0; c < matrix.cols; ++c) {
      double* column = t.values.data() + c * matrix.rows + first;
      for (uint64_t r = 0; r < count; ++r) column[r] = band[r * matrix.cols + c];
    }
  }
  return t;
}

/// Factors the column-major `rows` x `width` panel at `panel` (leading dimension `ld`) by a
/// recursive Householder QR (`dgeqrt3`, which also yields its block reflector's T, into `t`) and
/// applies Q^T to the `trailing` columns right of it as one block reflector (`dlarfb`).
Status factor_panel(double* panel, lapack_int ld, lapack_int rows, lapack_int width, lapack_int trailing, std::vector<double>& t,
                    lapack_int ldt) {
  TM_RETURN_IF_ERROR(lapack_status("dgeqrt3", LAPACKE_dgeqrt3(LAPACK_COL_MAJOR, rows, width, panel, ld, t.data(), ldt)));
  if (trailing == 0) return Status::Ok();
  return lapack_status("dlarfb", LAPACKE_dlarfb(LAPACK_COL_MAJOR, 'L', 'T', 'F', 'C', rows, trailing, width, panel, ld, t.data(), ldt,
                                                panel + static_cast<size_t>(width) * ld, ld));
}

/// Householder QR of the column-major m x n `a` (m > n) in panels of kQrPanel columns, each
/// factored recursively (`dgeqrt3`, which also yields its block reflector's T) and applied to the
/// trailing columns as one block reflector: LAPACK's `dgeqrf` factors panels column by column and
/// updates with narrower blocks. Returns R, n x n.
Result<std::vector<double>> triangular_factor(std::vector<double>& a, lapack_int m, lapack_int n) {
  constexpr lapack_int kQrPanel = 128;
  std::vector<double> t(static_cast<size_t>(kQrPanel) * kQrPanel);
  for (lapack_int k = 0; k < n; k += kQrPanel) {
    const lapack_int w = std::min(kQrPanel, n - k);
    TM_RETURN_IF_ERROR(factor_panel(a.data() + static_cast<size_t>(k) * m + k, m, m - k, w, n - k - w, t, kQrPanel));
  }
  std::vector<double> r(static_cast<size_t>(n) * n, 0.0);
  for (lapack_int j = 0; j < n; ++j) std::copy_n(a.data() + static_cast<size_t>(j) * m, j + 1, r.data() + static_cast<size_t>(j) * n);
  return r;
}

/// Reduces the column-major n x n `a` to upper band form of width `band_width` with blocked
/// Householder reflections from both sides, which are matrix products at near the cores' peak.
/// Per block of columns: a QR of the panel zeroes it below the diagonal block; then the block
/// row right of the band, transposed into `row_panel` so that it too is a (contiguous) QR,
/// is reduced to a lower triangle and its reflector applied to the rows below.
Status reduce_to_band(std::vector<double>& a, lapack_int n, lapack_int band_width) {
  std::vector<double> t(static_cast<size_t>(band_width) * band_width), row_panel(static_cast<size_t>(n) * band_width);
  for (lapack_int k = 0; k < n; k += band_width) {
    const lapack_int w = std::min(band_width, n - k);
    const lapack_int cols = n - k - w, reflectors = std::min(w, cols);
    double* panel = a.data() + static_cast<size_t>(k) * n + k;
    TM_RETURN_IF_ERROR(factor_panel(panel, n, n - k, w, cols, t, band_width));
    if (cols == 0) break;
    double* right = panel + static_cast<size_t>(w) * n;
    for (lapack_int j = 0; j < cols; ++j) {
      for (lapack_int i = 0; i < w; ++i) row_panel[static_cast<size_t>(i) * cols + j] = right[static_cast<size_t>(j) * n + i];
    }
    // When fewer columns than rows remain, the block row's last rows take the reflector too.
    TM_RETURN_IF_ERROR(factor_panel(row_panel.data(), cols, cols, reflectors, w - reflectors, t, band_width));
    TM_RETURN_IF_ERROR(lapack_status("dlarfb", LAPACKE_dlarfb(LAPACK_COL_MAJOR, 'R', 'N', 'F', 'C', n - k - w, cols, reflectors,
                                                              row_panel.data(), cols, t.data(), band_width, right + w, n)));
    // The block row is now R^T of the transposed panel: lower triangular, zero to its right.
    for (lapack_int j = 0; j < cols; ++j) {
      for (lapack_int i = 0; i < w; ++i) {
        const bool kept = i >= reflectors || j <= i;
        right[static_cast<size_t>(j) * n + i] = kept ? row_panel[static_cast<size_t>(i) * cols + j] : 0.0;
      }
    }
  }
  return Status::Ok();
}

/// Singular values (descending) of the column-major n x n `a` (destroyed) in two stages: a band
/// of width 64 (reduce_to_band), plane rotations from the band to bidiagonal form (`dgbbrd`), and
/// the bidiagonal's values by `dbdsqr` (dqds). LAPACK's one-stage `dgebrd`, which `dgesdd` calls,
/// spends half its operations in matrix-vector products bound by memory. Every step is
/// orthogonal, so the result is backward stable as `dgesdd`'s is.
Status two_stage_values(std::vector<double>& a, lapack_int n, std::span<double> s) {
  constexpr lapack_int kBandWidth = 64;
  TM_RETURN_IF_ERROR(reduce_to_band(a, n, kBandWidth));
  const lapack_int ku = std::min(kBandWidth, n - 1), ldab = ku + 1;
  std::vector<double> band(static_cast<size_t>(ldab) * n, 0.0);
  for (lapack_int j = 0; j < n; ++j) {
    for (lapack_int i = std::max(0, j - ku); i <= j; ++i) band[static_cast<size_t>(j) * ldab + ku + i - j] = a[static_cast<size_t>(j) * n + i];
  }
  a = {};
  std::vector<double> off_diagonal(static_cast<size_t>(n));
  double unused = 0;
  TM_RETURN_IF_ERROR(lapack_status("dgbbrd", LAPACKE_dgbbrd(LAPACK_COL_MAJOR, 'N', n, n, 0, 0, ku, band.data(), ldab, s.data(),
                                                            off_diagonal.data(), &unused, 1, &unused, 1, &unused, 1)));
  return lapack_status("dbdsqr", LAPACKE_dbdsqr(LAPACK_COL_MAJOR, 'U', n, 0, 0, 0, s.data(), off_diagonal.data(), &unused, 1,
                                                &unused, 1, &unused, 1));
}

/// Overwrites the row-major r x c matrix `q` (r >= c) with an orthonormal basis of its columns.
Status orthonormalize(std::vector<double>& q, uint64_t r, uint64_t c) {
  std::vector<double> tau(c);
  const auto rr = static_cast<lapack_int>(r), cc = static_cast<lapack_int>(c);
  TM_RETURN_IF_ERROR(lapack_status("dgeqrf", LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, rr, cc, q.data(), cc, tau.data())));
  return lapack_status("dorgqr", LAPACKE_dorgqr(LAPACK_ROW_MAJOR, rr, cc, cc, q.data(), cc, tau.data()));
}

Status svd_spectrum(const MatrixView& matrix, std::span<double> values, std::span<double> bounds) {
  TM_ASSIGN_OR_RETURN(TallMatrix tall, decode_tall(matrix));
  std::vector<double> square;
  if (tall.m > tall.n) {
    // The singular values of A = QR are R's.
    TM_ASSIGN_OR_RETURN(square, triangular_factor(tall.values, tall.m, tall.n));
    tall.values = {};
  } else {
    square = std::move(tall.values);
  }
  TM_RETURN_IF_ERROR(two_stage_values(square, tall.n, values));
  std::fill(bounds.begin(), bounds.end(), svd_value_bound(matrix.rows, matrix.cols, values[0]));
  return Status::Ok();
}

Status gram_spectrum(const MatrixView& matrix, std::span<double> values, std::span<double> bounds) {
  const uint64_t p = std::min(matrix.rows, matrix.cols);
  const auto pp = static_cast<blasint>(p);
  std::vector<double> g(p * p, 0.0);
  if (matrix.cols <= matrix.rows) {
    // G = A^T A, accumulated over bands of rows so that a tall matrix is never decoded whole.
    const uint64_t band = std::min(matrix.rows, spectrum_band_rows(matrix.cols));
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
  gram_value_bounds(matrix.rows, matrix.cols, trace, values, bounds);
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
  const uint64_t band = std::min(m, spectrum_band_rows(n));
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
