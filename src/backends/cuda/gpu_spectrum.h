// The spectrum operations on the GPU: the matrix decoded and widened to float64 on the device, then
// cuSOLVER — the SVD (gesvd) for tm.spectrum@1, cuBLAS's syrk and the symmetric eigensolver (syevd)
// for tm.spectrum_gram@1 — with the bounds the CPU states. cuSOLVER and cuBLAS are loaded when
// first needed, so the module still loads where they are missing; the HIP build has no solver and
// declares none. The randomized rung stays on the CPU.
#pragma once

#include <cstdint>
#include <span>

#include "backends/cuda/gpu_backend.h"
#include "backends/cuda/gpu_exec.h"
#include "compute/ops/op_instance.h"
#include "tensormorph/c/plugin.h"

namespace tensormorph::gpu {

/// Fills `out` with this module's support of a spectrum operation.
void spectrum_support(const TM_OpQuery& query, TM_OpSupport& out);

/// The modelled cost of a spectrum instance: its floating-point operations at the solver's rate
/// and its device memory (decoded float32, float64, a transposed copy or the Gram matrix, workspace).
Result<TM_CostEstimate> spectrum_estimate(const TM_OpInstance& op);

/// Runs a spectrum instance into `values` and `bounds` (host, descending, count of them);
/// `memory_budget` (0: none) caps the decode's chunks.
Result<RunReport> run_spectrum(GpuBackend& backend, const ops::SpectrumArgs& args, uint64_t memory_budget,
                               std::span<double> values, std::span<double> bounds);

/// Frees the solver handles of `backend` (before it is destroyed).
void release_spectrum_solvers(const GpuBackend& backend);

}  // namespace tensormorph::gpu
