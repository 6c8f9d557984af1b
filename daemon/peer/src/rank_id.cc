#include "reft/peer/rank_id.h"

namespace reft::peer {

store::RankKey FromRankId(const v1::RankId& id) {
  store::RankKey k;
  k.job = id.job();
  k.pp = id.pp();
  k.tp = id.tp();
  k.dp = id.dp();
  return k;
}

void ToRankId(const store::RankKey& rank, v1::RankId* out) {
  out->set_job(rank.job);
  out->set_pp(rank.pp);
  out->set_tp(rank.tp);
  out->set_dp(rank.dp);
}

}  // namespace reft::peer
