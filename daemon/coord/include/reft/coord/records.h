#pragma once
/// \file records.h
/// \brief The values stored under the keys of keys.h, as small JSON objects (readable with
/// `etcdctl get`). Decoding checks every field and names the key on error.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/local/commit_coordinator.h"
#include "reft/coord/job_coordinator.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::coord {

struct NodeRecord {
  std::string address;
  uint64_t epoch = 0;
};

struct GenerationRecord {
  uint64_t generation = 0;
  std::optional<int64_t> base_step;
  int64_t persist_floor = -1;
  std::string reason;
};

struct CommittedRecord {
  int64_t step = -1;
  uint64_t generation = 0;
  int64_t at_ms = 0;  ///< unix time of the commit (0: unknown); a job's last activity
  /// The restore epoch and layout revision the commit compared (0: a generation's base, or a
  /// record written before they were kept): with `generation`, the timeline of the step.
  int64_t epoch = 0;
  int64_t layout_revision = 0;
};

/// A step of the job the persistent tier holds (written by the job's persister): the job's
/// record, owner included, stays while it exists.
struct PersistedRecord {
  int64_t step = -1;
  int64_t at_ms = 0;
};

/// The ranks of one node that completed one step, in one generation.
struct CompletionRecord {
  uint64_t generation = 0;
  int64_t epoch = 0;  ///< the restore epoch the ranks completed the step in
  std::vector<store::RankKey> ranks;  ///< job filled in by the decoder
  /// The revision of the layout record the ranks joined under (0: absent from an older
  /// daemon's record, which then never counts once the job has a layout record).
  int64_t layout_revision = 0;
};

struct NodeRef {
  std::string node;
  int64_t step = -1;  ///< locations: the step the slot was recorded at
};

std::string Encode(const NodeRecord& r);
std::string Encode(const JobLayout& r);
std::string Encode(const GenerationRecord& r);
std::string Encode(const CommittedRecord& r);
std::string Encode(const CompletionRecord& r);
std::string Encode(const NodeRef& r);
std::string Encode(const local::JobOwner& r);
std::string Encode(const PersistedRecord& r);
std::string Encode(const RestoreDecision& r);
std::string Encode(const local::ReplicatedBuffers& r);
/// The plan document is stored as a JSON object, not as a string inside one.
std::string Encode(const PublishedPlan& r);

Result<NodeRecord> DecodeNode(const std::string& key, const std::string& value);
Result<JobLayout> DecodeLayout(const std::string& key, const std::string& value);
Result<GenerationRecord> DecodeGeneration(const std::string& key, const std::string& value);
Result<CommittedRecord> DecodeCommitted(const std::string& key, const std::string& value);
Result<CompletionRecord> DecodeCompletion(const std::string& job, const std::string& key,
                                          const std::string& value);
Result<NodeRef> DecodeNodeRef(const std::string& key, const std::string& value);
Result<local::JobOwner> DecodeOwner(const std::string& key, const std::string& value);
Result<PersistedRecord> DecodePersisted(const std::string& key, const std::string& value);
/// Unix time now, in milliseconds (the times records carry).
int64_t NowUnixMs();
Result<local::ReplicatedBuffers> DecodeReplicated(const std::string& key, const std::string& value);
/// `version` is set by the caller (the key's mod revision).
Result<RestoreDecision> DecodeDecision(const std::string& key, const std::string& value);
/// `version` is set by the caller (the key's mod revision).
Result<PublishedPlan> DecodePlan(const std::string& key, const std::string& value);

}  // namespace reft::coord
