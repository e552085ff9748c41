// DeepSpeed ZeRO checkpoints: finding the tag directory and the ranks' archives, reading each
// model-parallel rank (zero_partitions.h), and, with model parallelism, joining the ranks' parts of
// each tensor as Megatron's layers split them (formats/megatron/tensor_parallel.h).
#include "formats/deepspeed/deepspeed.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>

#include "core/printable.h"
#include "formats/deepspeed/zero_partitions.h"
#include "formats/megatron/tensor_parallel.h"
#include "formats/pointer_file.h"
#include "formats/pytorch/pytorch.h"

namespace tensormorph::deepspeed {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kLatest = "latest";
constexpr std::string_view kModelStates = "mp_rank_00_model_states.pt";
constexpr std::string_view kOptimHead = "zero_pp_rank_";
constexpr std::string_view kZero3ModelStates = "zero_pp_rank_0_mp_rank_00_model_states.pt";
constexpr std::string_view kOptimTail = "_mp_rank_00_optim_states.pt";

bool digits_only(std::string_view text) {
  return !text.empty() && text.size() <= 6 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The (data-parallel, model-parallel) ranks an optimizer-states archive's name gives; nullopt for
/// other names.
std::optional<std::pair<uint32_t, uint32_t>> optim_rank(std::string_view name) {
  constexpr std::string_view kMiddle = "_mp_rank_", kEnd = "_optim_states.pt";
  if (name.starts_with(kBf16Prefix)) name.remove_prefix(kBf16Prefix.size());
  if (!name.starts_with(kOptimHead) || !name.ends_with(kEnd)) return std::nullopt;
  name = name.substr(kOptimHead.size(), name.size() - kOptimHead.size() - kEnd.size());
  const size_t middle = name.find(kMiddle);
  if (middle == std::string_view::npos) return std::nullopt;
  const std::string_view dp = name.substr(0, middle), mp = name.substr(middle + kMiddle.size());
  if (!digits_only(dp) || !digits_only(mp) || mp.size() < 2) return std::nullopt;
  return std::pair(static_cast<uint32_t>(std::stoul(std::string(dp))), static_cast<uint32_t>(std::stoul(std::string(mp))));
}

/// The model-parallel rank a `mp_rank_MM_model_states.pt` name gives; nullopt for other names.
std::optional<uint32_t> model_states_rank(std::string_view name) {
  constexpr std::string_view kHead = "mp_rank_", kEnd = "_model_states.pt";
  if (!name.starts_with(kHead) || !name.ends_with(kEnd)) return std::nullopt;
  const std::string_view digits = name.substr(kHead.size(), name.size() - kHead.size() - kEnd.size());
  if (!digits_only(digits) || digits.size() < 2) return std::nullopt;
  return static_cast<uint32_t>(std::stoul(std::string(digits)));
}

bool holds_zero_states(const fs::path& directory) {
  std::error_code ec;
  if (!fs::is_regular_file(directory / kModelStates, ec) && !fs::is_regular_file(directory / kZero3ModelStates, ec)) return false;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const auto ranks = entry.is_regular_file() ? optim_rank(entry.path().filename().string()) : std::nullopt;
    if (ranks && ranks->second == 0) return true;
  }
  return false;
}

/// Model states of several model-parallel ranks without ZeRO's optimizer-states archives (DeepSpeed
/// without ZeRO, as Megatron-DeepSpeed models such as CPM were saved): each rank's `module` is its part.
bool holds_model_parallel_states(const fs::path& directory) {
  std::error_code ec;
  return fs::is_regular_file(directory / model_states_name(0, false), ec) && fs::is_regular_file(directory / model_states_name(1, false), ec) &&
         !holds_zero_states(directory);
}

bool holds_states(const fs::path& directory) { return holds_zero_states(directory) || holds_model_parallel_states(directory); }

/// The tag a `latest` file names, or nullopt when there is no such file.
Result<std::optional<std::string>> latest_tag(const fs::path& directory) {
  const fs::path latest = directory / kLatest;
  TM_ASSIGN_OR_RETURN(std::optional<std::string> text, read_pointer_file(latest, 256, "a checkpoint tag"));
  if (!text) return text;
  if (text->empty() || *text == "." || *text == ".." || text->find('/') != std::string::npos || text->find('\0') != std::string::npos) {
    return Status::FormatError(latest.string() + ": holds " + quoted_name(*text, 40) + "; expected a checkpoint tag such as global_step100");
  }
  return text;
}

/// The directory Megatron-DeepSpeed's latest_checkpointed_iteration.txt names when it holds model
/// states (the iteration N as "N", "global_stepN" or "iter_NNNNNNN"); nullopt otherwise.
std::optional<fs::path> latest_iteration_states(const fs::path& directory) {
  const auto named = latest_checkpointed_iteration(directory);
  if (!named.ok() || !*named || **named == "release") return std::nullopt;
  const std::string& iteration = **named;
  for (const std::string& name : {iteration, "global_step" + iteration, iteration_directory_name(iteration)}) {
    if (holds_states(directory / name)) return directory / name;
  }
  return std::nullopt;
}

/// `directory` itself when it holds the states, else the tag directory its `latest` file (or
/// latest_checkpointed_iteration.txt) names.
Result<fs::path> tag_directory(const fs::path& directory) {
  if (holds_states(directory)) return directory;
  TM_ASSIGN_OR_RETURN(const auto tag, latest_tag(directory));
  if (!tag) {
    if (auto named = latest_iteration_states(directory)) return *named;
    return Status::NotFound(directory.string() + ": no " + std::string(kModelStates) + " with zero_pp_rank_R" + std::string(kOptimTail) +
                            " archives, and no 'latest' file naming a directory that holds them");
  }
  const fs::path named = directory / *tag;
  std::error_code ec;
  if (!fs::is_directory(named, ec)) {
    return Status::NotFound((directory / kLatest).string() + ": names tag " + quoted_name(*tag, 40) + ", but " + named.string() +
                            " is not a directory");
  }
  if (!holds_states(named)) {
    return Status::NotFound((directory / kLatest).string() + ": names " + named.string() + ", which holds no " + std::string(kModelStates) +
                            " with zero_pp_rank_R" + std::string(kOptimTail) + " archives");
  }
  return named;
}

/// The optimizer-states archives, [model-parallel rank][data-parallel rank]: every model-parallel
/// rank from 0 to the highest found, each with every data-parallel rank from 0 to its highest.
Result<std::vector<std::vector<fs::path>>> rank_archives(const fs::path& directory) {
  std::map<uint32_t, std::map<uint32_t, fs::path>> found;  // mp -> dp -> archive
  bool bf16 = false;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file()) continue;
    if (const auto ranks = optim_rank(name)) {
      const auto [dp, mp] = *ranks;
      if (!found[mp].emplace(dp, entry.path()).second) {
        return Status::FormatError(directory.string() + ": two optimizer-states archives for data-parallel rank " + std::to_string(dp) +
                                   (mp > 0 ? " of " + mp_rank_name(mp) : ""));
      }
      bf16 = bf16 || name.starts_with(kBf16Prefix);
    }
  }
  if (ec) return Status::IoError(directory.string() + ": cannot list directory: " + ec.message());
  if (found.empty()) {
    return Status::NotFound(directory.string() + ": no zero_pp_rank_R" + std::string(kOptimTail) + " optimizer-states archives");
  }
  std::vector<std::vector<fs::path>> archives;
  const uint32_t last_mp = found.rbegin()->first;
  for (uint32_t mp = 0; mp <= last_mp; ++mp) {
    const auto ranks = found.find(mp);
    if (ranks == found.end()) {
      return Status::NotFound(directory.string() + ": model-parallel rank " + std::to_string(mp) + " is missing (no " +
                              optim_states_name(0, mp, bf16) + "), yet " + mp_rank_name(last_mp) + " is present");
    }
    std::vector<fs::path>& row = archives.emplace_back();
    const uint32_t last_dp = ranks->second.rbegin()->first;
    for (uint32_t dp = 0; dp <= last_dp; ++dp) {
      const auto it = ranks->second.find(dp);
      if (it == ranks->second.end()) {
        return Status::NotFound(directory.string() + ": data-parallel rank " + std::to_string(dp) + " is missing (" + optim_states_name(dp, mp, bf16) +
                                "), yet rank " + std::to_string(last_dp) + " is present");
      }
      row.push_back(it->second);
    }
  }
  return archives;
}

/// The model-parallel ranks' tensors joined into whole ones.
struct JoinedRanks {
  std::vector<TensorInfo> tensors;
  std::vector<std::string> notes;
  uint64_t joined = 0;    ///< tensors joined from the ranks' parts
  uint64_t per_rank = 0;  ///< names listed once per rank
};

/// Joins the ranks' tensors by name, as Megatron's tensor-parallel layers split them (or as `rules`
/// say); a tensor whose split cannot be inferred is listed per rank as "mp_rank_MM/<name>".
Result<JoinedRanks> join_model_parallel_ranks(const std::vector<RankPart>& parts, std::span<const std::string> rules) {
  TM_ASSIGN_OR_RETURN(megatron::TensorParallelJoin join, megatron::TensorParallelJoin::make(rules, parts[0].model.args.swiglu));
  std::vector<std::map<std::string_view, const TensorInfo*>> by_name(parts.size());
  for (size_t mp = 0; mp < parts.size(); ++mp) {
    for (const TensorInfo& t : parts[mp].tensors) by_name[mp].emplace(t.name, &t);
  }
  JoinedRanks out;
  std::vector<std::string> per_rank_names;
  std::set<std::string_view> listed;
  const auto list_per_rank = [&](const std::string& name) {
    if (!listed.insert(name).second) return;
    per_rank_names.push_back(name);
    for (uint32_t mp = 0; mp < parts.size(); ++mp) {
      if (const auto it = by_name[mp].find(name); it != by_name[mp].end()) {
        TensorInfo copy = *it->second;
        copy.name = mp_rank_name(mp) + "/" + name;
        out.tensors.push_back(std::move(copy));
      }
    }
  };
  for (const TensorInfo& t : parts[0].tensors) {
    std::vector<const TensorInfo*> ranks;
    for (const auto& names : by_name) {
      const auto it = names.find(t.name);
      ranks.push_back(it == names.end() ? nullptr : it->second);
    }
    TM_ASSIGN_OR_RETURN(megatron::JoinResult result, join.join(t.name, t.name, ranks));
    if (result.kind == megatron::JoinKind::kPerRank) {
      list_per_rank(t.name);
      continue;
    }
    out.joined += result.kind == megatron::JoinKind::kJoined ? 1 : 0;
    out.tensors.push_back(std::move(result.tensor));
  }
  for (size_t mp = 1; mp < parts.size(); ++mp) {
    for (const TensorInfo& t : parts[mp].tensors) {
      if (!by_name[0].contains(t.name)) list_per_rank(t.name);
    }
  }
  out.per_rank = per_rank_names.size();
  if (!per_rank_names.empty()) {
    out.notes.push_back("listed per rank (mp_rank_MM/<name>): the model-parallel split of " + megatron::names_text(per_rank_names) +
                        " cannot be inferred from its layer's name, or its parts differ in dtype or shape across ranks, or not every rank holds it");
  }
  for (std::string& note : join.unmatched_rule_notes()) out.notes.push_back(std::move(note));
  return out;
}

/// What rank 0's model states record of the model-parallel size (`mp_world_size`,
/// `args.tensor_model_parallel_size`) equals the ranks found.
Status check_model_parallel_size(const fs::path& tag, const std::vector<RankPart>& parts) {
  const auto recorded = [&](std::optional<int64_t> size, const char* what) -> Status {
    if (!size || *size == static_cast<int64_t>(parts.size())) return Status::Ok();
    return Status::FormatError(parts[0].model_path.string() + ": says " + what + "=" + std::to_string(*size) + ", but " + tag.string() +
                               " holds " + std::to_string(parts.size()) + " model-parallel rank" + (parts.size() == 1 ? "" : "s") + " (" +
                               mp_rank_name(0) + (parts.size() > 1 ? " .. " + mp_rank_name(static_cast<uint32_t>(parts.size() - 1)) : "") + ")");
  };
  TM_RETURN_IF_ERROR(recorded(parts[0].model.mp_world_size, "mp_world_size"));
  return recorded(parts[0].model.args.tensor_parallel_size, "args.tensor_model_parallel_size");
}

/// Each model-parallel rank's model states without ZeRO: its `module` tensors under their names,
/// its files appended to `files`.
Result<std::vector<RankPart>> model_states_ranks(const fs::path& tag, std::vector<SourceFile>& files) {
  std::map<uint32_t, fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tag, ec)) {
    if (!entry.is_regular_file()) continue;
    if (const auto mp = model_states_rank(entry.path().filename().string())) found.emplace(*mp, entry.path());
  }
  if (ec) return Status::IoError(tag.string() + ": cannot list directory: " + ec.message());
  std::vector<RankPart> parts;
  const uint32_t last = found.rbegin()->first;
  for (uint32_t mp = 0; mp <= last; ++mp) {
    const auto it = found.find(mp);
    if (it == found.end()) {
      return Status::NotFound(tag.string() + ": model-parallel rank " + std::to_string(mp) + " is missing (" + model_states_name(mp, false) +
                              "), yet " + mp_rank_name(last) + " is present");
    }
    TM_ASSIGN_OR_RETURN(auto archive, pytorch::open_file(it->second));
    TM_ASSIGN_OR_RETURN(const pytorch::PickleTree tree, pytorch::read_archive_pickle(it->second));
    RankPart part;
    part.model_path = it->second;
    part.model.args = megatron::training_args(tree);
    if (const pytorch::PickleValue* root = tree.root(); root != nullptr && root->kind == pytorch::PickleKind::kDict) {
      const pytorch::PickleValue* size = root->get("mp_world_size");
      if (size != nullptr && size->kind == pytorch::PickleKind::kInt) part.model.mp_world_size = size->integer;
      const pytorch::PickleValue* version = root->get("ds_version");
      if (version != nullptr && version->kind == pytorch::PickleKind::kString) part.model.ds_version = printable(version->text, 40);
    }
    const auto file = static_cast<uint32_t>(files.size());
    files.push_back(archive->files()[0]);
    uint64_t outside = 0;
    constexpr std::string_view kModule = "module.";
    for (const TensorInfo& t : archive->tensors()) {
      if (!t.name.starts_with(kModule)) {
        ++outside;
        continue;
      }
      TensorInfo copy = t;
      copy.name = t.name.substr(kModule.size());
      copy.file = file;
      part.tensors.push_back(std::move(copy));
    }
    if (outside > 0) part.notes.push_back(std::to_string(outside) + " tensors outside module (optimizer state, ...) are not listed");
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace

bool is_zero_directory(const fs::path& directory) {
  if (holds_states(directory) || latest_iteration_states(directory)) return true;
  auto tag = latest_tag(directory);
  if (!tag.ok() || !tag->has_value()) return false;
  // A `latest` naming a missing global_stepN is DeepSpeed's: opening says what is missing.
  std::error_code ec;
  return holds_states(directory / **tag) || (!fs::exists(directory / **tag, ec) && (*tag)->starts_with("global_step"));
}

Result<std::unique_ptr<Checkpoint>> open_directory(const fs::path& directory, std::span<const std::string> rules) {
  TM_ASSIGN_OR_RETURN(const fs::path tag, tag_directory(directory));
  std::vector<SourceFile> files;
  if (holds_model_parallel_states(tag)) {
    TM_ASSIGN_OR_RETURN(std::vector<RankPart> parts, model_states_ranks(tag, files));
    TM_RETURN_IF_ERROR(check_model_parallel_size(tag, parts));
    TM_ASSIGN_OR_RETURN(JoinedRanks joined, join_model_parallel_ranks(parts, rules));
    for (uint32_t mp = 0; mp < parts.size(); ++mp) {
      for (const std::string& note : parts[mp].notes) joined.notes.push_back(mp_rank_name(mp) + ": " + note);
    }
    joined.notes.push_back("model states without ZeRO optimizer states: each model-parallel rank's module tensors as saved");
    std::vector<FormatFact> facts = {{"deepspeed.zero_stage", 0, std::nullopt},
                                     {"deepspeed.tag", tag.filename().string(), std::nullopt},
                                     {"deepspeed.ds_version", parts[0].model.ds_version, std::nullopt},
                                     {"deepspeed.model_parallel_size", parts.size(), std::nullopt},
                                     {"deepspeed.tensors_joined", joined.joined, std::nullopt},
                                     {"deepspeed.tensors_per_rank", joined.per_rank, std::nullopt}};
    return std::make_unique<Checkpoint>(CheckpointFormat::kDeepSpeed, directory, std::move(files), std::move(joined.tensors),
                                        std::vector<MetadataEntry>{}, std::move(joined.notes), std::move(facts));
  }
  TM_ASSIGN_OR_RETURN(const auto archives, rank_archives(tag));
  std::vector<RankPart> parts;
  const bool model_parallel = archives.size() > 1;
  for (uint32_t mp = 0; mp < archives.size(); ++mp) {
    const std::string pieces_key = model_parallel ? "deepspeed.pieces." + mp_rank_name(mp) + "/" : "deepspeed.pieces.";
    TM_ASSIGN_OR_RETURN(RankPart part, open_model_parallel_rank(tag, mp, archives[mp], pieces_key, files));
    if (mp > 0 && (part.stage != parts[0].stage || part.world != parts[0].world)) {
      return Status::FormatError(archives[mp][0].string() + ": zero_stage=" + std::to_string(part.stage) + " over " + std::to_string(part.world) +
                                 " data-parallel ranks, but " + mp_rank_name(0) + "'s is zero_stage=" + std::to_string(parts[0].stage) +
                                 " over " + std::to_string(parts[0].world));
    }
    parts.push_back(std::move(part));
  }
  const RankPart& first = parts[0];
  TM_RETURN_IF_ERROR(check_model_parallel_size(tag, parts));
  std::vector<FormatFact> facts = {{"deepspeed.zero_stage", first.stage, std::nullopt},
                                   {"deepspeed.world_size", first.world, std::nullopt},
                                   {"deepspeed.param_groups", first.groups, std::nullopt},
                                   {"deepspeed.tag", tag.filename().string(), std::nullopt},
                                   {"deepspeed.ds_version", first.model.ds_version, std::nullopt}};
  uint64_t in_place = 0, gathered = 0, padding = 0;
  for (const RankPart& part : parts) {
    in_place += part.in_place;
    gathered += part.gathered;
    padding += part.padding;
  }
  facts.push_back({"deepspeed.parameters_in_place", in_place, std::nullopt});
  facts.push_back({"deepspeed.parameters_gathered", gathered, std::nullopt});
  facts.push_back({"deepspeed.padding_elements", padding, std::nullopt});
  if (!model_parallel) {
    RankPart& only = parts[0];
    facts.insert(facts.end(), only.facts.begin(), only.facts.end());
    return std::make_unique<Checkpoint>(CheckpointFormat::kDeepSpeed, directory, std::move(files), std::move(only.tensors),
                                        std::move(only.metadata), std::move(only.notes), std::move(facts));
  }
  TM_ASSIGN_OR_RETURN(JoinedRanks joined, join_model_parallel_ranks(parts, rules));
  facts.push_back({"deepspeed.model_parallel_size", parts.size(), std::nullopt});
  facts.push_back({"deepspeed.tensors_joined", joined.joined, std::nullopt});
  facts.push_back({"deepspeed.tensors_per_rank", joined.per_rank, std::nullopt});
  std::vector<MetadataEntry> metadata;
  for (uint32_t mp = 0; mp < parts.size(); ++mp) {
    for (FormatFact& fact : parts[mp].facts) {
      // A rank's group facts without a file would read alike across ranks: name the rank.
      if (!fact.file) fact.key.insert(std::string_view("deepspeed.").size(), mp_rank_name(mp) + ".");
      facts.push_back(std::move(fact));
    }
    for (const std::string& note : parts[mp].notes) joined.notes.push_back(mp_rank_name(mp) + ": " + note);
    std::move(parts[mp].metadata.begin(), parts[mp].metadata.end(), std::back_inserter(metadata));
  }
  return std::make_unique<Checkpoint>(CheckpointFormat::kDeepSpeed, directory, std::move(files), std::move(joined.tensors), std::move(metadata),
                                      std::move(joined.notes), std::move(facts));
}

}  // namespace tensormorph::deepspeed
