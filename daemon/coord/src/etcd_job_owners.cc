#include "reft/coord/etcd_job_owners.h"

#include <spdlog/spdlog.h>

#include "keys.h"
#include "reft/coord/records.h"

namespace reft::coord {

Status EtcdJobOwners::Admit(const std::string& job, const PeerCredentials& caller,
                            const local::JobOwner&) {
  auto owner = Owner(job);
  if (!owner.ok()) {
    std::optional<local::JobOwner> known = known_ ? known_(job) : std::nullopt;
    if (!known) {
      return Status::Unavailable("cannot check the owner of job '" + job +
                                 "' in etcd: " + owner.status().message());
    }
    owner = std::move(known);
  }
  if (!owner->has_value() || local::MayUse(**owner, caller)) return Status::OK();
  NoteDenied(job);
  return local::NotYourJob(job, caller);
}

Result<std::optional<local::JobOwner>> EtcdJobOwners::Owner(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Owner(job)));
  if (!kv) return std::optional<local::JobOwner>();
  REFT_ASSIGN_OR_RETURN(local::JobOwner o, DecodeOwner(kv->key, kv->value));
  return std::optional<local::JobOwner>(std::move(o));
}

Result<std::map<std::string, local::JobOwner>> EtcdJobOwners::All() {
  REFT_ASSIGN_OR_RETURN(RangeResult r, etcd_->GetPrefix(keys::JobsPrefix()));
  std::map<std::string, local::JobOwner> out;
  for (const auto& kv : r.kvs) {
    const std::string job = keys::JobOf(kv.key);
    if (job.empty() || kv.key != keys::Owner(job)) continue;
    auto o = DecodeOwner(kv.key, kv.value);
    if (o.ok()) out.emplace(job, std::move(*o));
  }
  return out;
}

void EtcdJobOwners::NoteDenied(const std::string& job) {
  denied_++;
  if (on_denied_) on_denied_(job);
}

Result<std::vector<std::string>> EtcdJobOwners::Import(
    const std::map<std::string, local::JobOwner>& owners) {
  std::vector<std::string> imported;
  for (const auto& [job, owner] : owners) {
    Txn t;
    t.IfCreateRevision(keys::Owner(job), Compare::kEqual, 0)
        .ThenPut(keys::Owner(job), Encode(owner));
    REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
    if (!r.succeeded) {
      spdlog::info("job {}: the owner recorded on this node ({}) was not imported: etcd has one",
                   job, owner.Describe());
      continue;
    }
    spdlog::info("job {}: owner {} imported into etcd from this node's record", job,
                 owner.Describe());
    imported.push_back(job);
  }
  return imported;
}

}  // namespace reft::coord
