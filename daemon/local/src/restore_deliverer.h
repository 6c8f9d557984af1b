#pragma once
/// \file restore_deliverer.h
/// \brief Restore delivery for one session: the RestoreProvider assembles the newest step
/// committed job-wide (REFT-load) into a memfd; device buffers are copied host->device here,
/// staged buffers are placed in the reply and the client copies them out of a read-only
/// mapping of the memfd. Used by the session's strand only.

#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/messages.h"
#include "reft/protect/slot_meta.h"
#include "reft/unique_fd.h"
#include "session_buffers.h"

namespace reft::local {

class RestoreDeliverer {
 public:
  RestoreDeliverer(RestoreProvider* restorer, SessionBuffers* buffers)
      : restorer_(restorer), buffers_(buffers) {}

  /// \brief Restores the rank `meta` describes. `reply->slot.step` is -1 when nothing is
  /// committed; otherwise device buffers hold their bytes, `reply->slot.staged` places the
  /// others in `*fd` (left invalid when there are none). `reply->report` says how it went;
  /// `*epoch` gets the restore epoch of the decision the restore followed. With `stream` (the
  /// client asked for one) and only staged buffers, the provider may stream instead: the reply
  /// then has neither placements nor fd.
  Status Deliver(const protect::SlotMeta& meta, const RestoreRequest& request,
                 local_proto::RestoreReply* reply, UniqueFd* fd, int64_t* epoch,
                 RestoreSink* stream = nullptr);

  /// \brief Where each staged buffer lies in a state laid out as `offsets` (buffers a reshape
  /// left untouched have none).
  Result<std::vector<local_proto::Placement>> PlaceStaged(
      const std::map<std::string, uint64_t>& offsets,
      const std::vector<std::string>& untouched = {}) const;

 private:
  /// Copies each device buffer's bytes from `base` (offsets by buffer name) host->device.
  Status PushDevice(const uint8_t* base, const std::map<std::string, uint64_t>& offsets);

  RestoreProvider* const restorer_;
  SessionBuffers* const buffers_;
};

}  // namespace reft::local
