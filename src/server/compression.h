// Response compression: gzip at a fast level for JSON, JavaScript and CSS answers a client
// accepts it for. cpp-httplib would otherwise compress with Brotli at its highest quality, which
// takes seconds for a 10,000-tensor listing (about 1 MB/s).
#pragma once

#include <string>

#include <httplib.h>

namespace tensormorph::server {

/// Content type of JSON answers: the charset parameter keeps the library's own compression off
/// them (it compresses exact "application/json" only), so that compress_response does it.
inline constexpr const char* kJsonType = "application/json; charset=utf-8";

/// Types the web UI's files are served with, by extension, under the same rule.
void set_web_file_types(httplib::Server& server);

/// Gzip-compresses `res`'s body in place when it is large enough to gain, of one of the types
/// above, not compressed yet, and `req` accepts gzip. A post-routing handler (it runs after the
/// library's own compression, which these types escape).
void compress_response(const httplib::Request& req, httplib::Response& res);

/// A JSON text with its gzip form made once, for answers sent many times unchanged.
struct PackedJson {
  std::string text;     ///< the JSON
  std::string gzipped;  ///< `text` gzip-compressed; empty when compressing failed
};
/// Packs `text` (compressing it once).
PackedJson pack_json(std::string text);
/// Replies `packed` as JSON: its gzip form when `req` accepts gzip, else the text.
void reply_packed_json(const httplib::Request& req, httplib::Response& res, const PackedJson& packed);

}  // namespace tensormorph::server
