// The parts of the native module, each adding its classes and functions.
#pragma once

#include <pybind11/pybind11.h>

namespace tensormorph::python {

/// Checkpoint, Tensor and _open.
void bind_checkpoints(pybind11::module_& module);
/// _index, _stats, _spectrum, _backends and last_placements.
void bind_analyses(pybind11::module_& module);

}  // namespace tensormorph::python
