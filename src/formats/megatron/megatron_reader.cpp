// Megatron-LM tensor-parallel sets: each rank's archive is read by the PyTorch reader, and every
// model tensor is matched across ranks by name and assembled by its layer's role
// (formats/megatron/tensor_parallel.h); pipeline stages and model chunks renumber the layers.
#include "formats/megatron/megatron.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/printable.h"
#include "formats/megatron/tensor_parallel.h"
#include "formats/pointer_file.h"
#include "formats/pytorch/pytorch.h"

namespace tensormorph::megatron {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kModelPrefix = "model.";

/// The directory that holds the ranks: `directory` itself, or the iteration its
/// latest_checkpointed_iteration.txt names ("release" or a number, as Megatron writes it).
Result<fs::path> iteration_directory(const fs::path& directory) {
  TM_ASSIGN_OR_RETURN(const std::optional<std::string> named, latest_checkpointed_iteration(directory));
  if (!named) return directory;
  const fs::path iteration = directory / (*named == "release" ? *named : iteration_directory_name(*named));
  std::error_code ec;
  if (!fs::is_directory(iteration, ec)) {
    return Status::NotFound((directory / "latest_checkpointed_iteration.txt").string() + ": names iteration " +
                            quoted_name(*named, 40) + ", but " + iteration.string() + " is not a directory");
  }
  return iteration;
}

/// Every rank's archive: `tensor` ranks per pipeline stage, stage-major (archives[stage * tensor + rank]).
struct RankGrid {
  size_t tensor = 0;
  size_t stages = 0;
  bool staged = false;  ///< directories named mp_rank_XX_YYY (pipeline parallelism)
  std::vector<fs::path> archives;
};

/// "mp_rank_XX" or, in a set with pipeline stages, "mp_rank_XX_YYY": a rank's directory, and the
/// prefix (with "/") of the tensors listed per rank.
std::string rank_directory(const RankGrid& grid, size_t stage, size_t rank) {
  char name[64];
  if (grid.staged) {
    std::snprintf(name, sizeof name, "mp_rank_%02zu_%03zu", rank, stage);
  } else {
    std::snprintf(name, sizeof name, "mp_rank_%02zu", rank);
  }
  return name;
}

/// The archive in one rank's directory (model_optim_rng.pt, model_rng.pt, or its only .pt).
Result<fs::path> archive_in(const fs::path& directory) {
  std::error_code ec;
  for (const char* candidate : {"model_optim_rng.pt", "model_rng.pt"}) {
    if (fs::is_regular_file(directory / candidate, ec)) return directory / candidate;
  }
  fs::path archive;
  for (const auto& file : fs::directory_iterator(directory, ec)) {
    if (file.is_regular_file() && file.path().extension() == ".pt") {
      if (!archive.empty()) return Status::InvalidArgument(directory.string() + ": holds several .pt archives; expected one per rank");
      archive = file.path();
    }
  }
  if (archive.empty()) return Status::NotFound(directory.string() + ": no model_optim_rng.pt (or other .pt archive) in this rank's directory");
  return archive;
}

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Result<RankGrid> rank_archives(const fs::path& directory) {
  std::map<std::pair<uint32_t, uint32_t>, fs::path> found;  // (stage, rank) -> archive
  bool staged = false, plain = false;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !name.starts_with("mp_rank_")) continue;
    const std::string_view digits = std::string_view(name).substr(std::string_view("mp_rank_").size());
    const size_t underscore = digits.find('_');
    const std::string_view rank_digits = digits.substr(0, underscore);
    const std::string_view stage_digits = underscore == std::string_view::npos ? std::string_view() : digits.substr(underscore + 1);
    if (!all_digits(rank_digits) || rank_digits.size() > 4 ||
        (underscore != std::string_view::npos && (!all_digits(stage_digits) || stage_digits.size() > 4))) {
      continue;
    }
    (underscore == std::string_view::npos ? plain : staged) = true;
    TM_ASSIGN_OR_RETURN(fs::path archive, archive_in(entry.path()));
    const auto stage = underscore == std::string_view::npos ? 0u : static_cast<uint32_t>(std::stoul(std::string(stage_digits)));
    found[{stage, static_cast<uint32_t>(std::stoul(std::string(rank_digits)))}] = std::move(archive);
  }
  if (ec) return Status::IoError(directory.string() + ": cannot list directory: " + ec.message());
  if (found.empty()) return Status::NotFound(directory.string() + ": no mp_rank_XX directories");
  if (staged && plain) {
    return Status::FormatError(directory.string() + ": holds both mp_rank_XX and mp_rank_XX_YYY directories; expected one layout");
  }
  RankGrid grid;
  grid.staged = staged;
  for (const auto& [key, archive] : found) {
    grid.stages = std::max<size_t>(grid.stages, key.first + 1);
    grid.tensor = std::max<size_t>(grid.tensor, key.second + 1);
  }
  for (size_t stage = 0; stage < grid.stages; ++stage) {
    for (size_t rank = 0; rank < grid.tensor; ++rank) {
      const auto it = found.find({static_cast<uint32_t>(stage), static_cast<uint32_t>(rank)});
      if (it == found.end()) {
        return Status::FormatError(directory.string() + ": " +
                                   (staged ? "rank " + std::to_string(rank) + " of pipeline stage " + std::to_string(stage)
                                           : "tensor-parallel rank " + std::to_string(rank)) +
                                   " is missing (" + rank_directory(grid, stage, rank) +
                                   "), yet the set has " + std::to_string(grid.tensor) + " ranks" +
                                   (staged ? " and " + std::to_string(grid.stages) + " stages" : ""));
      }
      grid.archives.push_back(it->second);
    }
  }
  return grid;
}

/// The model chunk `name` belongs to under an interleaved schedule ("model3.x" -> 3), or nullopt.
std::optional<size_t> model_chunk_of(std::string_view name) {
  if (!name.starts_with("model")) return std::nullopt;
  size_t end = 5;
  while (end < name.size() && end < 9 && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == 5 || end >= name.size() || name[end] != '.') return std::nullopt;
  return std::stoull(std::string(name.substr(5, end - 5)));
}

}  // namespace

bool is_tensor_parallel_directory(const fs::path& directory) {
  std::error_code ec;
  if (fs::is_regular_file(directory / "latest_checkpointed_iteration.txt", ec)) return true;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    if (entry.is_directory() && entry.path().filename().string().starts_with("mp_rank_")) return true;
  }
  return false;
}

namespace {

/// Where the layer number of `name` is ("decoder.layers.K." or any ".layers.K."): its digits'
/// position and length; nullopt when the name has none.
std::optional<std::pair<size_t, size_t>> layer_number(std::string_view name) {
  const size_t at = name.find(".layers.");
  if (at == std::string_view::npos) return std::nullopt;
  const size_t begin = at + std::string_view(".layers.").size();
  size_t end = begin;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == begin || end - begin > 6 || end >= name.size() || name[end] != '.') return std::nullopt;
  return std::pair(begin, end - begin);
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> open_directory(const fs::path& directory, std::span<const std::string> rules) {
  TM_ASSIGN_OR_RETURN(const fs::path iteration, iteration_directory(directory));
  TM_ASSIGN_OR_RETURN(const RankGrid grid, rank_archives(iteration));
  std::vector<std::unique_ptr<Checkpoint>> ranks;  // stage-major, as grid.archives
  std::vector<SourceFile> files;
  for (const fs::path& archive : grid.archives) {
    TM_ASSIGN_OR_RETURN(auto rank, pytorch::open_file(archive));
    files.push_back(rank->files()[0]);
    ranks.push_back(std::move(rank));
  }
  TM_ASSIGN_OR_RETURN(const pytorch::PickleTree tree, pytorch::read_archive_pickle(grid.archives[0]));
  const TrainingArgs args = training_args(tree);
  TM_ASSIGN_OR_RETURN(TensorParallelJoin join, TensorParallelJoin::make(rules, args.swiglu));
  const size_t n = grid.tensor;
  if (args.tensor_parallel_size && *args.tensor_parallel_size != static_cast<int64_t>(n)) {
    return Status::FormatError(grid.archives[0].string() + ": its args say tensor_model_parallel_size=" +
                               std::to_string(*args.tensor_parallel_size) + ", but " + iteration.string() + " holds " +
                               std::to_string(n) + " ranks" + (grid.staged ? " per pipeline stage" : ""));
  }
  if (args.pipeline_parallel_size && *args.pipeline_parallel_size != static_cast<int64_t>(grid.stages)) {
    return Status::FormatError(grid.archives[0].string() + ": its args say pipeline_model_parallel_size=" +
                               std::to_string(*args.pipeline_parallel_size) + ", but " + iteration.string() + " holds " +
                               std::to_string(grid.stages) + " pipeline stage" + (grid.stages == 1 ? "" : "s"));
  }

  // An interleaved (virtual pipeline) schedule saves model chunks `model0`, `model1`, ... per
  // stage instead of `model`; chunk v of stage p holds the model's (v * stages + p)-th run of layers.
  size_t chunks = 1;
  for (const TensorInfo& t : ranks[0]->tensors()) {
    if (const auto chunk = model_chunk_of(t.name)) chunks = std::max(chunks, *chunk + 1);
  }
  const bool interleaved = chunks > 1 && std::none_of(ranks[0]->tensors().begin(), ranks[0]->tensors().end(),
                                                      [](const TensorInfo& t) { return t.name.starts_with(kModelPrefix); });
  if (!interleaved) chunks = 1;
  if (interleaved && args.virtual_pipeline_size && *args.virtual_pipeline_size != static_cast<int64_t>(chunks)) {
    return Status::FormatError(grid.archives[0].string() + ": its args say virtual_pipeline_model_parallel_size=" +
                               std::to_string(*args.virtual_pipeline_size) + ", but it holds " + std::to_string(chunks) +
                               " model chunks (model0 .. model" + std::to_string(chunks - 1) + ")");
  }

  std::vector<TensorInfo> tensors;
  std::vector<std::string> notes;
  std::vector<std::string> per_rank_names, repeated_names;
  std::map<std::string, size_t> global_names;  // assembled name -> the stage that holds it
  uint64_t assembled = 0;
  uint64_t layer_offset = 0;  // layers of the runs before this one (each numbers its own from 0)
  for (size_t run = 0; run < grid.stages * chunks; ++run) {
    const size_t stage = run % grid.stages;
    const size_t chunk = run / grid.stages;
    const std::string prefix = interleaved ? "model" + std::to_string(chunk) + "." : std::string(kModelPrefix);
    const auto file_of = [&](size_t rank) { return static_cast<uint32_t>(stage * n + rank); };
    const auto list_per_rank = [&](const std::string& name) {
      for (size_t r = 0; r < n; ++r) {
        if (const TensorInfo* t = ranks[file_of(r)]->find(name)) {
          TensorInfo copy = *t;
          copy.name = rank_directory(grid, stage, r) + "/" + name;
          copy.file = file_of(r);
          tensors.push_back(std::move(copy));
        }
      }
    };
    uint64_t stage_layers = 0;
    for (const TensorInfo& first : ranks[file_of(0)]->tensors()) {
      const std::string& name = first.name;
      if (!name.starts_with(prefix)) {
        if (chunk > 0 || (interleaved && model_chunk_of(name))) continue;  // listed once, or another chunk's
        if (n == 1 && !grid.staged) {
          tensors.push_back(first);
        } else {
          list_per_rank(name);
        }
        continue;
      }
      // A stage (or chunk) numbers its layers from 0: the whole model's number adds the layers before it.
      std::string global = std::string(kModelPrefix) + name.substr(prefix.size());
      if (const auto number = layer_number(name)) {
        const uint64_t local = std::stoull(name.substr(number->first, number->second));
        stage_layers = std::max(stage_layers, local + 1);
        global = std::string(kModelPrefix) + name.substr(prefix.size(), number->first - prefix.size()) +
                 std::to_string(local + layer_offset) + name.substr(number->first + number->second);
      }
      if (const auto earlier = global_names.find(global); earlier != global_names.end()) {
        // A later stage's copy (the output layer's tied embedding): kept per rank, not assembled twice.
        repeated_names.push_back(global);
        list_per_rank(name);
        continue;
      }
      global_names.emplace(global, stage);
      if (n == 1) {
        TensorInfo copy = first;
        copy.name = global;
        copy.file = file_of(0);
        tensors.push_back(std::move(copy));
        continue;
      }
      // Each rank's part, its file the rank's archive in this checkpoint.
      std::vector<TensorInfo> located(n);
      std::vector<const TensorInfo*> parts(n, nullptr);
      for (size_t r = 0; r < n; ++r) {
        if (const TensorInfo* part = ranks[file_of(r)]->find(name)) {
          located[r] = *part;
          located[r].file = file_of(r);
          parts[r] = &located[r];
        }
      }
      TM_ASSIGN_OR_RETURN(JoinResult joined, join.join(global, std::string_view(name).substr(prefix.size()), parts));
      if (joined.kind == JoinKind::kPerRank) {
        per_rank_names.push_back(global);
        list_per_rank(name);
        continue;
      }
      assembled += joined.kind == JoinKind::kJoined ? 1 : 0;
      tensors.push_back(std::move(joined.tensor));
    }
    layer_offset += stage_layers;
  }
  const std::string per_rank_form = grid.staged ? "mp_rank_XX_YYY/<name>" : "mp_rank_XX/<name>";
  if (!per_rank_names.empty()) {
    notes.push_back("listed per rank (" + per_rank_form + "): the split of " + names_text(per_rank_names) +
                    " cannot be inferred from its layer's name, or its parts differ in dtype or shape across ranks");
  }
  if (!repeated_names.empty()) {
    notes.push_back("listed per rank (" + per_rank_form + "): " + names_text(repeated_names) +
                    " also in a later pipeline stage (a tied embedding's copy); the whole tensor is the first stage's");
  }
  for (std::string& note : join.unmatched_rule_notes()) notes.push_back(std::move(note));
  for (const std::string& note : ranks[0]->notes()) notes.push_back(rank_directory(grid, 0, 0) + ": " + note);
  std::vector<FormatFact> facts = {
      {"megatron.tensor_parallel_size", n, std::nullopt},
      {"megatron.pipeline_parallel_size", grid.stages, std::nullopt},
      {"megatron.model_chunks_per_stage", chunks, std::nullopt},
      {"megatron.iteration_directory", iteration.filename().string(), std::nullopt},
      {"megatron.swiglu", args.swiglu, std::nullopt},
      {"megatron.tensors_assembled", assembled, std::nullopt},
      {"megatron.tensors_per_rank", per_rank_names.size(), std::nullopt},
      {"megatron.tensors_by_user_rule", join.decided_by_rules(), std::nullopt},
  };
  return std::make_unique<Checkpoint>(CheckpointFormat::kMegatron, directory, std::move(files), std::move(tensors),
                                      std::vector<MetadataEntry>{}, std::move(notes), std::move(facts));
}

}  // namespace tensormorph::megatron
