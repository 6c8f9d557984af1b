// Opening a store: option checks, shm_dir preparation, and adoption of the segments a previous
// daemon left behind (docs/failure-model.md: "reftd killed and restarted: segments adopted after header
// and checksum checks; nothing lost").
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "chunk_checksums.h"
#include "naming.h"
#include "reft/checksum.h"
#include "store_impl.h"

namespace reft::store::internal {
namespace {
std::string StepStr(int64_t step) { return "step " + std::to_string(step); }
bool RecordsBlank(const reft_segment_header* h) {
  const auto* b = reinterpret_cast<const uint8_t*>(h->records);
  for (size_t i = 0; i < sizeof h->records; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}
}  // namespace
}  // namespace reft::store::internal

namespace reft::store {
namespace {

Status ValidateOptions(const StoreOptions& o) {
  if (o.shm_dir.empty()) return Status::InvalidArgument("shm_dir is empty");
  if (o.chunk_size < 4096 || (o.chunk_size & (o.chunk_size - 1)) != 0) {
    return Status::InvalidArgument("chunk_size " + std::to_string(o.chunk_size) +
                                   " must be a power of two >= 4096");
  }
  if (o.slots_per_rank < 2) {
    return Status::InvalidArgument("slots_per_rank " + std::to_string(o.slots_per_rank) +
                                   " must be >= 2 (newest committed + one being written)");
  }
  if (o.file_mode != 0600 && o.file_mode != 0640) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(o.file_mode));
    return Status::InvalidArgument(std::string("file_mode ") + buf + " must be 0600 or 0640");
  }
  if (o.checksum_threads < 1 || o.checksum_threads > 256) {
    return Status::InvalidArgument("checksum_threads " + std::to_string(o.checksum_threads) +
                                   " must be in [1, 256]");
  }
  return Status::OK();
}

/// Creates `dir` (0700, or 0750 when segments are group-readable) or checks an existing one:
/// a real directory (no symlink), owned by us, not writable by group or others (otherwise
/// someone else could plant or swap segment files).
Status PrepareDir(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) == 0) {
    // mkdir applies the umask; the operator's group setting must hold whatever it is.
    if (::chmod(dir.c_str(), mode) != 0) return Status::FromErrno(errno, "chmod shm_dir " + dir);
  } else if (errno != EEXIST) {
    return Status::FromErrno(errno, "creating shm_dir " + dir);
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "stat shm_dir " + dir);
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("shm_dir " + dir + " is not a directory (or is a symlink)");
  }
  if (st.st_uid != ::geteuid()) {
    return Status::PermissionDenied("shm_dir " + dir + " is owned by uid " +
                                    std::to_string(st.st_uid) + ", not by this daemon");
  }
  if ((st.st_mode & 0022) != 0) {
    return Status::PermissionDenied("shm_dir " + dir +
                                    " is writable by group or others; refusing to use it");
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(const StoreOptions& options,
                                                           AdoptionReport* report) {
  REFT_RETURN_NOT_OK(ValidateOptions(options));
  REFT_RETURN_NOT_OK(PrepareDir(options.shm_dir, options.file_mode == 0640 ? 0750 : 0700));
  auto store = std::make_unique<internal::StoreImpl>(options);
  AdoptionReport local;
  REFT_RETURN_NOT_OK(store->Adopt(report ? report : &local));
  return std::unique_ptr<SnapshotStore>(std::move(store));
}

namespace internal {

std::string StoreImpl::QuarantinePath(const std::string& name) const {
  return options_.shm_dir + "/quarantine/" + name + "." + std::to_string(::time(nullptr)) + "." +
         std::to_string(::getpid());
}

Status StoreImpl::Adopt(AdoptionReport* report) {
  struct Candidate {
    std::string name;
    std::string path;
    std::shared_ptr<SegmentFile> file;
    ParsedSegment parsed;
    std::string bad;  // non-empty: quarantine with this reason
  };
  std::vector<Candidate> found;
  DIR* d = ::opendir(options_.shm_dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "opening shm_dir " + options_.shm_dir);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!LooksLikeSegmentName(name)) continue;  // not ours (quarantine/, ., .., others)
    Candidate c;
    c.name = name;
    c.path = options_.shm_dir + "/" + name;
    found.push_back(std::move(c));
  }
  ::closedir(d);

  auto quarantine = [&](Candidate& c) {
    c.file.reset();
    const std::string qdir = options_.shm_dir + "/quarantine";
    if (::mkdir(qdir.c_str(), 0700) != 0 && errno != EEXIST) {
      ::unlink(c.path.c_str());
      report->quarantined.push_back(c.path + ": " + c.bad + " (removed: no quarantine dir)");
      return;
    }
    const std::string dest = QuarantinePath(c.name);
    if (::rename(c.path.c_str(), dest.c_str()) != 0) {
      ::unlink(c.path.c_str());
      report->quarantined.push_back(c.path + ": " + c.bad + " (removed: rename failed)");
      return;
    }
    report->quarantined.push_back(c.path + ": " + c.bad + " (moved to " + dest + ")");
  };

  // 1. Headers.
  std::vector<ChunkRef> chunks;
  std::vector<uint64_t> expected;
  std::vector<size_t> owner;  // chunk -> candidate
  std::vector<size_t> first_chunk(found.size(), 0);
  for (size_t i = 0; i < found.size(); ++i) {
    Candidate& c = found[i];
    auto f = SegmentFile::Open(c.path);
    if (!f.ok()) {
      c.bad = f.status().message();
      continue;
    }
    c.file = *f;
    if (HeaderIsBlank(c.file->data(), c.file->size())) {
      // Created but never laid out (crash right after creation): held nothing.
      c.file.reset();
      ::unlink(c.path.c_str());
      report->discarded_partial.push_back(c.path + ": blank header (creation interrupted), removed");
      continue;
    }
    auto p = ParseSegment(c.file->data(), c.file->size());
    if (!p.ok()) {
      const auto* h = reinterpret_cast<const reft_segment_header*>(c.file->data());
      if (c.file->size() >= sizeof(reft_segment_header) && RecordsBlank(h)) {
        // No state was ever published in it: the creation was interrupted mid-layout.
        c.file.reset();
        ::unlink(c.path.c_str());
        report->discarded_partial.push_back(c.path + ": never published (" +
                                            p.status().message() + "), removed");
        continue;
      }
      c.bad = p.status().message();
      continue;
    }
    c.parsed = std::move(*p);
    if (SegmentFileName(c.parsed.rank, c.parsed.slot) != c.name) {
      c.bad = "file name does not match the header (" + c.parsed.rank.ToString() + " slot " +
              std::to_string(c.parsed.slot) + ")";
      continue;
    }
    const ActiveRecord& r = c.parsed.record;
    c.file->PrefaultExisting(options_.checksum_threads);  // one fault pass, before reading
    if (r.state == SlotState::kComplete || r.state == SlotState::kCommitted) {
      const Geometry& g = c.parsed.geometry;
      if (ChunkTableChecksum(c.file->data(), g) != r.chunk_table_checksum) {
        c.bad = "chunk checksum table does not match its state record";
        continue;
      }
      auto list = ListChunks(c.file->data(), g);
      first_chunk[i] = chunks.size();
      const auto* table = reinterpret_cast<const uint64_t*>(c.file->data() + g.chunk_table_offset);
      for (size_t k = 0; k < list.size(); ++k) {
        chunks.push_back(list[k]);
        expected.push_back(table[k]);
        owner.push_back(i);
      }
    }
  }
  // 2. Every chunk of every complete/committed segment, all at once over the worker threads.
  std::vector<uint64_t> actual(chunks.size());
  ChecksumChunks(chunks, actual.data(), options_.checksum_threads);
  for (size_t k = 0; k < chunks.size(); ++k) {
    Candidate& c = found[owner[k]];
    if (actual[k] != expected[k] && c.bad.empty()) {
      c.bad = StepStr(c.parsed.record.step) + " (" + SlotStateName(c.parsed.record.state) +
              ") fails the checksum of payload chunk " + std::to_string(k - first_chunk[owner[k]]);
    }
  }
  // 3. Index. No other thread uses the store yet; the lock makes that visible to the analysis.
  MutexLock lock(mu_);
  for (auto& c : found) {
    if (!c.bad.empty()) {
      quarantine(c);
      continue;
    }
    if (!c.file) continue;
    auto slot = std::make_shared<Slot>();
    slot->index = c.parsed.slot;
    slot->path = c.path;
    slot->file = c.file;
    slot->layout = c.parsed.layout;
    slot->geometry = c.parsed.geometry;
    slot->record = c.parsed.record;
    if (slot->state() == SlotState::kWriting) {
      // A snapshot interrupted mid-write (trainer or daemon died): discard, keep the segment.
      report->discarded_partial.push_back(c.path + ": partial " + StepStr(slot->step()) +
                                          " (writing), slot freed");
      TransitionLocked(*slot, SlotState::kFree, -1, 0);
    }
    used_ += slot->file->size();
    RankState& rs = ranks_[c.parsed.rank];
    rs.slots[slot->index] = slot;
  }
  // 4. Finish interrupted commits: older committed/complete slots of a rank with a newer
  // committed step are released (Commit publishes the new one before freeing the old).
  for (auto& [key, rs] : ranks_) {
    auto newest = NewestCommittedLocked(rs);
    const Slot* layout_from = nullptr;
    for (auto& [i, s] : rs.slots) {
      if (newest && s->step() < *newest &&
          (s->state() == SlotState::kCommitted || s->state() == SlotState::kComplete)) {
        TransitionLocked(*s, SlotState::kFree, -1, 0);
      }
      if (s->state() != SlotState::kFree && (!layout_from || s->step() > layout_from->step())) {
        layout_from = s.get();
      }
    }
    if (!layout_from && !rs.slots.empty()) layout_from = rs.slots.begin()->second.get();
    if (layout_from) rs.layout = layout_from->layout;
    for (auto& [i, s] : rs.slots) {
      if (s->state() != SlotState::kFree) report->adopted.push_back(InfoLocked(key, *s));
    }
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace reft::store
