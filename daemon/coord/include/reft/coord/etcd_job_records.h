#pragma once
/// \file etcd_job_records.h
/// \brief peer::JobRecords on etcd: the sweeper that deletes `/reft/v1/jobs/<job>/` once the job
/// is gone for `forget_after`, `reftctl jobs list` and `jobs release`.
///
/// One node sweeps: the holder of `/reft/v1/sweeper`, a key bound to its lease (another node
/// takes over when it dies). Every quarter of `forget_after` it reads the jobs' keys and the
/// live nodes once, and notes when each gone job was first seen gone with the newest revision of its
/// keys; a job gone that long with no key written since is deleted in a transaction that
/// compares exactly that (`mod_revision < R + 1` over the job's prefix), so a trainer joining
/// the job at the last moment keeps it. The nodes that followed the job see its keys deleted and
/// drop their state (EtcdJobCoordinator). Thread-safe.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_node_directory.h"
#include "reft/mutex.h"
#include "reft/peer/job_records.h"

namespace reft::coord {

struct JobRecordsOptions {
  /// A job gone this long is forgotten (reftd: `jobs.forget_after_s`, default 600).
  std::chrono::milliseconds forget_after{600000};
  /// Jobs deleted per transaction (each compares its own prefix).
  size_t max_deletes_per_txn = 32;
};

class EtcdJobRecords final : public peer::JobRecords {
 public:
  /// `nodes` outlives this object.
  EtcdJobRecords(std::shared_ptr<EtcdClient> etcd, EtcdNodeDirectory* nodes,
                 JobRecordsOptions options = {});
  ~EtcdJobRecords() override;

  Status NotePersisted(const std::string& job, int64_t step) override;
  Result<std::vector<peer::JobRecord>> List() override;
  Status Release(const std::string& job, bool force) override;

  /// \brief One sweep, if this node holds the sweeper key; returns the jobs deleted.
  Result<std::vector<std::string>> SweepOnce() override REFT_EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  /// What the sweep read of one job.
  struct Seen {
    peer::JobRecord record;
    int64_t newest_rev = 0;  ///< the newest mod revision of its keys
    bool gone = false;
  };
  /// A gone job's first sighting (and the revision it had then).
  struct Gone {
    Clock::time_point since;
    int64_t rev = 0;
  };

  /// Holds the sweeper key (creating it under this node's lease when it is free).
  bool HoldSweeperKey() REFT_EXCLUDES(mu_);
  /// Reads every job's keys and the live nodes: the records, with whether each job is gone.
  Result<std::map<std::string, Seen>> ReadAll();
  /// Deletes the jobs' prefixes, each only if nothing under it changed since `rev`.
  std::vector<std::string> Delete(const std::vector<std::pair<std::string, int64_t>>& jobs)
      REFT_EXCLUDES(mu_);

  std::shared_ptr<EtcdClient> etcd_;
  EtcdNodeDirectory* nodes_;
  const JobRecordsOptions options_;

  Mutex mu_;
  std::map<std::string, Gone> gone_ REFT_GUARDED_BY(mu_);  ///< the sweeper's view
  int64_t held_lease_ REFT_GUARDED_BY(mu_) = 0;  ///< the lease the sweeper key is bound to
};

}  // namespace reft::coord
