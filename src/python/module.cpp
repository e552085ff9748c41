// The native module `tensormorph._tensormorph`; python/tensormorph/ is the API over it.
#include "py_bindings.h"
#include "py_support.h"

PYBIND11_MODULE(_tensormorph, m) {
  m.doc() = "Tensormorph's native module: the C++ library the `tensormorph` package calls.";
  tensormorph::python::register_exceptions(m);
  tensormorph::python::bind_checkpoints(m);
  tensormorph::python::bind_analyses(m);
  tensormorph::python::bind_comparisons(m);
}
