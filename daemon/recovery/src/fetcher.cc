/// \file fetcher.cc
/// \brief Bounded-concurrency piece fetching with per-piece deadlines and source failover.

#include "reft/recovery/fetcher.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "reft/thread.h"

namespace reft::recovery {

namespace {

// Failures that say the holder itself is gone or hanging (not just this piece's bytes).
bool IsNodeFailure(const Status& s) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout:
    case StatusCode::kProtocol:
    case StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string FetchItem::ServedBy() const {
  if (size == 0) return "empty";
  std::string out;
  for (const auto& s : served) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string Source::Label() const {
  return region + " of " + slot->rank.ToString().substr(slot->rank.job.size() + 1) + " on " +
         slot->Where();
}

struct Fetcher::RunState {
  struct Piece {
    size_t item = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  std::vector<FetchItem>* items = nullptr;
  std::vector<Piece> pieces;
  std::atomic<size_t> next{0};
  std::vector<char> failed;  // per item, under Fetcher::mu_
  std::chrono::steady_clock::time_point deadline;
  uint64_t total = 0;
  uint64_t largest_piece = 0;
  const PieceSink* sink = nullptr;
  const PieceMemory* memory = nullptr;
  Status sink_error;  // under Fetcher::mu_: the first sink error ends the run
};

Fetcher::Fetcher(const RegionReader* reader, RecoveryOptions options, RestoreStats* stats,
                 ProgressCallback progress)
    : reader_(reader),
      options_(std::move(options)),
      stats_(stats),
      progress_(std::move(progress)) {}

bool Fetcher::IsBad(const std::string& node) const {
  MutexLock lock(mu_);
  return bad_nodes_.count(node) > 0;
}

void Fetcher::MarkBad(const std::string& node, const Status& why) {
  MutexLock lock(mu_);
  bad_nodes_.emplace(node, why.ToString());
}

std::map<std::string, std::string> Fetcher::bad_nodes() const {
  MutexLock lock(mu_);
  return bad_nodes_;
}

Status Fetcher::Run(std::vector<FetchItem>* items, std::chrono::steady_clock::time_point deadline,
                    const PieceSink& sink, const PieceMemory* memory, const PieceOrder& order) {
  RunState run;
  run.items = items;
  run.deadline = deadline;
  run.sink = sink ? &sink : nullptr;
  run.failed.assign(items->size(), 0);
  run.memory = memory;
  for (size_t i = 0; i < items->size(); ++i) {
    FetchItem& item = (*items)[i];
    item.status = Status::OK();
    item.served.clear();
    if (item.size == 0) continue;
    if (item.sources.empty()) {
      item.status = Status::NotFound(item.what + ": no live node holds a copy");
      run.failed[i] = 1;
      continue;
    }
    const uint64_t piece = PieceSize(item);
    if (item.dst == nullptr) {
      if (run.sink == nullptr) {
        item.status = Status::Internal(item.what + ": a streamed item needs a sink");
        run.failed[i] = 1;
        continue;
      }
      run.largest_piece = std::max(run.largest_piece, std::min(piece, item.size));
    }
    for (uint64_t off = 0; off < item.size; off += piece) {
      run.pieces.push_back({i, off, std::min(piece, item.size - off)});
      run.total += std::min(piece, item.size - off);
    }
  }
  if (order) {
    // Items with a destination go first, in item order; then streamed pieces by rank.
    const auto rank = [&](const RunState::Piece& p) -> std::pair<int, uint64_t> {
      const FetchItem& item = (*items)[p.item];
      if (item.dst != nullptr) return {0, 0};
      return {1, order(item.stream_offset + p.offset)};
    };
    std::stable_sort(run.pieces.begin(), run.pieces.end(),
                     [&](const RunState::Piece& a, const RunState::Piece& b) {
                       return rank(a) < rank(b);
                     });
  }
  {
    MutexLock lock(mu_);
    done_ = 0;
  }
  const size_t workers =
      std::min<size_t>(std::max(1, options_.concurrency), std::max<size_t>(1, run.pieces.size()));
  std::vector<reft::Thread> threads;
  for (size_t w = 1; w < workers; ++w) {
    threads.emplace_back("reft-fetch", [this, &run] { Work(&run); });
  }
  Work(&run);
  for (auto& t : threads) t.join();
  MutexLock lock(mu_);
  return run.sink_error;
}

uint64_t Fetcher::PieceSize(const FetchItem& item) const {
  const uint64_t want = std::max<uint64_t>(options_.piece_bytes, 1);
  // Pieces cover whole sealed chunks of the preferred source, so each is verified entirely.
  uint64_t chunk = 0;
  if (!item.sources.empty()) {
    if (const RegionEntry* r = item.sources.front().slot->Region(item.sources.front().region)) {
      chunk = r->chunk_size;
    }
  }
  return chunk > 0 ? (want + chunk - 1) / chunk * chunk : want;
}

uint64_t Fetcher::LargestPiece(const std::vector<FetchItem>& items) const {
  uint64_t largest = 0;
  for (const FetchItem& item : items) {
    if (item.size > 0) largest = std::max(largest, std::min(PieceSize(item), item.size));
  }
  return largest;
}

void Fetcher::CountServedLocked(const Source& src, uint64_t size) {
  if (stats_ == nullptr) return;
  (src.slot->local ? stats_->bytes_local : stats_->bytes_peer) += size;
  if (src.kind != ByteKind::kReplica && src.kind != ByteKind::kParity) {
    (src.slot->local ? stats_->bytes_own_local : stats_->bytes_own_peer) += size;
  }
  switch (src.kind) {
    case ByteKind::kShard:
      stats_->bytes_shard += size;
      break;
    case ByteKind::kReplica:
      stats_->bytes_replica += size;
      break;
    case ByteKind::kParity:
      stats_->bytes_parity += size;
      break;
    case ByteKind::kUnique:
      stats_->bytes_unique += size;
      break;
    case ByteKind::kOther:
      stats_->bytes_other += size;
      break;
  }
}

void Fetcher::Work(RunState* run) {
  using Clock = std::chrono::steady_clock;
  std::vector<uint8_t> staging;  // this worker's piece buffer for streamed items
  while (true) {
    const size_t p = run->next.fetch_add(1);
    if (p >= run->pieces.size()) return;
    const RunState::Piece piece = run->pieces[p];
    FetchItem& item = (*run->items)[piece.item];
    {
      MutexLock lock(mu_);
      if (run->failed[piece.item]) continue;  // another piece of it already ran out of sources
      if (!run->sink_error.ok()) continue;    // the stream's reader is gone: nothing more to do
    }
    const bool streamed = item.dst == nullptr;
    const std::string range =
        "bytes " + std::to_string(piece.offset) + ".." + std::to_string(piece.offset + piece.size);
    // The first sink error (the trainer is gone or stopped reading) ends the run.
    const auto sink_failed = [&](const Status& sunk) {
      MutexLock lock(mu_);
      if (run->sink_error.ok()) run->sink_error = sunk;
      if (!run->failed[piece.item]) {
        run->failed[piece.item] = 1;
        item.status = sunk.WithContext(item.what + " (" + range + ")");
      }
    };
    // A streamed piece is read into memory the sink lends where it can (then handed on
    // without a copy), else into this worker's own buffer.
    uint8_t* lent = nullptr;
    if (streamed && run->memory != nullptr) {
      Result<uint8_t*> borrowed = run->memory->borrow(piece.size);
      if (!borrowed.ok()) {
        sink_failed(borrowed.status());
        continue;
      }
      lent = *borrowed;
    }
    struct GiveBack {
      const PieceMemory* memory;
      uint8_t* lent;
      ~GiveBack() {
        if (lent != nullptr) memory->give_back(lent);
      }
    } give_back{run->memory, lent};
    if (streamed && lent == nullptr && staging.size() < run->largest_piece) {
      staging.resize(run->largest_piece);
    }
    uint8_t* const dst = lent != nullptr ? lent : streamed ? staging.data() : item.dst + piece.offset;
    std::string errors;
    Status last;
    bool ok = false;
    for (size_t s = 0; s < item.sources.size() && !ok; ++s) {
      const Source& src = item.sources[s];
      if (!errors.empty()) errors += "; ";
      if (!src.slot->local && IsBad(src.slot->node)) {
        errors += src.Label() + ": skipped, the node failed earlier";
        if (last.ok()) last = Status::Unavailable("node failed earlier");
        continue;
      }
      const auto now = Clock::now();
      if (now >= run->deadline) {
        last = Status::Timeout("the restore deadline passed");
        errors += src.Label() + ": not tried, the restore deadline passed";
        break;
      }
      const auto piece_deadline = std::min(run->deadline, now + options_.piece_timeout);
      Status st = reader_->Read(*src.slot, src.region, src.region_offset + piece.offset, dst,
                                piece.size, piece_deadline);
      if (st.ok() && streamed) {
        Status sunk = (*run->sink)(item.stream_offset + piece.offset, dst, piece.size);
        if (!sunk.ok()) {
          sink_failed(sunk);
          break;
        }
      }
      if (st.ok()) {
        ok = true;
        MutexLock lock(mu_);
        item.served.insert(src.Label());
        CountServedLocked(src, piece.size);
        done_ += piece.size;
        if (progress_) progress_(Progress{Phase::kFetch, done_, run->total, item.what});
        break;
      }
      errors += src.Label() + ": " + st.ToString();
      last = st;
      if (!src.slot->local && IsNodeFailure(st)) MarkBad(src.slot->node, st);
      if (s + 1 < item.sources.size() && stats_ != nullptr) {
        MutexLock lock(mu_);
        ++stats_->retries;
      }
    }
    if (ok) continue;
    MutexLock lock(mu_);
    if (!run->failed[piece.item] && run->sink_error.ok()) {
      run->failed[piece.item] = 1;
      item.status = Status(last.ok() ? StatusCode::kUnavailable : last.code(),
                           item.what + " (" + range + "): every source failed: " + errors);
    }
  }
}

}  // namespace reft::recovery
