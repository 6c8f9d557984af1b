/// \file reshape_read.cc
/// \brief ReadSavedRanges: byte ranges of a committed step's saved buffers, asked for by a
/// reader that locates its state in the step's own records (PyTorch DCP's metadata), laid out
/// one after another in a memfd.

#include "reft/mapped_memfd.h"
#include "reft/recovery/reshape.h"

namespace reft::recovery {

Result<local::RestoredState> ReadSavedRanges(const StepCatalog& catalog,
                                             const RangeAssembler& assemble,
                                             const local::RestoreRequest& request) {
  if (request.read_step != catalog.step) {
    return Status::Busy("the restore decision of job '" + catalog.job + "' is step " +
                        std::to_string(catalog.step) + ", the reads were located in step " +
                        std::to_string(request.read_step) + ": read that step's records again");
  }
  uint64_t total = 0;
  for (const auto& r : request.reads) {
    if (r.end < r.begin) {
      return Status::InvalidArgument("read of buffer '" + r.name + "' ends before it begins");
    }
    total += r.end - r.begin;
  }
  REFT_ASSIGN_OR_RETURN(
      MappedMemfd mem,
      MappedMemfd::Create("reft-read step " + std::to_string(catalog.step), total));
  std::vector<RangeRequest> requests;
  uint64_t at = 0;
  for (const auto& r : request.reads) {
    RangeRequest q;
    q.name = r.name;
    q.begin = r.begin;
    q.end = r.end;
    q.tp = r.tp;
    q.pp = r.pp;
    q.dst = mem.data() + at;
    at += r.end - r.begin;
    // Per-rank buffers have no global name to read by; the catalog says which ones are.
    REFT_ASSIGN_OR_RETURN(const SavedBuffer* saved, catalog.Find(r.name, r.tp, r.pp));
    if (saved->spec.kind == protect::BufferKind::kUnique && !saved->spec.sharded()) {
      return Status::InvalidArgument("buffer '" + r.name + "' of step " +
                                     std::to_string(catalog.step) +
                                     " was saved per rank (unique without a shard): it is "
                                     "restored only into the same rank, not read by range");
    }
    requests.push_back(std::move(q));
  }
  std::string where;
  REFT_RETURN_NOT_OK(assemble(requests, &where));
  local::RestoredState out;
  out.step = catalog.step;
  out.reshaped = true;
  out.from_layout = catalog.layout.ToString();
  out.size = mem.size();
  out.fd = mem.Release();
  out.detail = std::to_string(request.reads.size()) + " range(s), " + std::to_string(total) +
               " bytes of step " + std::to_string(catalog.step) + ": " + where;
  return out;
}

}  // namespace reft::recovery
