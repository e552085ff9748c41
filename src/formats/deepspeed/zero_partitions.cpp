// One model-parallel rank of a ZeRO checkpoint: its data-parallel ranks' flat fp32 partitions cut
// into parameters in param_shapes order, as zero_to_fp32 reassembles them. ZeRO-1/2 flatten each
// param group and cut it into one partition per rank, so a parameter is a run of the group's
// concatenated partitions; ZeRO-3 cuts every parameter into ceil(numel / world) elements per rank.
// A parameter that lies in one rank's partition is mapped in place; one spread over ranks is listed
// as the blocks it is made of (each one contiguous run of a partition) and gathered on first read.
#include "formats/deepspeed/zero_partitions.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/printable.h"
#include "formats/pytorch/pytorch.h"

namespace tensormorph::deepspeed {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kF32 = 4;

/// A run of a parameter's elements stored consecutively in one rank's flat group.
struct Piece {
  uint32_t rank = 0;
  uint32_t group = 0;
  uint64_t first = 0;  ///< element of the rank's flat group
  uint64_t count = 0;
  uint64_t at = 0;     ///< element of the parameter (row-major)
};

using BlockSink = std::function<void(const std::vector<uint64_t>& start, const std::vector<uint64_t>& sizes, uint64_t first)>;

/// Cuts elements [begin, end) of the sub-tensor at `start[0..dim)` (first element `base`) of a
/// row-major `shape` into blocks that are each one run of the row-major order: a block's dimensions
/// after its first one longer than 1 are whole.
void cut_range(const std::vector<uint64_t>& shape, size_t dim, std::vector<uint64_t>& start, uint64_t base, uint64_t begin,
               uint64_t end, const BlockSink& emit) {
  if (begin >= end) return;
  if (dim + 1 >= shape.size()) {
    std::vector<uint64_t> sizes(shape.size(), 1);
    if (!shape.empty()) {
      start[dim] = begin;
      sizes[dim] = end - begin;
    }
    emit(start, sizes, base + begin);
    if (!shape.empty()) start[dim] = 0;
    return;
  }
  uint64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const uint64_t first_whole = (begin + inner - 1) / inner, last_whole = end / inner;
  const auto slice = [&](uint64_t i, uint64_t from, uint64_t to) {
    start[dim] = i;
    cut_range(shape, dim + 1, start, base + i * inner, from, to, emit);
    start[dim] = 0;
  };
  if (first_whole > last_whole) return slice(begin / inner, begin % inner, end - (begin / inner) * inner);
  if (begin < first_whole * inner) slice(first_whole - 1, begin - (first_whole - 1) * inner, inner);
  if (last_whole > first_whole) {
    std::vector<uint64_t> sizes(shape.size(), 1);
    sizes[dim] = last_whole - first_whole;
    for (size_t d = dim + 1; d < shape.size(); ++d) sizes[d] = shape[d];
    start[dim] = first_whole;
    emit(start, sizes, base + first_whole * inner);
    start[dim] = 0;
  }
  if (end > last_whole * inner) slice(last_whole, 0, end - last_whole * inner);
}

/// A run of a parameter's elements in a 1-D source tensor: elements [first, first + count) of
/// `source` are elements [at, at + count) of the parameter (row-major).
struct Run {
  const TensorInfo* source = nullptr;
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t at = 0;
};

/// The parameter `param` of `dtype` made of `runs` (in order): mapped in place when one run holds
/// it, otherwise chunks, each one run of the row-major order within one source.
TensorInfo assembled_tensor(const ParamShape& param, DType dtype, const std::vector<Run>& runs) {
  const uint64_t element_bytes = dtype_info(dtype).block_bytes;
  TensorInfo t;
  t.name = param.name;
  t.dtype = dtype;
  t.shape = param.shape;
  t.nbytes = param.elements * element_bytes;
  if (runs.empty()) return t;
  t.file = runs[0].source->file;
  t.offset = runs[0].source->offset + runs[0].first * element_bytes;
  if (runs.size() == 1) return t;
  for (const Run& run : runs) {
    std::vector<uint64_t> start(param.shape.size(), 0);
    cut_range(param.shape, 0, start, 0, run.at, run.at + run.count,
              [&](const std::vector<uint64_t>& block_start, const std::vector<uint64_t>& sizes, uint64_t first) {
                uint64_t count = 1;
                for (uint64_t size : sizes) count *= size;
                TensorChunk chunk;
                chunk.start = block_start;
                chunk.sizes = sizes;
                chunk.file = run.source->file;
                chunk.offset = run.source->offset + (run.first + (first - run.at)) * element_bytes;
                chunk.nbytes = count * element_bytes;
                t.chunks.push_back(std::move(chunk));
              });
  }
  return t;
}

/// An optimizer-held parameter: its pieces of the ranks' flat fp32 groups.
TensorInfo parameter_tensor(const ParamShape& param, const std::vector<Piece>& pieces,
                            const std::vector<std::vector<TensorInfo>>& flat /* [rank][group] */) {
  std::vector<Run> runs;
  for (const Piece& piece : pieces) runs.push_back({&flat[piece.rank][piece.group], piece.first, piece.count, piece.at});
  TensorInfo t = assembled_tensor(param, DType::kF32, runs);
  if (runs.empty()) {
    t.file = flat[0][0].file;
    t.offset = flat[0][0].offset;
  }
  return t;
}

/// The elements [first, first + count) of a rank's groups laid end to end, as runs of its groups.
void pieces_of_rank_run(const std::vector<uint64_t>& group_start, const std::vector<uint64_t>& lengths, uint32_t rank, uint64_t first,
                        uint64_t count, uint64_t at, std::vector<Piece>* pieces) {
  for (uint32_t g = 0; g < lengths.size() && count > 0; ++g) {
    const uint64_t begin = group_start[g], end = begin + lengths[g];
    if (first >= end || first + count <= begin) continue;
    const uint64_t from = std::max(first, begin), to = std::min(first + count, end);
    pieces->push_back({rank, g, from - begin, to - from, at + (from - first)});
  }
}

/// Per piece: "<rank archive> group G elements [a, b) at byte N = elements [c, d)" of the parameter.
nlohmann::ordered_json describe_pieces(const std::vector<Piece>& pieces, const std::vector<std::vector<TensorInfo>>& flat,
                                       const std::vector<fs::path>& archives) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Piece& p : pieces) {
    list.push_back(archives[p.rank].filename().string() + " group " + std::to_string(p.group) + " elements [" + std::to_string(p.first) +
                   ", " + std::to_string(p.first + p.count) + ") at byte " + std::to_string(flat[p.rank][p.group].offset + p.first * kF32) +
                   " = elements [" + std::to_string(p.at) + ", " + std::to_string(p.at + p.count) + ")");
  }
  return list;
}

/// ZeRO-3's frozen parameters, as zero_to_fp32 reassembles them: every rank's model states hold
/// ceil(numel / world size) elements of each (`frozen_param_fragments`, in the parameter's dtype,
/// the last rank's zero-padded), rank 0's part first. Rank 0's archive (of model-parallel rank
/// `mp`) is `rank0`, file `rank0_file`; the other ranks' archives are appended to `files`. Each
/// parameter's pieces go to `metadata` under `pieces_key` + its name.
Result<std::vector<TensorInfo>> zero3_frozen_parameters(const fs::path& tag, uint32_t mp, const std::vector<ParamShape>& frozen,
                                                        const Checkpoint& rank0, uint32_t rank0_file, uint64_t ranks,
                                                        std::vector<SourceFile>& files, const std::string& pieces_key,
                                                        std::vector<MetadataEntry>& metadata) {
  std::vector<std::unique_ptr<Checkpoint>> others;
  std::vector<const Checkpoint*> states = {&rank0};
  std::vector<uint32_t> file_of = {rank0_file};
  for (uint64_t r = 1; r < ranks; ++r) {
    const fs::path path = tag / model_states_name(mp, true, r);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      return Status::NotFound(tag.string() + ": data-parallel rank " + std::to_string(r) + "'s model states (" + path.filename().string() +
                              ") are missing; they hold its part of the frozen parameters (first " + quoted_name(frozen[0].name) + ")");
    }
    TM_ASSIGN_OR_RETURN(auto archive, pytorch::open_file(path));
    file_of.push_back(static_cast<uint32_t>(files.size()));
    files.push_back({path, archive->files()[0].size});
    states.push_back(archive.get());
    others.push_back(std::move(archive));
  }
  std::vector<TensorInfo> out;
  for (const ParamShape& param : frozen) {
    const uint64_t part = (param.elements + ranks - 1) / ranks;
    std::vector<TensorInfo> fragments;  // located in this checkpoint's files
    std::vector<Run> runs;
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    for (uint64_t r = 0; r < ranks; ++r) {
      const fs::path& path = files[file_of[r]].path;
      const TensorInfo* fragment = states[r]->find("frozen_param_fragments." + param.name);
      if (fragment == nullptr) {
        return Status::FormatError(path.string() + ": frozen_param_fragments has no " + quoted_name(param.name) +
                                   ", which frozen_param_shapes lists");
      }
      const auto where = [&] { return path.string() + ": frozen_param_fragments " + quoted_name(param.name) + " at offset " + std::to_string(fragment->offset); };
      if (fragment->shape.size() != 1 || fragment->shape[0] != part || !fragment->contiguous() || !fragment->chunks.empty()) {
        return Status::FormatError(where() + " is " + fragment->shape_string() + ", not the [" + std::to_string(part) + "] elements of " +
                                   "ceil(" + std::to_string(param.elements) + " / " + std::to_string(ranks) + ") a rank holds");
      }
      if (dtype_info(fragment->dtype).block_elems != 1 || (r > 0 && fragment->dtype != fragments[0].dtype)) {
        return Status::FormatError(where() + " is " + std::string(dtype_name(fragment->dtype)) + (r > 0 ? ", but rank 0's is " + std::string(dtype_name(fragments[0].dtype)) : ""));
      }
      fragments.push_back(*fragment);
      fragments.back().file = file_of[r];
    }
    for (uint64_t r = 0; r < ranks && r * part < param.elements; ++r) {
      const uint64_t count = std::min(part, param.elements - r * part);
      runs.push_back({&fragments[r], 0, count, r * part});
      pieces.push_back(files[file_of[r]].path.filename().string() + " frozen_param_fragments elements [0, " + std::to_string(count) + ") at byte " +
                       std::to_string(fragments[r].offset) + " = elements [" + std::to_string(r * part) + ", " + std::to_string(r * part + count) + ")");
    }
    out.push_back(assembled_tensor(param, fragments[0].dtype, runs));
    metadata.push_back({pieces_key + param.name, "array<string>", pieces});
  }
  return out;
}

std::string list_text(const std::vector<uint64_t>& values) {
  std::string text;
  for (uint64_t v : values) text += (text.empty() ? "" : ", ") + std::to_string(v);
  return "[" + text + "]";
}

}  // namespace

Result<RankPart> open_model_parallel_rank(const fs::path& tag, uint32_t mp, const std::vector<fs::path>& archives,
                                          const std::string& pieces_key, std::vector<SourceFile>& files) {
  RankPart rank_part;
  std::error_code ec;
  const uint32_t base = static_cast<uint32_t>(files.size());
  const fs::path model_path =
      fs::is_regular_file(tag / model_states_name(mp, false), ec) ? tag / model_states_name(mp, false) : tag / model_states_name(mp, true);
  if (!fs::is_regular_file(model_path, ec)) {
    return Status::NotFound(tag.string() + ": " + mp_rank_name(mp) + " has optimizer states (" + archives[0].filename().string() +
                            ") but no model states (" + model_states_name(mp, false) + " or " + model_states_name(mp, true) + ")");
  }
  rank_part.model_path = model_path;
  TM_ASSIGN_OR_RETURN(rank_part.model, read_model_states(model_path));
  const ModelStates& model = rank_part.model;
  TM_ASSIGN_OR_RETURN(auto model_archive, pytorch::open_file(model_path));
  files.push_back(model_archive->files()[0]);
  const bool bf16 = archives[0].filename().string().starts_with(kBf16Prefix);

  std::vector<std::vector<TensorInfo>> flat;  // [rank][group]
  int64_t stage = 0, world = 0;
  for (uint32_t r = 0; r < archives.size(); ++r) {
    TM_ASSIGN_OR_RETURN(RankStates rank, read_rank_states(archives[r], base + r + 1));
    TM_ASSIGN_OR_RETURN(uint64_t size, file_size_of(archives[r]));
    files.push_back({archives[r], size});
    if (r == 0) {
      stage = rank.zero_stage;
      world = rank.partition_count;
      if (world > static_cast<int64_t>(archives.size())) {
        return Status::NotFound(tag.string() + ": data-parallel rank " + std::to_string(archives.size()) + " is missing (" +
                                optim_states_name(archives.size(), mp, bf16) + "), yet " + archives[0].filename().string() +
                                " says partition_count=" + std::to_string(world));
      }
    }
    if (rank.partition_count != static_cast<int64_t>(archives.size())) {
      return Status::FormatError(archives[r].string() + ": partition_count=" + std::to_string(rank.partition_count) + ", but " + tag.string() +
                                 " holds " + std::to_string(archives.size()) + " ranks' optimizer states");
    }
    if (rank.zero_stage != stage) {
      return Status::FormatError(archives[r].string() + ": zero_stage=" + std::to_string(rank.zero_stage) + ", but rank 0's is " +
                                 std::to_string(stage));
    }
    if (r > 0 && rank.groups.size() != flat[0].size()) {
      return Status::FormatError(archives[r].string() + ": " + std::to_string(rank.groups.size()) + " flat param groups, but rank 0 has " +
                                 std::to_string(flat[0].size()));
    }
    flat.push_back(std::move(rank.groups));
  }
  const size_t group_count = flat[0].size();
  if (group_count == 0) return Status::FormatError(archives[0].string() + ": no flat param groups");
  if (stage <= 2 && model.groups.size() != group_count) {
    return Status::FormatError(model_path.string() + ": param_shapes lists " + std::to_string(model.groups.size()) + " param groups, but " +
                               archives[0].filename().string() + " holds " + std::to_string(group_count) + " flat partitions");
  }

  std::vector<TensorInfo>& tensors = rank_part.tensors;
  std::vector<MetadataEntry>& metadata = rank_part.metadata;
  std::vector<std::string>& notes = rank_part.notes;
  std::set<std::string> names;
  uint64_t in_place = 0, gathered = 0, padding_total = 0;
  const auto add_parameter = [&](const ParamShape& param, const std::vector<Piece>& pieces) -> Status {
    if (!names.insert(param.name).second) {
      return Status::FormatError(model_path.string() + ": param_shapes lists parameter " + quoted_name(param.name) + " twice");
    }
    tensors.push_back(parameter_tensor(param, pieces, flat));
    (pieces.size() <= 1 ? in_place : gathered) += 1;
    metadata.push_back({pieces_key + param.name, "array<string>", describe_pieces(pieces, flat, archives)});
    return Status::Ok();
  };
  const uint64_t ranks = archives.size();
  std::vector<FormatFact>& facts = rank_part.facts;
  if (stage <= 2) {
    // Each group: the ranks' partitions end to end, the parameters in order, then padding that
    // only rounds the group up to a multiple of 2 * world size.
    const uint64_t align = 2 * ranks;
    for (uint32_t g = 0; g < group_count; ++g) {
      std::vector<uint64_t> lengths, rank_start;
      uint64_t total = 0;
      for (uint32_t r = 0; r < ranks; ++r) {
        rank_start.push_back(total);
        lengths.push_back(flat[r][g].elements());
        total += lengths.back();
        facts.push_back({"deepspeed.group" + std::to_string(g) + ".partition_elements", lengths.back(), base + r + 1});
      }
      uint64_t offset = 0;
      for (const ParamShape& param : model.groups[g]) {
        if (param.elements > total - offset) {
          return Status::FormatError(model_path.string() + ": param_shapes group " + std::to_string(g) + ", parameter " + quoted_name(param.name) +
                                     " (" + std::to_string(param.elements) + " elements) needs elements [" + std::to_string(offset) + ", " +
                                     std::to_string(offset + param.elements) + ") of the group, but the ranks' flat partitions hold " +
                                     std::to_string(total) + " (" + list_text(lengths) + ")");
        }
        std::vector<Piece> pieces;
        for (uint32_t r = 0; r < ranks; ++r) {
          const uint64_t begin = std::max(offset, rank_start[r]), end = std::min(offset + param.elements, rank_start[r] + lengths[r]);
          if (begin < end) pieces.push_back({r, g, begin - rank_start[r], end - begin, begin - offset});
        }
        TM_RETURN_IF_ERROR(add_parameter(param, pieces));
        offset += param.elements;
      }
      const auto round_up = [&](uint64_t n) { return (n + align - 1) / align * align; };
      if (round_up(offset) != round_up(total)) {
        return Status::FormatError(model_path.string() + ": param_shapes group " + std::to_string(g) + " accounts for " + std::to_string(offset) +
                                   " elements, but the ranks' flat partitions hold " + std::to_string(total) + " (" + list_text(lengths) +
                                   "): more than padding to a multiple of " + std::to_string(align) + " (2 x world size)");
      }
      padding_total += total - offset;
      notes.push_back("param group " + std::to_string(g) + ": " + std::to_string(model.groups[g].size()) + " parameters, " +
                      std::to_string(offset) + " elements in flat fp32 partitions of " + list_text(lengths) + " elements per rank, " +
                      std::to_string(total - offset) + " padding");
      facts.push_back({"deepspeed.group" + std::to_string(g) + ".padding_elements", total - offset, std::nullopt});
    }
  } else {
    // Every rank's groups end to end; each parameter in turn takes ceil(numel / world) elements of
    // every rank, its part from rank 0 first, zero-padded at the end.
    std::vector<uint64_t> lengths, group_start;
    uint64_t available = 0;
    for (uint32_t g = 0; g < group_count; ++g) {
      group_start.push_back(available);
      lengths.push_back(flat[0][g].elements());
      available += lengths.back();
      for (uint32_t r = 1; r < ranks; ++r) {
        if (flat[r][g].elements() != lengths.back()) {
          return Status::FormatError(archives[r].string() + ": fp32_flat_groups group " + std::to_string(g) + " holds " +
                                     std::to_string(flat[r][g].elements()) + " elements, but rank 0's holds " + std::to_string(lengths.back()) +
                                     " (ZeRO-3 partitions are equal)");
        }
      }
    }
    uint64_t offset = 0, params = 0;
    for (const auto& group : model.groups) {
      for (const ParamShape& param : group) {
        const uint64_t part = (param.elements + ranks - 1) / ranks;
        if (part > available - offset) {
          return Status::FormatError(model_path.string() + ": parameter " + quoted_name(param.name) + " (" + std::to_string(param.elements) +
                                     " elements, " + std::to_string(part) + " per rank) needs elements [" + std::to_string(offset) + ", " +
                                     std::to_string(offset + part) + ") of each rank's flat groups, which hold " + std::to_string(available) +
                                     " (" + list_text(lengths) + ")");
        }
        std::vector<Piece> pieces;
        for (uint32_t r = 0; r < ranks; ++r) {
          const uint64_t at = r * part;
          if (at >= param.elements) break;
          pieces_of_rank_run(group_start, lengths, r, offset, std::min(part, param.elements - at), at, &pieces);
        }
        TM_RETURN_IF_ERROR(add_parameter(param, pieces));
        padding_total += part * ranks - param.elements;
        offset += part;
        ++params;
      }
    }
    if (offset != available) {
      return Status::FormatError(model_path.string() + ": param_shapes account for " + std::to_string(offset) + " elements per rank, but " +
                                 archives[0].filename().string() + "'s fp32_flat_groups hold " + std::to_string(available) + " (" +
                                 list_text(lengths) + ")");
    }
    notes.push_back(std::to_string(params) + " parameters in flat fp32 groups of " + list_text(lengths) + " elements per rank, each parameter " +
                    "cut into ceil(numel / " + std::to_string(ranks) + ") elements per rank, " + std::to_string(padding_total) + " padding");
  }

  // Frozen parameters: whole in the model states under ZeRO-1/2, one part per rank's model states
  // under ZeRO-3. Then the model-states archive's own tensors: buffers and anything else of
  // `module` that the optimizer does not hold.
  std::set<std::string> frozen;
  for (const ParamShape& param : model.frozen) frozen.insert(param.name);
  uint64_t half_copies = 0;
  std::vector<std::string> unread_frozen;
  if (stage <= 2) {
    for (const ParamShape& param : model.frozen) {
      const TensorInfo* fragment = model_archive->find("frozen_param_fragments." + param.name);
      if (fragment == nullptr || !names.insert(param.name).second) {
        unread_frozen.push_back(param.name);
        continue;
      }
      TensorInfo copy = *fragment;
      copy.name = param.name;
      copy.file = base;
      tensors.push_back(std::move(copy));
    }
  } else if (!model.frozen.empty()) {
    TM_ASSIGN_OR_RETURN(auto parts, zero3_frozen_parameters(tag, mp, model.frozen, *model_archive, base, ranks, files, pieces_key, metadata));
    for (TensorInfo& t : parts) {
      if (!names.insert(t.name).second) {
        return Status::FormatError(model_path.string() + ": frozen_param_shapes lists " + quoted_name(t.name) + ", which param_shapes lists too");
      }
      (t.chunks.empty() ? in_place : gathered) += 1;
      tensors.push_back(std::move(t));
    }
    notes.push_back(std::to_string(parts.size()) + " frozen parameters, each cut into ceil(numel / " + std::to_string(ranks) +
                    ") elements of every rank's model states (frozen_param_fragments)");
  }
  constexpr std::string_view kModule = "module.";
  for (const TensorInfo& t : model_archive->tensors()) {
    if (!t.name.starts_with(kModule)) continue;
    const std::string name = t.name.substr(kModule.size());
    if (frozen.contains(name)) continue;
    if (names.contains(name)) {
      ++half_copies;
      continue;
    }
    names.insert(name);
    TensorInfo copy = t;
    copy.name = name;
    copy.file = base;
    tensors.push_back(std::move(copy));
  }
  for (const auto& [alias, source] : model.shared) {
    const std::string& source_name = source;  // a structured binding cannot be captured before clang 16
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const TensorInfo& t) { return t.name == source_name; });
    if (it == tensors.end() || !names.insert(alias).second) continue;
    TensorInfo copy = *it;
    copy.name = alias;
    tensors.push_back(std::move(copy));
  }
  if (half_copies > 0) {
    notes.push_back(std::to_string(half_copies) + " tensors of module are the training copies of optimizer-held parameters; the fp32 " +
                    "master parameters are listed instead");
  }
  if (!unread_frozen.empty()) {
    notes.push_back(std::to_string(unread_frozen.size()) + " frozen parameters (first " + quoted_name(unread_frozen[0]) +
                    ") are not listed: no frozen_param_fragments tensor holds them");
  }
  notes.push_back("optimizer moments (the ranks' base optimizer states) are not listed");
  rank_part.stage = stage;
  rank_part.world = ranks;
  rank_part.groups = group_count;
  rank_part.in_place = in_place;
  rank_part.gathered = gathered;
  rank_part.padding = padding_total;
  return rank_part;
}

}  // namespace tensormorph::deepspeed
