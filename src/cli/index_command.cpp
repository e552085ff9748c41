// `tensormorph index`: build or refresh the level-of-detail index of a checkpoint.
#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/progress.h"
#include "core/printable.h"

namespace tensormorph::cli {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) {
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once; the index on disk stays valid
}

struct Options {
  std::string path;
  uint32_t tile = engine::kDefaultTile;
  uint32_t threads = 0;
  std::string index_path;
  bool verify = false;
  ComputeOptions compute;
  OpenOptions open;
};

}  // namespace

Result<IndexedCheckpoint> ensure_index(engine::ComputeSession& session, const Checkpoint& ckpt, const IndexRequest& request) {
  index::IndexOptions options;
  options.tile = request.tile;
  options.threads = request.threads;
  options.location = request.index_path;
  options.records = request.records;
  options.verify = request.verify;
  options.interrupted = &g_interrupted;
  auto display = std::make_shared<ProgressDisplay>("indexing");
  bool showed = false;
  options.progress = [&](const index::IndexProgress& p) {
    if (p.tensors_total == 0) return;
    showed = true;
    display->update(p.bytes_done, p.bytes_total, p.current, p.seconds);
  };
  std::signal(SIGINT, on_interrupt);
  IndexedCheckpoint out;
  auto report = index::update_index(session.scheduler(), ckpt, options, &out.contents);
  std::signal(SIGINT, SIG_DFL);
  if (showed) display->finish();
  if (!report.ok()) return report.status();
  out.report = std::move(report).value();
  if (const StaleTemporaries& stale = out.report.stale_removed; stale.files > 0) {
    std::cerr << "tensormorph: removed " << stale.files << " temporary file" << (stale.files == 1 ? "" : "s") << " ("
              << human_bytes(stale.bytes) << ") left beside " << printable(out.report.index_path.string())
              << " by interrupted runs\n";
  }
  if (out.report.interrupted) {
    return Status(StatusCode::kInvalidArgument, "interrupted: " + std::to_string(out.report.tensors_indexed) +
                                                    " tensors were indexed and saved to " +
                                                    out.report.index_path.string() + "; run again to resume");
  }
  return out;
}

void note_index(const index::IndexReport& report) {
  if (!report.not_kept.empty()) return;  // the caller warns that nothing was kept
  const std::string where = printable(report.index_path.string(), 4096);
  if (!report.written) {
    std::cerr << "tensormorph: index " << where << ": read (up to date)\n";
    return;
  }
  std::cerr << "tensormorph: index " << where << ": written (" << report.tensors_indexed << " of "
            << report.tensors_total << " tensors indexed now, " << report.tensors_reused << " reused)\n";
}

Command add_index_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("index", "Build or refresh the level-of-detail index (a .tmindex sidecar)");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tile", opt->tile, "Tile size (a power of two, 8..4096)")->check(CLI::Range(8u, 4096u));
  sub->add_option("--threads", opt->threads, "Threads for the CPU backend (default: all cores)");
  sub->add_option("--index-path", opt->index_path, "Where to write the index (default: beside the checkpoint)");
  sub->add_flag("--verify", opt->verify,
                "Re-read every tensor and compare with the index, even where the files look unchanged "
                "(same size and time): docs/INDEX.md says what the quick check cannot see");
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path, opt->open);
            if (!ckpt) return static_cast<int>(kExitUserError);
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            engine::Records records;
            auto indexed = ensure_index(*session, *ckpt,
                                        {opt->tile, opt->threads, opt->index_path,
                                         opt->compute.explain ? &records : nullptr, opt->verify});
            if (!indexed.ok()) {
              print_error(indexed.status().message());
              return static_cast<int>(kExitUserError);
            }
            const index::IndexReport& r = indexed->report;
            if (!r.not_kept.empty()) {
              print_error("the index could not be written: " + r.not_kept +
                          " (choose a writable place with --index-path)");
              return static_cast<int>(kExitUserError);
            }
            uint64_t total_bytes = 0;
            for (const auto& t : ckpt->tensors()) total_bytes += t.nbytes;
            const char* state = r.written ? "" : opt->verify ? "  (verified: unchanged)" : "  (up to date, nothing read)";
            std::printf("index       %s%s\n", printable(r.index_path.string(), 4096).c_str(), state);
            std::printf("tensors     %zu: %zu indexed, %zu reused, %zu skipped\n", r.tensors_total, r.tensors_indexed,
                        r.tensors_reused, r.skipped.size());
            std::printf("bytes       %s indexed of %s\n", human_bytes(r.bytes_indexed).c_str(), human_bytes(total_bytes).c_str());
            std::printf("time        %.3f s  (%.2f GB/s)\n", r.seconds,
                        r.seconds > 0 ? static_cast<double>(r.bytes_indexed) / r.seconds / 1e9 : 0.0);
            std::string placement;
            for (const auto& [backend, count] : r.ops_per_backend) {
              placement += (placement.empty() ? "" : ", ") + backend + " " + std::to_string(count);
            }
            std::printf("operations  %s\n", placement.empty() ? "none" : placement.c_str());
            for (const auto& s : r.skipped) {
              std::printf("skipped     %s: %s\n", printable(s.name).c_str(), s.reason.c_str());
            }
            if (opt->verify) {
              std::printf("verified    %zu tensors re-read: %zu matched the index, %zu had changed and were replaced\n",
                          r.tensors_verified, r.tensors_verified - r.verify_mismatches.size(),
                          r.verify_mismatches.size());
              for (const auto& name : r.verify_mismatches) std::printf("changed     %s\n", printable(name).c_str());
            }
            std::fflush(stdout);
            if (opt->compute.explain) {
              if (records.empty()) {
                std::printf("\nplacements: none: %zu tensors current in the index (no operation ran)\n",
                            r.tensors_reused);
              } else {
                print_placements(std::cout, records);
              }
            }
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
