#include "backends/cuda/gpu_spectrum.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compute/ops/spectrum.h"
#include "core/dtype_abi.h"

#if !TM_GPU_IS_HIP
#include <dlfcn.h>

#include <cublas_v2.h>
#include <cusolverDn.h>
#endif

namespace tensormorph::gpu {
namespace {

/// Floating-point operations (as spectrum_flops counts them) per nanosecond of the solvers in
/// float64: the SVD is a polar decomposition's QR and Cholesky iterations and a symmetric
/// eigensolve; the Gram matrix one large syrk and a smaller eigensolve.
double flops_per_ns(ops::SpectrumMethod method) { return method == ops::SpectrumMethod::kSvd ? 300.0 : 2000.0; }

#if !TM_GPU_IS_HIP

/// cuSOLVER's and cuBLAS's entry points, from the libraries of the CUDA toolkit or driver image.
struct SolverLibrary {
  std::string why_unavailable;  ///< empty when loaded
  decltype(&cusolverDnCreate) dn_create = nullptr;
  decltype(&cusolverDnDestroy) dn_destroy = nullptr;
  decltype(&cusolverDnSetStream) dn_set_stream = nullptr;
  decltype(&cusolverDnDgesvd_bufferSize) gesvd_buffer = nullptr;
  decltype(&cusolverDnDgesvd) gesvd = nullptr;
  decltype(&cusolverDnDgeqrf_bufferSize) geqrf_buffer = nullptr;
  decltype(&cusolverDnDgeqrf) geqrf = nullptr;
  decltype(&cusolverDnCreateParams) create_params = nullptr;
  decltype(&cusolverDnDestroyParams) destroy_params = nullptr;
  decltype(&cusolverDnXgesvdp_bufferSize) gesvdp_buffer = nullptr;
  decltype(&cusolverDnXgesvdp) gesvdp = nullptr;
  decltype(&cusolverDnDsyevd_bufferSize) syevd_buffer = nullptr;
  decltype(&cusolverDnDsyevd) syevd = nullptr;
  decltype(&cublasCreate_v2) blas_create = nullptr;
  decltype(&cublasDestroy_v2) blas_destroy = nullptr;
  decltype(&cublasSetStream_v2) blas_set_stream = nullptr;
  decltype(&cublasDgeam_64) geam = nullptr;
  decltype(&cublasDsyrk_v2_64) syrk = nullptr;
  decltype(&cublasDnrm2_v2_64) nrm2 = nullptr;
};

void* open_first(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* handle = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return handle;
  }
  return nullptr;
}

template <typename F>
bool bind(void* library, const char* symbol, F& out) {
  out = reinterpret_cast<F>(::dlsym(library, symbol));
  return out != nullptr;
}

const SolverLibrary& solver_library() {
  static const SolverLibrary library = [] {
    SolverLibrary l;
    // The toolkit this module was built with names cuSOLVER 12 and cuBLAS 13; the directory the
    // toolkit installs to is tried after the loader's own path. Their RUNPATH finds the rest.
    void* blas = open_first({"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13"});
    void* solver = open_first({"libcusolver.so.12", "/usr/local/cuda/lib64/libcusolver.so.12"});
    if (blas == nullptr || solver == nullptr) {
      l.why_unavailable = "cuSOLVER 12 / cuBLAS 13 not found (libcusolver.so.12, libcublas.so.13)";
      return l;
    }
    const bool bound = bind(solver, "cusolverDnCreate", l.dn_create) && bind(solver, "cusolverDnDestroy", l.dn_destroy) &&
                       bind(solver, "cusolverDnSetStream", l.dn_set_stream) &&
                       bind(solver, "cusolverDnDgesvd_bufferSize", l.gesvd_buffer) && bind(solver, "cusolverDnDgesvd", l.gesvd) &&
                       bind(solver, "cusolverDnDgeqrf_bufferSize", l.geqrf_buffer) && bind(solver, "cusolverDnDgeqrf", l.geqrf) &&
                       bind(solver, "cusolverDnCreateParams", l.create_params) &&
                       bind(solver, "cusolverDnDestroyParams", l.destroy_params) &&
                       bind(solver, "cusolverDnXgesvdp_bufferSize", l.gesvdp_buffer) && bind(solver, "cusolverDnXgesvdp", l.gesvdp) &&
                       bind(solver, "cusolverDnDsyevd_bufferSize", l.syevd_buffer) && bind(solver, "cusolverDnDsyevd", l.syevd) &&
                       bind(blas, "cublasCreate_v2", l.blas_create) && bind(blas, "cublasDestroy_v2", l.blas_destroy) &&
                       bind(blas, "cublasSetStream_v2", l.blas_set_stream) && bind(blas, "cublasDgeam_64", l.geam) &&
                       bind(blas, "cublasDsyrk_v2_64", l.syrk) && bind(blas, "cublasDnrm2_v2_64", l.nrm2);
    if (!bound) l.why_unavailable = std::string("cuSOLVER / cuBLAS lack a function this module calls: ") + ::dlerror();
    return l;
  }();
  return library;
}

/// One backend's solver handles, on its compute stream.
struct Handles {
  cusolverDnHandle_t dn = nullptr;
  cusolverDnParams_t params = nullptr;  ///< the 64-bit API's default options
  cublasHandle_t blas = nullptr;
};

std::mutex handles_mutex;
std::map<const GpuBackend*, Handles> handles_by_backend;

Result<Handles> handles_for(GpuBackend& b) {
  const SolverLibrary& l = solver_library();
  if (!l.why_unavailable.empty()) return Status::Unimplemented(l.why_unavailable);
  std::lock_guard lock(handles_mutex);
  if (auto it = handles_by_backend.find(&b); it != handles_by_backend.end()) return it->second;
  Handles h;
  if (l.dn_create(&h.dn) != CUSOLVER_STATUS_SUCCESS) return Status::Internal("cusolverDnCreate failed");
  if (l.blas_create(&h.blas) != CUBLAS_STATUS_SUCCESS) {
    l.dn_destroy(h.dn);
    return Status::Internal("cublasCreate failed");
  }
  if (l.create_params(&h.params) != CUSOLVER_STATUS_SUCCESS) {
    l.dn_destroy(h.dn);
    l.blas_destroy(h.blas);
    return Status::Internal("cusolverDnCreateParams failed");
  }
  l.dn_set_stream(h.dn, b.compute_stream());
  l.blas_set_stream(h.blas, b.compute_stream());
  handles_by_backend[&b] = h;
  return h;
}

Status solver_status(cusolverStatus_t s, const char* what) {
  return s == CUSOLVER_STATUS_SUCCESS ? Status::Ok() : Status::Internal(std::string(what) + " failed (cusolver status " + std::to_string(static_cast<int>(s)) + ")");
}

Status blas_status(cublasStatus_t s, const char* what) {
  return s == CUBLAS_STATUS_SUCCESS ? Status::Ok() : Status::Internal(std::string(what) + " failed (cublas status " + std::to_string(static_cast<int>(s)) + ")");
}

/// A device allocation released when it goes out of scope.
class DeviceBlock {
 public:
  DeviceBlock(GpuBackend& backend, std::unique_ptr<GpuBuffer> buffer) : backend_(&backend), buffer_(std::move(buffer)) {}
  DeviceBlock(DeviceBlock&&) noexcept = default;
  DeviceBlock& operator=(DeviceBlock&&) = delete;
  ~DeviceBlock() {
    if (buffer_) backend_->release(std::move(buffer_));
  }
  /// The buffer as the host hands it to an operation.
  GpuBuffer* buffer() const { return buffer_.get(); }
  /// Its device memory.
  uint8_t* data() const { return buffer_->data; }
  /// Its device memory as `T`s.
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(buffer_->data); }

 private:
  GpuBackend* backend_;
  std::unique_ptr<GpuBuffer> buffer_;
};

Result<DeviceBlock> device_block(GpuBackend& b, uint64_t bytes) {
  TM_ASSIGN_OR_RETURN(auto buffer, b.allocate(std::max<uint64_t>(bytes, 8)));
  return DeviceBlock(b, std::move(buffer));
}

/// The matrix as row-major float64 on the device: decoded by tm.decode@1's kernels, widened, and
/// refused with the first non-finite value's position.
Result<DeviceBlock> decoded_matrix(GpuBackend& b, const ops::SpectrumArgs& a, uint64_t memory_budget, RunReport& report) {
  const uint64_t elems = a.rows * a.cols;
  TM_ASSIGN_OR_RETURN(DeviceBlock f32, device_block(b, elems * 4));
  ops::DecodeArgs d;
  d.input = a.input;
  d.output.dtype = DType::kF32;
  d.output.elems = elems;
  d.output.arg.struct_size = sizeof(TM_TensorArg);
  d.output.arg.dtype = TM_DTYPE_F32;
  d.output.arg.rank = 1;
  d.output.arg.shape[0] = elems;
  d.output.arg.nbytes = elems * 4;
  d.output.arg.buffer = reinterpret_cast<TM_Buffer*>(f32.buffer());
  TM_ASSIGN_OR_RETURN(const RunReport decoded, run_decode(b, d, memory_budget));
  report.device_ns += decoded.device_ns;
  TM_ASSIGN_OR_RETURN(DeviceBlock f64, device_block(b, elems * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock flag, device_block(b, 8));
  cudaStream_t stream = b.compute_stream();
  TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(flag.as<void>(), 0xff, 8, stream), "clearing the non-finite flag"));
  TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_widen_checked(f32.as<float>(), f64.as<double>(), elems,
                                                          flag.as<unsigned long long>(), stream),
                             "widening to float64"));
  unsigned long long first_bad = 0;
  TM_RETURN_IF_ERROR(b.check(cudaMemcpyAsync(&first_bad, flag.as<void>(), 8, cudaMemcpyDeviceToHost, stream), "reading the flag"));
  TM_RETURN_IF_ERROR(b.check(cudaStreamSynchronize(stream), "widening to float64"));
  if (first_bad < elems) {
    float value = 0;
    TM_RETURN_IF_ERROR(b.copy_to_host(&value, reinterpret_cast<const uint8_t*>(f32.as<float>() + first_bad), 4));
    return Status::InvalidArgument("the value at row " + std::to_string(first_bad / a.cols) + ", column " +
                                   std::to_string(first_bad % a.cols) + " is " + (std::isnan(value) ? "NaN" : "infinite") +
                                   ": singular values are defined for finite matrices only");
  }
  return f64;
}

/// An int for cuSOLVER's 32-bit dimensions.
int dim(uint64_t v) { return static_cast<int>(v); }

/// The matrix as column-major with at least as many rows as columns (the same singular values):
/// row-major rows x cols is column-major cols x rows, so a tall matrix is transposed first.
struct TallView {
  std::optional<DeviceBlock> transposed;
  double* data = nullptr;
  uint64_t rows = 0, cols = 0;
};

Result<TallView> tall_view(GpuBackend& b, const Handles& h, const ops::SpectrumArgs& a, DeviceBlock& x) {
  const SolverLibrary& l = solver_library();
  const uint64_t m = a.rows, n = a.cols;
  TallView v{std::nullopt, x.as<double>(), n, m};
  if (m <= n) return v;
  TM_ASSIGN_OR_RETURN(DeviceBlock t, device_block(b, m * n * 8));
  const double one = 1, zero = 0;
  TM_RETURN_IF_ERROR(blas_status(l.geam(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int64_t>(m), static_cast<int64_t>(n), &one,
                                        x.as<double>(), static_cast<int64_t>(n), &zero, t.as<double>(), static_cast<int64_t>(m),
                                        t.as<double>(), static_cast<int64_t>(m)),
                                 "cublasDgeam (transpose)"));
  v.transposed.emplace(std::move(t));
  v.data = v.transposed->as<double>();
  v.rows = m;
  v.cols = n;
  return v;
}

/// Replaces a clearly tall view by R of its QR factorization (`geqrf`, Householder: backward
/// stable), which has the same singular values: the polar iterations then work on n x n, not m x n.
Status reduce_to_triangle(GpuBackend& b, const Handles& h, TallView& v) {
  if (v.rows * 4 < v.cols * 5) return Status::Ok();
  const SolverLibrary& l = solver_library();
  const uint64_t p = v.cols;
  int lwork = 0;
  TM_RETURN_IF_ERROR(solver_status(l.geqrf_buffer(h.dn, dim(v.rows), dim(p), v.data, dim(v.rows), &lwork), "cusolverDnDgeqrf_bufferSize"));
  TM_ASSIGN_OR_RETURN(DeviceBlock work, device_block(b, static_cast<uint64_t>(lwork) * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock tau, device_block(b, p * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock info, device_block(b, 8));
  TM_RETURN_IF_ERROR(solver_status(l.geqrf(h.dn, dim(v.rows), dim(p), v.data, dim(v.rows), tau.as<double>(), work.as<double>(), lwork,
                                           info.as<int>()),
                                   "cusolverDnDgeqrf"));
  int status = 0;
  TM_RETURN_IF_ERROR(b.copy_to_host(&status, info.data(), sizeof status));
  if (status != 0) return Status::Internal("cusolverDnDgeqrf rejected argument " + std::to_string(-status));
  TM_ASSIGN_OR_RETURN(DeviceBlock r, device_block(b, p * p * 8));
  TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_upper_triangle(v.data, v.rows, r.as<double>(), p, b.compute_stream()), "taking R"));
  v.transposed.emplace(std::move(r));
  v.data = v.transposed->as<double>();
  v.rows = p;
  return Status::Ok();
}

/// Singular values by cuSOLVER's `gesvdp`: a polar decomposition A = U_p H (QDWH, matrix products)
/// and H's eigenvalues (`syevd`), several times faster than the QR-iteration `gesvd`. To converge
/// where a singular value is near zero it perturbs the matrix and reports by how much; Weyl's
/// inequality moves no value by more, so that perturbation is returned to join the bound.
Result<double> polar_svd_values(GpuBackend& b, const Handles& h, TallView& v, std::span<double> values) {
  const SolverLibrary& l = solver_library();
  const uint64_t p = v.cols;
  const auto rows = static_cast<int64_t>(v.rows), cols = static_cast<int64_t>(v.cols);
  TM_ASSIGN_OR_RETURN(DeviceBlock s, device_block(b, p * 8));
  // Values only, yet the polar factor and H's eigenvectors are formed on the way: gesvdp fails
  // to run without room for them.
  TM_ASSIGN_OR_RETURN(DeviceBlock u, device_block(b, v.rows * p * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock right, device_block(b, p * p * 8));
  size_t device_bytes = 0, host_bytes = 0;
  TM_RETURN_IF_ERROR(solver_status(l.gesvdp_buffer(h.dn, h.params, CUSOLVER_EIG_MODE_NOVECTOR, 1, rows, cols, CUDA_R_64F, v.data, rows,
                                                   CUDA_R_64F, s.data(), CUDA_R_64F, u.data(), rows, CUDA_R_64F, right.data(), cols, CUDA_R_64F,
                                                   &device_bytes, &host_bytes),
                                   "cusolverDnXgesvdp_bufferSize"));
  TM_ASSIGN_OR_RETURN(DeviceBlock work, device_block(b, device_bytes));
  std::vector<uint8_t> host_work(std::max<size_t>(host_bytes, 1));
  TM_ASSIGN_OR_RETURN(DeviceBlock info, device_block(b, 8));
  double perturbation = 0;
  TM_RETURN_IF_ERROR(solver_status(l.gesvdp(h.dn, h.params, CUSOLVER_EIG_MODE_NOVECTOR, 1, rows, cols, CUDA_R_64F, v.data, rows,
                                            CUDA_R_64F, s.data(), CUDA_R_64F, u.data(), rows, CUDA_R_64F, right.data(), cols, CUDA_R_64F,
                                            work.data(), device_bytes, host_work.data(), host_bytes, info.as<int>(), &perturbation),
                                   "cusolverDnXgesvdp"));
  int converged = 0;
  TM_RETURN_IF_ERROR(b.copy_to_host(&converged, info.data(), sizeof converged));
  if (converged != 0) return Status::Internal("cusolverDnXgesvdp did not converge (info " + std::to_string(converged) + ")");
  TM_RETURN_IF_ERROR(b.copy_to_host(values.data(), s.data(), p * 8));
  if (!std::isfinite(perturbation)) return Status::Internal("cusolverDnXgesvdp reported a non-finite perturbation");
  return perturbation;
}

/// Singular values by cuSOLVER's `gesvd` (Householder bidiagonalization, QR iteration).
Status bidiagonal_svd_values(GpuBackend& b, const Handles& h, TallView& v, std::span<double> values) {
  const SolverLibrary& l = solver_library();
  const uint64_t p = v.cols;
  int lwork = 0;
  TM_RETURN_IF_ERROR(solver_status(l.gesvd_buffer(h.dn, dim(v.rows), dim(v.cols), &lwork), "cusolverDnDgesvd_bufferSize"));
  TM_ASSIGN_OR_RETURN(DeviceBlock work, device_block(b, static_cast<uint64_t>(lwork) * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock superdiagonal, device_block(b, p * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock s, device_block(b, p * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock info, device_block(b, 8));
  TM_RETURN_IF_ERROR(solver_status(l.gesvd(h.dn, 'N', 'N', dim(v.rows), dim(v.cols), v.data, dim(v.rows), s.as<double>(), nullptr, 1,
                                           nullptr, 1, work.as<double>(), lwork, superdiagonal.as<double>(), info.as<int>()),
                                   "cusolverDnDgesvd"));
  int converged = 0;
  TM_RETURN_IF_ERROR(b.copy_to_host(&converged, info.data(), sizeof converged));
  if (converged != 0) return Status::Internal("cusolverDnDgesvd did not converge (info " + std::to_string(converged) + ")");
  return b.copy_to_host(values.data(), s.data(), p * 8);
}

/// The SVD's values and their bound: `gesvdp`, unless the perturbation it needed would loosen the
/// backward-stability bound, in which case the matrix is decoded again for `gesvd`.
Status svd_values(GpuBackend& b, const Handles& h, const ops::SpectrumArgs& a, DeviceBlock& x, uint64_t memory_budget,
                  RunReport& report, std::span<double> values, std::span<double> bounds) {
  {
    TM_ASSIGN_OR_RETURN(TallView v, tall_view(b, h, a, x));
    TM_RETURN_IF_ERROR(reduce_to_triangle(b, h, v));
    TM_ASSIGN_OR_RETURN(const double perturbation, polar_svd_values(b, h, v, values));
    const double bound = ops::svd_value_bound(a.rows, a.cols, values[0]);
    if (perturbation <= bound) {
      std::fill(bounds.begin(), bounds.end(), bound + perturbation);
      return Status::Ok();
    }
  }
  TM_ASSIGN_OR_RETURN(DeviceBlock again, decoded_matrix(b, a, memory_budget, report));
  TM_ASSIGN_OR_RETURN(TallView v, tall_view(b, h, a, again));
  TM_RETURN_IF_ERROR(bidiagonal_svd_values(b, h, v, values));
  std::fill(bounds.begin(), bounds.end(), ops::svd_value_bound(a.rows, a.cols, values[0]));
  return Status::Ok();
}

Status gram_values(GpuBackend& b, const Handles& h, const ops::SpectrumArgs& a, DeviceBlock& x, std::span<double> values, double* trace) {
  const SolverLibrary& l = solver_library();
  const uint64_t m = a.rows, n = a.cols, p = std::min(m, n);
  double norm = 0;
  TM_RETURN_IF_ERROR(blas_status(l.nrm2(h.blas, static_cast<int64_t>(m * n), x.as<double>(), 1, &norm), "cublasDnrm2"));
  *trace = norm * norm;
  TM_ASSIGN_OR_RETURN(DeviceBlock g, device_block(b, p * p * 8));
  const double one = 1, zero = 0;
  // X = column-major n x m (A^T): A^T A = X X^T for a tall A, A A^T = X^T X for a wide one.
  const cublasOperation_t op = n <= m ? CUBLAS_OP_N : CUBLAS_OP_T;
  const uint64_t k = n <= m ? m : n;
  TM_RETURN_IF_ERROR(blas_status(l.syrk(h.blas, CUBLAS_FILL_MODE_UPPER, op, static_cast<int64_t>(p), static_cast<int64_t>(k), &one,
                                        x.as<double>(), static_cast<int64_t>(n), &zero, g.as<double>(), static_cast<int64_t>(p)),
                                 "cublasDsyrk"));
  int lwork = 0;
  TM_ASSIGN_OR_RETURN(DeviceBlock w, device_block(b, p * 8));
  TM_RETURN_IF_ERROR(solver_status(l.syevd_buffer(h.dn, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_UPPER, dim(p), g.as<double>(),
                                                  dim(p), w.as<double>(), &lwork),
                                   "cusolverDnDsyevd_bufferSize"));
  TM_ASSIGN_OR_RETURN(DeviceBlock work, device_block(b, static_cast<uint64_t>(lwork) * 8));
  TM_ASSIGN_OR_RETURN(DeviceBlock info, device_block(b, 8));
  TM_RETURN_IF_ERROR(solver_status(l.syevd(h.dn, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_UPPER, dim(p), g.as<double>(), dim(p),
                                           w.as<double>(), work.as<double>(), lwork, info.as<int>()),
                                   "cusolverDnDsyevd"));
  int converged = 0;
  TM_RETURN_IF_ERROR(b.copy_to_host(&converged, info.data(), sizeof converged));
  if (converged != 0) return Status::Internal("cusolverDnDsyevd did not converge (info " + std::to_string(converged) + ")");
  std::vector<double> eigen(p);
  TM_RETURN_IF_ERROR(b.copy_to_host(eigen.data(), w.data(), p * 8));
  for (uint64_t i = 0; i < p; ++i) values[i] = std::sqrt(std::max(eigen[p - 1 - i], 0.0));
  return Status::Ok();
}

#endif  // !TM_GPU_IS_HIP

}  // namespace

void spectrum_support(const TM_OpQuery& query, TM_OpSupport& out) {
  const auto method = query.op ? ops::spectrum_method_of(query.op) : std::nullopt;
  const auto dtype = from_abi_dtype(query.input_dtype);
  out.level = TM_SUPPORT_NONE;
  out.exactness = TM_EXACT_BOUNDED;
  // gesvdp's reported perturbation joins the bound only while it is within it: at most twice c eps.
  out.error_bound = 2 * ops::kSpectrumSvdConstant * 2.220446049250313e-16;
  std::string reason;
#if TM_GPU_IS_HIP
  reason = TM_GPU_VENDOR " has no solver library in this build (rocSOLVER): spectra run on the CPU";
#else
  if (!method || *method == ops::SpectrumMethod::kRandomized) {
    reason = TM_GPU_VENDOR " does not implement the randomized rung: it runs on the CPU";
  } else if (!solver_library().why_unavailable.empty()) {
    reason = solver_library().why_unavailable;
  } else if (!dtype || !kernel_dtype(*dtype)) {
    reason = std::string(TM_GPU_VENDOR " decodes spectra's inputs of its kernel dtypes only");
  } else if (query.shape_class != TM_SHAPE_MATRIX) {
    reason = "a spectrum takes a 2-D tensor";
  } else {
    out.level = TM_SUPPORT_FULL;
  }
#endif
  (void)dtype, (void)method;
  std::snprintf(out.reason, sizeof out.reason, "%s", reason.c_str());
}

Result<TM_CostEstimate> spectrum_estimate(const TM_OpInstance& op) {
  TM_ASSIGN_OR_RETURN(const ops::SpectrumArgs a, ops::parse_spectrum(op));
  if (a.method == ops::SpectrumMethod::kRandomized || !kernel_dtype(a.input.dtype)) {
    return Status::Unimplemented(TM_GPU_VENDOR " does not run this spectrum instance");
  }
  const uint64_t elems = a.rows * a.cols, p = std::min(a.rows, a.cols);
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  cost.bytes_read = a.input.arg.nbytes;
  cost.bytes_written = a.values.arg.nbytes + a.bounds.arg.nbytes;
  // The f32 and f64 copies; for the SVD a transposed copy and the polar factor U_p (gesvdp).
  cost.working_bytes = elems * 12 + (a.method == ops::SpectrumMethod::kSvd ? elems * 16 : p * p * 8) + p * p * 8;
  cost.compute_ns = ops::spectrum_flops(a.method, a.rows, a.cols, a.count) / flops_per_ns(a.method);
  return cost;
}

Result<RunReport> run_spectrum(GpuBackend& b, const ops::SpectrumArgs& a, uint64_t memory_budget, std::span<double> values,
                               std::span<double> bounds) {
#if TM_GPU_IS_HIP
  (void)b, (void)a, (void)memory_budget, (void)values, (void)bounds;
  return Status::Unimplemented(TM_GPU_VENDOR " has no solver library in this build");
#else
  if (a.method == ops::SpectrumMethod::kRandomized || !kernel_dtype(a.input.dtype)) {
    return Status::Unimplemented(TM_GPU_VENDOR " does not run this spectrum instance");
  }
  TM_RETURN_IF_ERROR(b.activate());
  TM_ASSIGN_OR_RETURN(const Handles h, handles_for(b));
  const auto start = std::chrono::steady_clock::now();
  RunReport report;
  report.bytes_read = a.input.arg.nbytes;
  report.bytes_written = a.values.arg.nbytes + a.bounds.arg.nbytes;
  TM_ASSIGN_OR_RETURN(DeviceBlock x, decoded_matrix(b, a, memory_budget, report));
  if (a.method == ops::SpectrumMethod::kSvd) {
    TM_RETURN_IF_ERROR(svd_values(b, h, a, x, memory_budget, report, values, bounds));
  } else {
    double trace = 0;
    TM_RETURN_IF_ERROR(gram_values(b, h, a, x, values, &trace));
    ops::gram_value_bounds(a.rows, a.cols, trace, values, bounds);
  }
  report.device_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  return report;
#endif
}

void release_spectrum_solvers(const GpuBackend& backend) {
#if TM_GPU_IS_HIP
  (void)backend;
#else
  std::lock_guard lock(handles_mutex);
  auto it = handles_by_backend.find(&backend);
  if (it == handles_by_backend.end()) return;
  solver_library().destroy_params(it->second.params);
  solver_library().dn_destroy(it->second.dn);
  solver_library().blas_destroy(it->second.blas);
  handles_by_backend.erase(it);
#endif
}

}  // namespace tensormorph::gpu
