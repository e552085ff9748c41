#include "server/compression.h"

#include <zlib.h>

#include <string>

namespace tensormorph::server {
namespace {

constexpr size_t kMinBytes = 1024;
// Level 1 compresses JSON about 10x at hundreds of MB/s: the wire is loopback, the time is the cost.
constexpr int kLevel = 1;

// The JSON, JavaScript and CSS types given a charset parameter (the library compresses the bare
// application/json and application/javascript; text/* it compresses whatever the parameters).
bool ours(const std::string& type) {
  return type.rfind("application/json;", 0) == 0 || type.rfind("application/javascript;", 0) == 0;
}

bool accepts_gzip(const httplib::Request& req) {
  const std::string accepted = req.get_header_value("Accept-Encoding");
  return accepted.find("gzip") != std::string::npos;
}

bool gzip(const std::string& in, std::string& out) {
  z_stream z{};
  if (deflateInit2(&z, kLevel, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return false;
  out.resize(deflateBound(&z, static_cast<uLong>(in.size())) + 32);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END;
}

}  // namespace

void set_web_file_types(httplib::Server& server) {
  server.set_file_extension_and_mimetype_mapping("js", "application/javascript; charset=utf-8");
  server.set_file_extension_and_mimetype_mapping("map", "application/json; charset=utf-8");
}

void compress_response(const httplib::Request& req, httplib::Response& res) {
  if (res.body.size() < kMinBytes || res.body.size() > UINT32_MAX || res.has_header("Content-Encoding")) return;
  if (!ours(res.get_header_value("Content-Type"))) return;
  res.set_header("Vary", "Accept-Encoding");
  std::string packed;
  if (!accepts_gzip(req) || !gzip(res.body, packed)) return;
  res.body = std::move(packed);
  res.set_header("Content-Encoding", "gzip");
  // The library has counted the body already by the time this handler runs.
  res.headers.erase("Content-Length");
  res.set_header("Content-Length", std::to_string(res.body.size()));
}

PackedJson pack_json(std::string text) {
  PackedJson packed{std::move(text), {}};
  if (packed.text.size() > UINT32_MAX || !gzip(packed.text, packed.gzipped)) packed.gzipped.clear();
  return packed;
}

void reply_packed_json(const httplib::Request& req, httplib::Response& res, const PackedJson& packed) {
  res.status = 200;
  res.set_header("Cache-Control", "no-store");
  res.set_header("Vary", "Accept-Encoding");
  if (packed.gzipped.empty() || !accepts_gzip(req)) return res.set_content(packed.text, kJsonType);
  res.set_content(packed.gzipped, kJsonType);
  res.set_header("Content-Encoding", "gzip");
}

}  // namespace tensormorph::server
