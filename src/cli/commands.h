// The subcommands of the `tensormorph` CLI. Each registers its options on a CLI11 app and runs.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <ostream>

#include "index/index_builder.h"
#include "core/printable.h"
#include "engine/compute_session.h"
#include "engine/ladder.h"
#include "tensormorph/open.h"
#include "engine/tensor_ops.h"
#include "reports/report.h"
#include <optional>
#include <string>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph::cli {

/// Process exit codes shared by every command. kExitNeedsConsent: an exact result was out of the
/// memory or time budget and no ladder rung was consented to (the ladder was printed).
/// kExitGateFailed: a --fail-above (or --fail-on-unmatched) limit of diff/quantize-error was exceeded.
enum ExitCode : int { kExitOk = 0, kExitUserError = 1, kExitUsage = 2, kExitNeedsConsent = 3, kExitGateFailed = 4 };

/// A registered subcommand: its CLI11 node and the body to run once it was parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  ///< returns an ExitCode
};

/// `tensormorph info PATH [--json]`.
Command add_info_command(CLI::App& app);
/// `tensormorph index PATH [--tile N] [--threads N]`.
Command add_index_command(CLI::App& app);
/// `tensormorph stats PATH [--tensor GLOB...] [--json|--csv] [--sort KEY]`.
Command add_stats_command(CLI::App& app);
/// `tensormorph quantiles PATH [--tensor GLOB...] [--q P,...] [--mad] [--json|--csv]`.
Command add_quantiles_command(CLI::App& app);
/// `tensormorph outliers PATH [--tensor GLOB...] [-k N] [--json|--csv]`.
Command add_outliers_command(CLI::App& app);
/// `tensormorph channels PATH [--tensor GLOB...] [--axis rows|cols] [--sort KEY] [--json|--csv]`.
Command add_channels_command(CLI::App& app);
/// `tensormorph diff A B [--tensor GLOB...] [--sort METRIC] [--fail-above METRIC=VALUE] [--json|--csv]`.
Command add_diff_command(CLI::App& app);
/// `tensormorph quantize-error PATH [B] [--type T,...] [--tensor GLOB...] [--json|--csv]`.
Command add_quantize_error_command(CLI::App& app);
/// `tensormorph spectrum PATH [--tensor GLOB...] [--top K] [--consent RUNG] [--json|--csv]`.
Command add_spectrum_command(CLI::App& app);
/// `tensormorph export PATH --tensor NAME [-o OUT.npy]`.
Command add_export_command(CLI::App& app);
/// `tensormorph backends [--json]`.
Command add_backends_command(CLI::App& app);
/// `tensormorph config get|set KEY [VALUE]`.
Command add_config_command(CLI::App& app);
/// `tensormorph demo DIR`.
Command add_demo_command(CLI::App& app);
/// `tensormorph serve PATH... [--host H] [--port N]`.
Command add_serve_command(CLI::App& app);

/// `info` on an index file: which checkpoint it indexes, its tile size and tensors, and whether
/// each source file is still as it was indexed (text, or JSON schema tensormorph.index_info/1).
int print_index_info(const std::filesystem::path& path, bool json);

/// Opens a checkpoint for a command, printing the error when it fails; nullptr then.
std::unique_ptr<Checkpoint> open_or_report(const std::string& path, const OpenOptions& options);

/// Adds --tp-split (OpenOptions::tensor_parallel_rules) to a command that opens checkpoints.
void add_open_options(CLI::App* sub, OpenOptions& options);

/// `--compute` and `--explain`, shared by every command that runs operations.
struct ComputeOptions {
  std::string spec;      ///< prefer=X,never=Y,only=Z or auto ("" = the persisted setting)
  bool explain = false;  ///< print placement records
  std::vector<std::string> plugin_dirs;  ///< --plugin-dir: searched before the settings' plugins.path
  /// When plugins open their devices: commands open them when an operation needs them; the
  /// server, which lists every device, opens them at start.
  compute::DeviceOpening opening = compute::DeviceOpening::kWhenNeeded;
};

/// Adds --compute and --explain to `sub`.
void add_compute_options(CLI::App* sub, ComputeOptions& options);

/// Opens the compute session for a command, printing the error when it fails; nullptr then.
std::unique_ptr<engine::ComputeSession> open_session_or_report(const ComputeOptions& options);

/// Prints placement records as a table (operation, tensor, backend, why, estimated/measured time, bytes).
void print_placements(std::ostream& out, const engine::Records& records);

/// Says on stderr, once, when operations ran elsewhere than a preferred backend (how many, and the
/// first one's reason, from the records placed "preferred-unavailable").
void note_unmet_preferences(const engine::Records& records);

/// Placement records as a JSON array.
using reports::placements_json;

/// What ensure_index needs.
struct IndexRequest {
  uint32_t tile = engine::kDefaultTile;
  uint32_t threads = 0;
  std::string index_path;           ///< "" = default location
  engine::Records* records = nullptr;  ///< receives placement records
  bool verify = false;              ///< re-read every tensor and compare with the index
};

/// A checkpoint's index, brought up to date.
struct IndexedCheckpoint {
  index::IndexContents contents;
  index::IndexReport report;
};

/// Builds or refreshes the index with a progress display (Ctrl-C saves what is done).
Result<IndexedCheckpoint> ensure_index(engine::ComputeSession& session, const Checkpoint& ckpt, const IndexRequest& request);

/// Says on stderr, in one line, where the index of a command's checkpoint is and whether the
/// command read it as it was or wrote it (a sidecar appears beside the checkpoint: the user is told).
void note_index(const index::IndexReport& report);

/// The tensors of `ckpt` that match `globs`, in file order; nullopt, after printing the error, when
/// globs were given and match none.
std::optional<std::vector<const TensorInfo*>> select_tensors_or_report(const Checkpoint& ckpt,
                                                                       const std::vector<std::string>& globs);

/// The exit code of a command over `requested` tensors of which `failed` could not be computed:
/// kExitOk when none failed, else kExitUserError after an error naming how many and the first.
int exit_after_failures(const Checkpoint& ckpt, size_t requested, size_t failed, const std::string& first_failure);

/// Says on stderr that a --fail-above gate failed, with up to five of the `offenders` (one line
/// each); returns kExitGateFailed.
int report_gate_failure(const std::vector<std::string>& offenders);

/// The rungs on offer for the tensors whose exact result needs consent, on stderr (five tensors at
/// most): why, what each rung computes, its bound and its estimated cost, and how to accept one.
void print_consent_ladders(const std::vector<const engine::LadderPlan*>& waiting, const std::string& consent);

/// The end of an analysis command over `rows` (each with `tensor`, `error` and an optional
/// `needs_consent` plan): the ladders of the tensors waiting for consent on stderr, then the exit
/// code: failures first (exit_after_failures), else kExitNeedsConsent when any tensor waits.
template <typename Row>
int finish_with_ladders(const Checkpoint& ckpt, const std::vector<Row>& rows, const std::string& consent) {
  std::vector<const engine::LadderPlan*> waiting;
  size_t failed = 0;
  std::string first;
  for (const auto& r : rows) {
    if (r.needs_consent) waiting.push_back(&*r.needs_consent);
    if (!r.error.empty() && failed++ == 0) first = quoted_name(r.tensor->name, 80) + ": " + r.error;
  }
  print_consent_ladders(waiting, consent);
  const int code = exit_after_failures(ckpt, rows.size(), failed, first);
  return code == kExitOk && !waiting.empty() ? static_cast<int>(kExitNeedsConsent) : code;
}

/// Prints an error for the user on stderr ("tensormorph: error: ...").
void print_error(const std::string& message);

/// Warns on stderr when results could not be kept beside the index (`kept` is the save's status):
/// nothing is lost, they are computed again next time.
void warn_unkept(const Status& kept);

}  // namespace tensormorph::cli
