#pragma once
/// \file rank_id.h
/// \brief The one conversion between the store's RankKey and the wire's RankId (common.proto).

#include "reft/store/snapshot_store.h"
#include "reft/v1/common.pb.h"

namespace reft::peer {

store::RankKey FromRankId(const v1::RankId& id);
void ToRankId(const store::RankKey& rank, v1::RankId* out);
inline v1::RankId ToRankId(const store::RankKey& rank) {
  v1::RankId id;
  ToRankId(rank, &id);
  return id;
}

}  // namespace reft::peer
