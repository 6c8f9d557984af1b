/// \file stream_decode.cc
/// \brief Decoding lost shards from AEC parity as the surviving shards stream past.

#include "stream_decode.h"

#include <algorithm>

#include "reft/kernels/xor.h"
#include "reft/protect/sharding.h"
#include "reft/recovery/group_assembler.h"

namespace reft::recovery {

namespace {

/// Decoded shards go to the trainer in pieces of this size, like fetched ones, so no stream
/// record is larger than a fetch piece would be.
constexpr uint64_t kDeliverPiece = 4 << 20;

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
                                                         const std::string& sg) {
  REFT_ASSIGN_OR_RETURN(protect::RecoveryAnalysis analysis,
                        protect::AnalyzeRecovery(g, meta.scheme, streamed));
  if (!analysis.lost.empty()) return std::unique_ptr<StreamDecode>();  // the assembly says what
  std::unique_ptr<StreamDecode> d(new StreamDecode());
  d->g_ = g;
  d->parity_.resize(static_cast<size_t>(g.m));
  std::vector<int> slot_of(static_cast<size_t>(g.m), -1);  // member -> index in shards_
  for (int j = 0; j < g.m; ++j) {
    if (streamed[j]) continue;
    slot_of[j] = static_cast<int>(d->shards_.size());
    REFT_ASSIGN_OR_RETURN(HugeBuffer sum, HugeBuffer::Allocate(g.ShardSize(j), "a decoded shard"));
    d->shards_.push_back({j, std::move(sum)});
    d->labels_.push_back("dp" + std::to_string(j) + " " +
                         DescribeRebuild(g, meta.scheme, analysis, j));
  }
  for (const protect::RecoveryOp& op : analysis.ops) {
    if (streamed[op.target]) continue;
    if (op.kind != protect::RecoveryOp::Kind::kXor) return std::unique_ptr<StreamDecode>();
    const uint64_t len = op.end - op.begin;
    const uint64_t out = RealBytes(g.ShardSize(op.target), op.begin, len);
    if (out == 0) continue;  // rebuilds padding only
    Shard& target = d->shards_[static_cast<size_t>(slot_of[op.target])];
    for (const auto& [i, off] : op.sources) {
      // A source that is itself decoded would have to be complete first: not streamable.
      if (!streamed[i]) return std::unique_ptr<StreamDecode>();
      // Past its real bytes a source reads as zero padding and adds nothing.
      const uint64_t n = std::min(out, RealBytes(g.ShardSize(i), off, len));
      d->sum_.AddTerm(g.shard_begin[i] + off, n, target.bytes.data() + op.begin);
    }
    d->uses_.push_back({static_cast<size_t>(slot_of[op.target]), op.holder, op.region_offset,
                        op.begin, out});
    HugeBuffer& parity = d->parity_[op.holder];
    if (parity.size() > 0 || g.aec_sub == 0) continue;
    REFT_ASSIGN_OR_RETURN(parity, HugeBuffer::Allocate(g.aec_sub, "AEC parity"));
    FetchItem it;
    it.what = std::string(protect::kRegionAec) + " of dp" + std::to_string(op.holder) + " of " + sg;
    it.dst = parity.data();
    it.size = parity.size();
    it.sources = RegionSources(view, meta, step, op.holder, protect::kRegionAec, g.aec_sub,
                               ByteKind::kParity);
    if (it.sources.empty()) return std::unique_ptr<StreamDecode>();
    d->parity_items_.push_back(std::move(it));
  }
  return d;
}

std::vector<FetchItem> StreamDecode::TakeParityItems() { return std::move(parity_items_); }

Status StreamDecode::Finish(const PieceSink& deliver) {
  if (sum_.absorbed() != sum_.expected()) {
    return Status::Internal("the decode of the lost shards read " +
                            std::to_string(sum_.absorbed()) + " of the " +
                            std::to_string(sum_.expected()) + " streamed bytes it needs");
  }
  for (const ParityUse& u : uses_) {
    uint8_t* out = shards_[u.shard].bytes.data() + u.at;
    const void* srcs[2] = {out, parity_[u.holder].data() + u.offset};
    REFT_RETURN_NOT_OK(kernels::XorReduce(out, srcs, 2, u.size));
  }
  for (const Shard& s : shards_) {
    const uint64_t begin = g_.shard_begin[s.member];
    for (uint64_t done = 0; done < s.bytes.size(); done += kDeliverPiece) {
      const uint64_t n = std::min<uint64_t>(kDeliverPiece, s.bytes.size() - done);
      REFT_RETURN_NOT_OK(deliver(begin + done, s.bytes.data() + done, n));
    }
  }
  return Status::OK();
}

uint64_t StreamDecode::decoded_bytes() const {
  uint64_t n = 0;
  for (const Shard& s : shards_) n += s.bytes.size();
  return n;
}

}  // namespace reft::recovery
