#include "server/png.h"

#include <memory>

#include <spng.h>

namespace tensormorph::server {

Result<std::string> encode_png(std::span<const uint8_t> rgba, uint32_t width, uint32_t height) {
  if (rgba.size() != static_cast<size_t>(width) * height * 4) return Status::InvalidArgument("png: size mismatch");
  std::unique_ptr<spng_ctx, decltype(&spng_ctx_free)> ctx(spng_ctx_new(SPNG_CTX_ENCODER), &spng_ctx_free);
  if (!ctx) return Status::ResourceExhausted("png: cannot create an encoder");
  spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  // Tiles are served interactively: level 1 deflate costs a fraction of the default's time.
  spng_set_option(ctx.get(), SPNG_IMG_COMPRESSION_LEVEL, 1);
  spng_ihdr ihdr{};
  ihdr.width = width;
  ihdr.height = height;
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR_ALPHA;
  if (int e = spng_set_ihdr(ctx.get(), &ihdr); e != 0) return Status::Internal(std::string("png: ") + spng_strerror(e));
  if (int e = spng_encode_image(ctx.get(), rgba.data(), rgba.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE); e != 0) {
    return Status::Internal(std::string("png: ") + spng_strerror(e));
  }
  size_t size = 0;
  int error = 0;
  std::unique_ptr<void, decltype(&free)> buffer(spng_get_png_buffer(ctx.get(), &size, &error), &free);
  if (!buffer || error != 0) return Status::Internal(std::string("png: ") + spng_strerror(error));
  return std::string(static_cast<const char*>(buffer.get()), size);
}

}  // namespace tensormorph::server
