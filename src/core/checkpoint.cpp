#include "tensormorph/checkpoint.h"

#include <cmath>
#include <cstring>

#include "tensormorph/decode.h"

namespace tensormorph {

std::string_view format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kSafetensors: return "safetensors";
    case CheckpointFormat::kGguf: return "gguf";
    case CheckpointFormat::kPyTorch: return "pytorch";
    case CheckpointFormat::kPyTorchDcp: return "pytorch-dcp";
    case CheckpointFormat::kPyTorchSharded: return "pytorch-sharded";
    case CheckpointFormat::kMegatron: return "megatron-tp";
    case CheckpointFormat::kDeepSpeed: return "deepspeed-zero";
  }
  return "unknown";
}

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool TensorInfo::contiguous() const {
  if (strides.empty()) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= static_cast<int64_t>(shape[i]);
  }
  return true;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Checkpoint::Checkpoint(CheckpointFormat format, std::filesystem::path path, std::vector<SourceFile> files,
                       std::vector<TensorInfo> tensors, std::vector<MetadataEntry> metadata,
                       std::vector<std::string> notes, std::vector<FormatFact> facts)
    : format_(format),
      path_(std::move(path)),
      files_(std::move(files)),
      tensors_(std::move(tensors)),
      metadata_(std::move(metadata)),
      notes_(std::move(notes)),
      facts_(std::move(facts)),
      maps_(files_.size()) {
  by_name_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<std::shared_ptr<const MappedFile>> Checkpoint::mapped(uint32_t file) const {
  if (file >= files_.size()) return Status::Internal("tensor refers to file #" + std::to_string(file));
  std::lock_guard lock(map_mutex_);
  if (!maps_[file]) {
    TM_ASSIGN_OR_RETURN(auto map, MappedFile::open(files_[file].path));
    if (map->size() != files_[file].size) {
      return Status::IoError(files_[file].path.string() + ": file changed size since it was opened (" +
                             std::to_string(files_[file].size) + " -> " + std::to_string(map->size()) +
                             " bytes); reopen the checkpoint");
    }
    maps_[file] = std::move(map);
  }
  return maps_[file];
}

namespace {

/// FORMAT_ERROR naming the file and the tensor when the tensor's bytes run past the end of `map`.
Status check_within(const MappedFile& map, const TensorInfo& tensor) {
  uint64_t end = 0;
  if (__builtin_add_overflow(tensor.offset, tensor.nbytes, &end) || end > map.size()) {
    return Status::FormatError(map.path().string() + ": tensor '" + tensor.name + "' spans bytes [" +
                               std::to_string(tensor.offset) + ", " + std::to_string(tensor.offset + tensor.nbytes) +
                               ") beyond the end of the file (" + std::to_string(map.size()) + " bytes)");
  }
  return Status::Ok();
}

std::string dims_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

Status Checkpoint::gather_chunks(const TensorInfo& tensor, std::span<std::byte> out) const {
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const std::string where = path_.string() + ": tensor '" + tensor.name + "'";
  if (info.block_elems != 1) return Status::Unsupported(where + ": chunks of " + std::string(info.name) + " are not gathered");
  const uint64_t elem = info.block_bytes;
  const size_t rank = tensor.shape.size();
  if (out.size() != tensor.elements() * elem) return Status::Internal(where + ": gathering into a buffer of the wrong size");
  std::vector<uint64_t> global_stride(rank, 1);  // row-major, in elements
  for (size_t d = rank; d-- > 1;) global_stride[d - 1] = global_stride[d] * tensor.shape[d];
  for (const TensorChunk& chunk : tensor.chunks) {
    uint64_t count = 1;
    for (uint64_t s : chunk.sizes) count *= s;  // within the shape: the reader checked the tiling
    if (count == 0) continue;
    if (chunk.start.size() != rank || chunk.sizes.size() != rank) {
      return Status::Internal(where + ": a chunk of another rank");
    }
    TM_ASSIGN_OR_RETURN(auto map, mapped(chunk.file));
    uint64_t end = 0;
    if (__builtin_add_overflow(chunk.offset, chunk.nbytes, &end) || end > map->size()) {
      return Status::FormatError(map->path().string() + ": tensor '" + tensor.name + "', chunk at " + dims_text(chunk.start) +
                                 ": bytes [" + std::to_string(chunk.offset) + ", +" + std::to_string(chunk.nbytes) +
                                 ") run past the end of the file (" + std::to_string(map->size()) + " bytes)");
    }
    const std::byte* base = map->bytes().data() + chunk.offset;
    std::vector<int64_t> strides = chunk.strides;
    if (strides.empty()) {
      strides.assign(rank, 1);
      for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * static_cast<int64_t>(chunk.sizes[d]);
    }
    // Walk the chunk's rows (every dimension but the last) with an odometer and copy each.
    const uint64_t row = rank == 0 ? 1 : chunk.sizes[rank - 1];
    const int64_t step = rank == 0 ? 1 : strides[rank - 1];
    std::vector<uint64_t> index(rank == 0 ? 0 : rank - 1, 0);
    for (uint64_t done = 0; done < count; done += row) {
      int64_t src = 0;
      uint64_t dst = rank == 0 ? 0 : chunk.start[rank - 1];
      for (size_t d = 0; d + 1 < rank; ++d) {
        src += static_cast<int64_t>(index[d]) * strides[d];
        dst += (chunk.start[d] + index[d]) * global_stride[d];
      }
      // The row's elements are src + k * step, linear in k: its two ends bound them all.
      for (const uint64_t k : {uint64_t{0}, row - 1}) {
        const int64_t at = src + static_cast<int64_t>(k) * step;
        if (at < 0 || static_cast<uint64_t>(at + 1) * elem > chunk.nbytes) {
          return Status::FormatError(map->path().string() + ": tensor '" + tensor.name + "', chunk at " + dims_text(chunk.start) +
                                     ": element " + std::to_string(at) + " lies outside its storage at byte " +
                                     std::to_string(chunk.offset));
        }
      }
      if (step == 1) {
        std::memcpy(out.data() + dst * elem, base + src * static_cast<int64_t>(elem), row * elem);
      } else {
        for (uint64_t k = 0; k < row; ++k) {
          std::memcpy(out.data() + (dst + k) * elem, base + (src + static_cast<int64_t>(k) * step) * static_cast<int64_t>(elem), elem);
        }
      }
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < chunk.sizes[d]) break;
        index[d] = 0;
      }
    }
  }
  return Status::Ok();
}

Result<TensorStorage> Checkpoint::storage(const TensorInfo& tensor) const {
  if (tensor.chunks.empty()) {
    TM_ASSIGN_OR_RETURN(auto map, mapped(tensor.file));
    TM_RETURN_IF_ERROR(check_within(*map, tensor));
    return TensorStorage{std::move(map), tensor.offset};
  }
  std::lock_guard lock(gather_mutex_);
  std::weak_ptr<const MappedFile>& cached = gathered_[tensor.name];
  if (auto alive = cached.lock()) return TensorStorage{std::move(alive), 0};
  const std::filesystem::path label = path_.string() + " (tensor '" + tensor.name + "', gathered from " +
                                      std::to_string(tensor.chunks.size()) + " chunks)";
  TM_ASSIGN_OR_RETURN(auto gathered, MappedFile::in_memory(label, tensor.nbytes, [&](std::span<std::byte> out) {
                        return gather_chunks(tensor, out);
                      }));
  cached = gathered;
  // The last few stay gathered without a reader: a viewer asks for one tensor's tiles many times.
  recent_.push_back(gathered);
  if (recent_.size() > kRecentGathered) recent_.pop_front();
  return TensorStorage{std::move(gathered), 0};
}

Result<std::span<const std::byte>> Checkpoint::tensor_bytes(const TensorInfo& tensor) const {
  TM_ASSIGN_OR_RETURN(TensorStorage stored, storage(tensor));
  if (!tensor.chunks.empty()) {
    // A span has no owner: the gathered tensor stays for the checkpoint's life.
    std::lock_guard lock(gather_mutex_);
    pinned_.try_emplace(tensor.name, stored.map);
  }
  return stored.map->bytes().subspan(stored.offset, tensor.nbytes);
}

Result<std::vector<float>> Checkpoint::decode_f32(const TensorInfo& tensor) const {
  TM_ASSIGN_OR_RETURN(TensorStorage stored, storage(tensor));
  const auto bytes = stored.map->bytes().subspan(stored.offset, tensor.nbytes);
  const uint64_t count = tensor.elements();
  std::vector<float> out(count);
  auto context = [&] { return files_[tensor.file].path.string() + ": tensor '" + tensor.name + "'"; };
  if (tensor.contiguous()) {
    TM_ASSIGN_OR_RETURN(uint64_t need, dtype_storage_bytes(tensor.dtype, count));
    if (need > bytes.size()) return Status::FormatError(context() + ": storage shorter than its shape");
    TM_RETURN_IF_ERROR(decode_to_f32(tensor.dtype, bytes.first(need), count, out.data()).with_context(context()));
    return out;
  }
  // A strided view (PyTorch): decode the storage it spans, then gather in row-major order.
  const DTypeInfo& info = dtype_info(tensor.dtype);
  if (info.block_elems != 1) return Status::Unsupported(context() + ": strided view of a block-quantized type");
  const uint64_t storage_elems = bytes.size() / info.block_bytes;
  std::vector<float> storage(storage_elems);
  TM_RETURN_IF_ERROR(decode_to_f32(tensor.dtype, bytes.first(storage_elems * info.block_bytes), storage_elems,
                                   storage.data())
                         .with_context(context()));
  std::vector<uint64_t> index(tensor.shape.size(), 0);
  for (uint64_t i = 0; i < count; ++i) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) at += static_cast<int64_t>(index[d]) * tensor.strides[d];
    if (at < 0 || static_cast<uint64_t>(at) >= storage_elems) {
      return Status::FormatError(context() + ": strided view reaches element " + std::to_string(at) +
                                 " outside its storage of " + std::to_string(storage_elems));
    }
    out[i] = storage[static_cast<uint64_t>(at)];
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < tensor.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

nlohmann::ordered_json FormatFact::to_json() const {
  nlohmann::ordered_json j = {{"key", key}, {"value", value}};
  if (file) j["file"] = *file;
  return j;
}

double WeightBits::bits_per_weight() const {
  return elements == 0 ? 0.0 : 8.0 * static_cast<double>(bytes) / static_cast<double>(elements);
}

BitsPerWeight bits_per_weight(const Checkpoint& checkpoint) {
  BitsPerWeight out;
  std::vector<WeightBits> per(static_cast<size_t>(DType::kCount));
  std::vector<bool> seen(per.size(), false);
  for (const TensorInfo& t : checkpoint.tensors()) {
    const auto d = static_cast<size_t>(t.dtype);
    per[d].elements += t.elements();
    per[d].bytes += t.nbytes;
    seen[d] = true;
    out.total.elements += t.elements();
    out.total.bytes += t.nbytes;
  }
  for (size_t d = 0; d < per.size(); ++d) {
    if (seen[d]) out.by_dtype.emplace_back(static_cast<DType>(d), per[d]);
  }
  return out;
}

std::vector<FormatFact> format_facts(const Checkpoint& checkpoint) {
  std::vector<FormatFact> facts;
  for (uint32_t i = 0; i < checkpoint.files().size(); ++i) {
    const SourceFile& f = checkpoint.files()[i];
    facts.push_back({"file.path", f.path.string(), i});
    facts.push_back({"file.bytes", f.size, i});
  }
  facts.insert(facts.end(), checkpoint.facts().begin(), checkpoint.facts().end());
  const BitsPerWeight bits = bits_per_weight(checkpoint);
  // Three decimals: Q4_K's 4.5 and Q4_0's 4.5 stay exact, a mix reads as 4.837.
  auto rounded = [](double v) { return std::round(v * 1000.0) / 1000.0; };
  facts.push_back({"bits_per_weight", rounded(bits.total.bits_per_weight()), std::nullopt});
  for (const auto& [dtype, weight_bits] : bits.by_dtype) {
    facts.push_back({"bits_per_weight." + std::string(dtype_name(dtype)), rounded(weight_bits.bits_per_weight()),
                     std::nullopt});
  }
  return facts;
}

}  // namespace tensormorph
