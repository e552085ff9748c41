#include "core/copy_crew.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace tensormorph {
namespace {

/// Pieces are whole pages, so pieces of a page-aligned slot stay aligned.
constexpr uint64_t kPage = 4096;
/// Smaller pieces spend more time on the lock than on copying.
constexpr uint64_t kMinPiece = uint64_t{128} << 10;
/// Larger pieces leave threads idle at the end of a chunk.
constexpr uint64_t kMaxPiece = uint64_t{1} << 20;
/// How long the caller polls for a chunk before it sleeps: far longer than a chunk takes, so only
/// a stalled copy puts it to sleep.
constexpr auto kCallerSpin = std::chrono::milliseconds(2);

/// Tells the core this is a spin loop (gives a hyperthread sibling the pipeline).
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// memcpy with stores that bypass the cache where the processor has them (SSE2, in every x86-64).
void stream_copy(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
#if defined(__x86_64__)
  // Up to the first 64-byte boundary of the destination, then whole lines, then the rest.
  const uint64_t head = std::min<uint64_t>(bytes, (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const uint64_t lines = bytes / 64;
  for (uint64_t i = 0; i < lines; ++i, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  std::memcpy(dst, src, bytes % 64);
  _mm_sfence();  // streaming stores are weakly ordered: complete them before the piece counts as copied
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace

uint32_t CopyCrew::default_copiers() {
  const unsigned cpus = std::thread::hardware_concurrency();
  return std::clamp<uint32_t>(cpus * 3 / 4, 1, 12);
}

CopyCrew::CopyCrew(uint32_t helpers, FillCopy copy) : copy_(copy) {
  threads_.reserve(helpers);
  for (uint32_t i = 0; i < helpers; ++i) {
    try {
      threads_.emplace_back([this] { run(); });
    } catch (const std::system_error&) {
      break;  // fewer threads: slower uploads, never a failed one
    }
  }
  copiers_ = static_cast<uint32_t>(threads_.size()) + 1;
}

CopyCrew::~CopyCrew() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

Status CopyCrew::post(const uint8_t* src, uint8_t* dst, uint64_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (posted_ - waited_ >= kMaxPending) {
      return Status::Internal("copy crew: more than " + std::to_string(kMaxPending) + " chunks pending");
    }
    Chunk& c = chunk(posted_);
    // About one piece per thread, in whole pages, within [kMinPiece, kMaxPiece].
    const uint64_t share = (bytes / copiers_ + kPage - 1) / kPage * kPage;
    c = Chunk{src, dst, bytes, std::clamp(share, kMinPiece, kMaxPiece), 0, 0};
    if (bytes == 0 && claim_ == posted_) ++claim_;  // nothing to hand out
    ++posted_;
  }
  work_.notify_all();
  return Status::Ok();
}

CopyCrew::Piece CopyCrew::claim() {
  Chunk& c = chunk(claim_);
  Piece p{claim_, c.src + c.claimed, c.dst + c.claimed, std::min(c.piece, c.bytes - c.claimed)};
  c.claimed += p.bytes;
  // Move on past every chunk that has nothing left to hand out.
  while (claim_ < posted_ && chunk(claim_).claimed >= chunk(claim_).bytes) ++claim_;
  ++busy_;
  return p;
}

void CopyCrew::finish(const Piece& piece) {
  --busy_;
  Chunk& c = chunk(piece.chunk);
  c.copied += piece.bytes;
  if (c.copied == c.bytes) progress_.fetch_add(1, std::memory_order_relaxed);
  if (c.copied == c.bytes || busy_ == 0) done_.notify_all();
}

template <typename Ready>
bool CopyCrew::spin(std::unique_lock<std::mutex>& lock, Ready&& ready) {
  if (ready()) return true;
  const auto until = std::chrono::steady_clock::now() + kCallerSpin;
  for (;;) {
    // Poll the counter alone; take the lock only when something moved.
    const uint64_t seen = progress_.load(std::memory_order_relaxed);
    lock.unlock();
    for (uint32_t i = 1; progress_.load(std::memory_order_relaxed) == seen; ++i) {
      cpu_relax();
      if ((i & 63) == 0 && std::chrono::steady_clock::now() >= until) break;
    }
    lock.lock();
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

void CopyCrew::copy(const Piece& piece) const {
  if (copy_ == FillCopy::kStream) {
    stream_copy(piece.dst, piece.src, piece.bytes);
  } else {
    std::memcpy(piece.dst, piece.src, piece.bytes);
  }
}

void CopyCrew::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || claimable(); });
    if (stop_) return;
    const Piece p = claim();
    lock.unlock();
    copy(p);
    lock.lock();
    finish(p);
  }
}

Status CopyCrew::wait_oldest() {
  std::unique_lock lock(mutex_);
  if (waited_ >= posted_) return Status::Internal("copy crew: no chunk is pending");
  const uint64_t index = waited_;
  Chunk& c = chunk(index);
  while (c.copied < c.bytes) {
    if (claim_ == index) {
      // Copy a piece of this chunk rather than sleep: never a piece of a later one, so the
      // copy engine gets this chunk as soon as it is whole.
      const Piece p = claim();
      lock.unlock();
      copy(p);
      lock.lock();
      finish(p);
    } else {
      // Every piece is taken (claim_ moved past this chunk and never comes back): wait for them.
      const auto ready = [&] { return c.copied == c.bytes; };
      if (!spin(lock, ready)) done_.wait(lock, ready);
    }
  }
  ++waited_;
  return Status::Ok();
}

void CopyCrew::reset() {
  std::unique_lock lock(mutex_);
  claim_ = posted_;  // hand out nothing more
  done_.wait(lock, [this] { return busy_ == 0; });
  posted_ = waited_ = claim_ = 0;
}

}  // namespace tensormorph
