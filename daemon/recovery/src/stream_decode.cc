/// \file stream_decode.cc
/// \brief Decoding lost shards from AEC parity as the surviving shards stream past.

#include "stream_decode.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "reft/protect/sharding.h"
#include "group_assembler.h"

namespace reft::recovery {

namespace {

/// Decoded sub-blocks go to the trainer in pieces of this size, like fetched ones, so no stream
/// record is larger than a fetch piece would be.
constexpr uint64_t kDeliverPiece = 4 << 20;

/// A decoded sub-block is summed and delivered in stretches of this size, each complete when
/// its own terms are in: a few fetch pieces' worth, small enough to stay in cache between its
/// first term and its delivery.
constexpr uint64_t kDecodeStretch = kDeliverPiece;

/// Bytes of padded shard range [begin, begin + len) below the shard's real size.
uint64_t RealBytes(uint64_t real, uint64_t begin, uint64_t len) {
  return begin >= real ? 0 : std::min(len, real - begin);
}

}  // namespace

Result<std::unique_ptr<StreamDecode>> StreamDecode::Plan(const ClusterView& view,
                                                         const protect::SlotMeta& meta,
                                                         const protect::SgGeometry& g,
                                                         int64_t step,
                                                         const std::vector<bool>& streamed,
                                                         uint64_t state_size,
                                                         const std::string& sg) {
  REFT_ASSIGN_OR_RETURN(protect::RecoveryAnalysis analysis,
                        protect::AnalyzeRecovery(g, meta.scheme, streamed));
  if (!analysis.lost.empty()) return std::unique_ptr<StreamDecode>();  // the assembly says what
  std::unique_ptr<StreamDecode> d(new StreamDecode());
  d->g_ = g;
  d->parity_base_ = state_size;
  std::vector<uint8_t*> sum_of(static_cast<size_t>(g.m), nullptr);
  for (int j = 0; j < g.m; ++j) {
    if (streamed[j]) continue;
    REFT_ASSIGN_OR_RETURN(HugeBuffer sum, HugeBuffer::Allocate(g.ShardSize(j), "a decoded shard"));
    sum_of[j] = sum.data();
    d->sums_.push_back(std::move(sum));
    d->labels_.push_back("dp" + std::to_string(j) + " " +
                         DescribeRebuild(g, meta.scheme, analysis, j));
  }
  std::set<int> holders;
  for (const protect::RecoveryOp& op : analysis.ops) {
    if (streamed[op.target]) continue;
    if (op.kind != protect::RecoveryOp::Kind::kXor) return std::unique_ptr<StreamDecode>();
    const uint64_t len = op.end - op.begin;
    const uint64_t out = RealBytes(g.ShardSize(op.target), op.begin, len);
    if (out == 0) continue;  // rebuilds padding only
    for (const auto& [i, off] : op.sources) {
      // A source that is itself decoded would have to be complete first: not streamable.
      if (!streamed[i]) return std::unique_ptr<StreamDecode>();
    }
    const uint64_t parity = d->parity_base_ + static_cast<uint64_t>(op.holder) * g.aec_sub;
    // One output group per stretch of the sub-block range, so each is delivered as soon as its
    // terms are in (the fetch order brings them together), while its sum is still in cache.
    for (uint64_t c = 0; c < out; c += kDecodeStretch) {
      const uint64_t n = std::min(kDecodeStretch, out - c);
      const size_t id = d->outputs_.size();
      uint8_t* at = sum_of[op.target] + op.begin + c;
      d->outputs_.push_back({op.target, sum_of[op.target], op.begin + c, n});
      for (const auto& [i, off] : op.sources) {
        // Past its real bytes a source reads as zero padding and adds nothing.
        d->sum_.AddTerm(g.shard_begin[i] + off + c, RealBytes(g.ShardSize(i), off + c, n), at,
                        id);
      }
      // The parity covers every byte of the stretch: each is written by at least one term.
      d->sum_.AddTerm(parity + op.region_offset + c, n, at, id);
    }
    holders.insert(op.holder);
  }
  for (int k : holders) {
    FetchItem it;
    it.what = std::string(protect::kRegionAec) + " of dp" + std::to_string(k) + " of " + sg;
    it.stream_offset = d->parity_base_ + static_cast<uint64_t>(k) * g.aec_sub;
    it.size = g.aec_sub;
    it.sources = RegionSources(view, meta, step, k, protect::kRegionAec, g.aec_sub,
                               ByteKind::kParity);
    if (it.sources.empty()) return std::unique_ptr<StreamDecode>();
    d->parity_items_.push_back(std::move(it));
  }
  return d;
}

uint64_t StreamDecode::ScheduleRank(uint64_t offset) const {
  if (g_.aec_sub == 0) return 0;
  if (IsParity(offset)) return (offset - parity_base_) % g_.aec_sub;
  if (offset >= g_.total) return 0;
  // The shard holding `offset`: the last one beginning at or before it.
  const auto next = std::upper_bound(g_.shard_begin.begin(), g_.shard_begin.end(), offset);
  return (offset - *std::prev(next)) % g_.aec_sub;
}

std::vector<FetchItem> StreamDecode::TakeParityItems() { return std::move(parity_items_); }

Status StreamDecode::Absorb(uint64_t offset, const uint8_t* data, uint64_t size,
                            const PieceSink& deliver) {
  std::vector<size_t> completed;
  REFT_RETURN_NOT_OK(sum_.Absorb(offset, data, size, &completed));
  // Complete sub-blocks are final: no term writes them again, so they go out unlocked.
  for (size_t id : completed) {
    const Output& o = outputs_[id];
    const uint64_t begin = g_.shard_begin[o.member] + o.at;
    for (uint64_t done = 0; done < o.size; done += kDeliverPiece) {
      const uint64_t n = std::min(kDeliverPiece, o.size - done);
      REFT_RETURN_NOT_OK(deliver(begin + done, o.sum + o.at + done, n));
    }
    delivered_ += o.size;
  }
  return Status::OK();
}

Status StreamDecode::Finish() const {
  uint64_t expected = 0;
  for (const Output& o : outputs_) expected += o.size;
  if (delivered_ != expected || delivered_ != decoded_bytes()) {
    return Status::Internal("the decode of the lost shards delivered " +
                            std::to_string(delivered_.load()) + " of " +
                            std::to_string(decoded_bytes()) + " bytes (" +
                            std::to_string(sum_.absorbed()) + " of the " +
                            std::to_string(sum_.expected()) + " streamed bytes it reads arrived)");
  }
  return Status::OK();
}

uint64_t StreamDecode::decoded_bytes() const {
  uint64_t n = 0;
  for (const HugeBuffer& s : sums_) n += s.size();
  return n;
}

}  // namespace reft::recovery
