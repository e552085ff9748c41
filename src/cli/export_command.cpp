// `tensormorph export`: one tensor's decoded values as a NumPy .npy file.
#include <iostream>

#include "cli/commands.h"
#include "formats/npy/npy.h"
#include "tensormorph/decode.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::string tensor;
  std::string output;
  ComputeOptions compute;
};

std::string default_output(const std::string& tensor) {
  std::string name;
  for (char c : tensor) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return name + ".npy";
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("export", "Write one tensor's decoded float32 values as a .npy file");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor,-t", opt->tensor, "Exact tensor name")->required();
  sub->add_option("-o,--output", opt->output, "Output .npy path (default: <tensor>.npy)");
  add_compute_options(sub, opt->compute);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path);
            if (!ckpt) return static_cast<int>(kExitUserError);
            const TensorInfo* t = ckpt->find(opt->tensor);
            if (t == nullptr) {
              print_error(ckpt->path().string() + ": no tensor named '" + opt->tensor + "'");
              return static_cast<int>(kExitUserError);
            }
            if (!dtype_decodable(t->dtype)) {
              print_error(ckpt->files()[t->file].path.string() + ": tensor '" + t->name + "' at offset " +
                          std::to_string(t->offset) + ": " + std::string(dtype_not_decodable_reason(t->dtype)));
              return static_cast<int>(kExitUserError);
            }
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            ops::Records records;
            auto values = ops::decode_tensor(session->scheduler(), *ckpt, *t, &records);
            if (!values.ok()) {
              print_error(values.status().message());
              return static_cast<int>(kExitUserError);
            }
            std::string out = opt->output.empty() ? default_output(t->name) : opt->output;
            Status written = npy::write_f32(out, t->shape, *values);
            if (!written.ok()) {
              print_error(written.message());
              return static_cast<int>(kExitUserError);
            }
            if (opt->compute.explain) print_placements(std::cerr, records);
            std::cerr << "wrote " << out << ": " << t->name << " " << t->shape_string() << " float32\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
