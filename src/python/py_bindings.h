// The parts of the native module, each adding its classes and functions.
#pragma once

#include <pybind11/pybind11.h>

namespace tensormorph::python {

/// Checkpoint, Tensor and _open.
void bind_checkpoints(pybind11::module_& module);
/// _backends, _index, _stats, _quantiles, _outliers, _channels, _spectrum and last_placements.
void bind_analyses(pybind11::module_& module);
/// _diff and _quantize_error.
void bind_comparisons(pybind11::module_& module);

}  // namespace tensormorph::python
