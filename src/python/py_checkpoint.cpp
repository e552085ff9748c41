// Checkpoints and tensors for Python: headers, metadata and values, the stored ones zero-copy.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "formats/npy/npy.h"
#include "py_bindings.h"
#include "py_support.h"
#include "tensormorph/decode.h"
#include "tensormorph/open.h"

namespace tensormorph::python {
namespace {

// NumPy's type for the stored elements of `dtype` when NumPy holds them as they are.
std::optional<py::dtype> native_dtype(DType dtype) {
  if (const auto descr = npy::numpy_descr(dtype)) return py::dtype(std::string(*descr));
  if (dtype == DType::kBF16) {
    // NumPy has no bfloat16; ml_dtypes (JAX's) adds one, viewed in place when it is installed.
    // Looked up once (a failed import searches the whole path again each time); never freed, as
    // Python may be gone before static destructors run.
    static const py::object* bfloat16 = [] {
      try {
        return new py::object(py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16")));
      } catch (py::error_already_set&) {
        return new py::object(py::none());
      }
    }();
    if (!bfloat16->is_none()) return bfloat16->cast<py::dtype>();
  }
  return std::nullopt;
}

// The integer type that holds the bits of one stored element (BF16: uint16, F8: uint8); nullopt for
// types whose elements are not whole bytes (blocks, sub-byte floats).
std::optional<py::dtype> bits_dtype(DType dtype) {
  const DTypeInfo& info = dtype_info(dtype);
  if (info.is_quantized || info.block_elems != 1 || info.block_bytes == 0) return std::nullopt;
  switch (info.block_bytes) {
    case 1: return py::dtype("|u1");
    case 2: return py::dtype("<u2");
    case 4: return py::dtype("<u4");
    case 8: return py::dtype("<u8");
    default: return std::nullopt;
  }
}

std::string location(const TensorHandle& t) {
  return t.checkpoint->files()[t.info->file].path.string() + ": tensor '" + t.info->name + "' at offset " +
         std::to_string(t.info->offset);
}

// A read-only array over the tensor's stored bytes, keeping their mapping alive.
py::array stored_view(const TensorHandle& t, const py::dtype& dtype, bool element_shape) {
  Result<TensorStorage> storage = [&] {
    py::gil_scoped_release release;
    return t.checkpoint->storage(*t.info);  // gathers a tensor stored in chunks once
  }();
  TensorStorage st = value_or_raise(std::move(storage));
  const auto* data = st.map->bytes().data() + st.offset;
  std::vector<py::ssize_t> shape, strides;
  if (element_shape) {
    const auto itemsize = static_cast<py::ssize_t>(dtype.itemsize());
    for (uint64_t d : t.info->shape) shape.push_back(static_cast<py::ssize_t>(d));
    if (!t.info->strides.empty()) {
      for (int64_t s : t.info->strides) strides.push_back(static_cast<py::ssize_t>(s) * itemsize);
    } else {
      py::ssize_t step = itemsize;
      strides.resize(shape.size());
      for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = step;
        step *= std::max<py::ssize_t>(shape[i], 1);
      }
    }
  } else {
    shape = {static_cast<py::ssize_t>(t.info->nbytes)};
    strides = {1};
  }
  // The readers check every view against its storage; a view must never reach past the mapping.
  uint64_t extent = 0;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    empty = empty || shape[d] == 0;
    if (shape[d] > 0) extent += static_cast<uint64_t>(shape[d] - 1) * static_cast<uint64_t>(std::max<py::ssize_t>(strides[d], 0));
  }
  extent = empty ? 0 : extent + static_cast<uint64_t>(dtype.itemsize());
  if (st.offset > st.map->size() || extent > st.map->size() - st.offset) {
    raise_status(Status::FormatError(location(t) + ": its " + std::to_string(extent) +
                                     " bytes reach past the end of the file"));
  }
  auto* keep = new std::shared_ptr<const MappedFile>(std::move(st.map));
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<const MappedFile>*>(p); });
  py::array view(dtype, shape, strides, data, owner);
  view.attr("setflags")(py::arg("write") = false);
  return view;
}

py::array decoded_f32(const TensorHandle& t, const std::string& compute) {
  if (!dtype_decodable(t.info->dtype)) {
    raise_status(Status::Unsupported(location(t) + ": " + std::string(dtype_not_decodable_reason(t.info->dtype))));
  }
  engine::Records records;
  Result<std::vector<float>> values = [&]() -> Result<std::vector<float>> {
    py::gil_scoped_release release;
    TM_ASSIGN_OR_RETURN(auto* session, session_for(compute));
    return engine::decode_tensor(session->scheduler(), *t.checkpoint, *t.info, &records);
  }();
  remember_placements(records);
  auto* owned = new std::vector<float>(value_or_raise(std::move(values)));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  std::vector<py::ssize_t> shape;
  for (uint64_t d : t.info->shape) shape.push_back(static_cast<py::ssize_t>(d));
  return py::array(py::dtype("<f4"), shape, {}, owned->data(), owner);
}

py::list tensor_list(const std::shared_ptr<const Checkpoint>& ckpt) {
  py::list list;
  for (const TensorInfo& t : ckpt->tensors()) list.append(TensorHandle{ckpt, &t});
  return list;
}

py::dict metadata_dict(const Checkpoint& ckpt) {
  py::dict dict;
  for (const MetadataEntry& e : ckpt.metadata()) dict[py::str(e.key)] = to_python(e.value);
  return dict;
}

}  // namespace

void bind_checkpoints(py::module_& m) {
  py::class_<TensorHandle>(m, "Tensor", "One named tensor of an open checkpoint (it keeps the checkpoint open).")
      .def_property_readonly("name", [](const TensorHandle& t) { return t.info->name; }, "Its name in the checkpoint.")
      .def_property_readonly("dtype", [](const TensorHandle& t) { return std::string(dtype_name(t.info->dtype)); },
                             "The stored element type (\"BF16\", \"Q4_K\", ...).")
      .def_property_readonly("shape",
                             [](const TensorHandle& t) {
                               py::tuple shape(t.info->shape.size());
                               for (size_t i = 0; i < t.info->shape.size(); ++i) shape[i] = t.info->shape[i];
                               return shape;
                             },
                             "Row-major dimensions (GGUF's are reversed to this order).")
      .def_property_readonly("nbytes", [](const TensorHandle& t) { return t.info->nbytes; }, "Bytes it occupies as stored.")
      .def_property_readonly("file", [](const TensorHandle& t) { return t.checkpoint->files()[t.info->file].path; },
                             "The file holding it (the first of its chunks' files for a tensor stored in chunks).")
      .def_property_readonly("offset", [](const TensorHandle& t) { return t.info->offset; },
                             "Byte offset of its first stored byte in that file.")
      .def_property_readonly("chunks", [](const TensorHandle& t) { return t.info->chunks.size(); },
                             "How many stored blocks it is assembled from (0: stored whole).")
      .def_property_readonly("zero_copy",
                             [](const TensorHandle& t) { return native_dtype(t.info->dtype).has_value(); },
                             "True when numpy() is a read-only view of the stored bytes; false when it decodes to "
                             "float32.")
      .def(
          "numpy",
          [](const TensorHandle& t, bool stored, const std::string& compute) -> py::array {
            if (stored) {
              if (const auto descr = npy::numpy_descr(t.info->dtype)) return stored_view(t, py::dtype(std::string(*descr)), true);
              if (auto bits = bits_dtype(t.info->dtype)) return stored_view(t, *bits, true);
              return stored_view(t, py::dtype("|u1"), false);
            }
            if (auto native = native_dtype(t.info->dtype)) return stored_view(t, *native, true);
            return decoded_f32(t, compute);
          },
          py::arg("stored") = false, py::arg("compute") = "",
          "The values: a read-only zero-copy view for types NumPy holds (float64/32/16, integers, bool; "
          "bfloat16 with ml_dtypes), else decoded to float32 (a copy, through the scheduler). stored=True: "
          "the stored bytes zero-copy instead (BF16 as uint16 bits, F8 as uint8, block types as raw uint8 bytes).")
      .def("__repr__", [](const TensorHandle& t) {
        return "<tensormorph.Tensor '" + t.info->name + "' " + std::string(dtype_name(t.info->dtype)) + " " +
               t.info->shape_string() + ">";
      });

  py::class_<Checkpoint, std::shared_ptr<Checkpoint>>(m, "Checkpoint",
                                                      "An open checkpoint: headers read, tensor bytes mapped on use.")
      .def_property_readonly("path", &Checkpoint::path, "The path opened.")
      .def_property_readonly("format", [](const Checkpoint& c) { return std::string(format_name(c.format())); },
                             "\"safetensors\", \"gguf\", \"pytorch\", \"pytorch-dcp\", \"pytorch-sharded\", \"megatron-tp\" or "
                             "\"deepspeed-zero\".")
      .def_property_readonly("files",
                             [](const Checkpoint& c) {
                               py::list files;
                               for (const SourceFile& f : c.files()) {
                                 files.append(py::dict(py::arg("path") = f.path, py::arg("size") = f.size));
                               }
                               return files;
                             },
                             "The files holding tensor data: [{'path', 'size'}].")
      .def_property_readonly("metadata", &metadata_dict, "Format-level metadata (GGUF key/values, __metadata__, ...).")
      .def_property_readonly("facts",
                             [](const Checkpoint& c) {
                               py::dict facts;
                               for (const FormatFact& f : format_facts(c)) facts[py::str(f.key)] = to_python(f.value);
                               return facts;
                             },
                             "How it is stored: file sizes, the reader's facts, bits per weight.")
      .def_property_readonly("notes", [](const Checkpoint& c) { return std::vector<std::string>(c.notes().begin(), c.notes().end()); },
                             "What the reader noticed and tolerated.")
      .def_property_readonly(
          "tensors",
          [](const std::shared_ptr<Checkpoint>& c) { return tensor_list(c); }, "Every tensor, in file order.")
      .def("__len__", [](const Checkpoint& c) { return c.tensors().size(); })
      .def("__contains__", [](const Checkpoint& c, const std::string& name) { return c.find(name) != nullptr; })
      .def("__getitem__", [](const std::shared_ptr<Checkpoint>& c, const std::string& name) {
        const TensorInfo* t = c->find(name);
        if (t == nullptr) throw py::key_error(c->path().string() + ": no tensor named '" + name + "'");
        return TensorHandle{c, t};
      })
      .def("__iter__", [](const std::shared_ptr<Checkpoint>& c) { return tensor_list(c).attr("__iter__")(); })
      .def("__repr__", [](const Checkpoint& c) {
        return "<tensormorph.Checkpoint " + std::string(format_name(c.format())) + " '" + c.path().string() + "', " +
               std::to_string(c.tensors().size()) + " tensors>";
      });

  m.def(
      "_open",
      [](const std::filesystem::path& path, const std::vector<std::string>& tp_split) {
        OpenOptions options;
        options.tensor_parallel_rules = tp_split;
        Result<std::unique_ptr<Checkpoint>> opened = [&] {
          py::gil_scoped_release release;
          return open_checkpoint(path, options);
        }();
        return std::shared_ptr<Checkpoint>(value_or_raise(std::move(opened)));
      },
      py::arg("path"), py::arg("tp_split") = std::vector<std::string>{});
}

}  // namespace tensormorph::python
