// The emulated device (docs/data-paths.md "Save"): host memory in memfds that the daemon imports like GPU
// IPC memory, copied by a paced copy engine, so the pull path, fences and scheduling run in CI.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backends.h"
#include "copy_engine.h"
#include "reft/kernels/emulated.h"
#include "reft/kernels/xor.h"
#include "reft/memory_file_system.h"
#include "reft/mutex.h"
#include "reft/sealed_fd.h"
#include "reft/units.h"

namespace reft::kernels {
namespace {

/// InvalidArgument when `ptr` lies in a shared mapping of a file outside tmpfs/hugetlbfs.
Status CheckLongTermPinnable(const void* ptr) {
  std::ifstream maps("/proc/self/maps");
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char perms[8] = {};
    unsigned long long inode = 0;
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %llu %n", &lo, &hi, perms, &inode,
                    &path_at) < 4 ||
        addr < lo || addr >= hi) {
      continue;
    }
    std::string path = path_at > 0 ? line.substr(static_cast<size_t>(path_at)) : "";
    if (perms[3] != 's' || inode == 0 || path.empty() || path[0] != '/' ||
        path.rfind("/memfd:", 0) == 0) {
      return Status::OK();  // private, anonymous or memfd (shmem)
    }
    const std::string fs = NonMemoryFileSystem(path);  // "" for tmpfs, or unlinked
    if (fs.empty()) return Status::OK();
    return Status::InvalidArgument("emulated HostRegister: " + path + " is a shared mapping of a " +
                                   fs + " file, which the kernel does not let a device page-lock");
  }
  return Status::OK();
}

std::atomic<uint64_t> g_bandwidth{0};
std::once_flag g_bandwidth_from_env;

void ReadBandwidthFromEnv() {
  const char* env = std::getenv("REFT_EMULATED_BANDWIDTH");
  if (env && *env) {
    auto parsed = ParseByteSize(env);
    if (parsed.ok()) g_bandwidth.store(*parsed);
  }
}

// Every live EmulatedAllocation of this process, by base address, so Export() can find the
// allocation (and its memfd) that contains a pointer, like cuMemGetAddressRange does.
struct AllocationEntry {
  uint64_t size;
  int fd;
  uint64_t id;
  bool exportable;
};
Mutex g_alloc_mu;
std::map<uintptr_t, AllocationEntry> g_allocations REFT_GUARDED_BY(g_alloc_mu);
std::atomic<uint64_t> g_next_alloc_id{1};

class EmulatedImport final : public ImportedMemory {
 public:
  EmulatedImport(uint8_t* base, uint64_t mapped, uint64_t offset, uint64_t size)
      : base_(base), mapped_(mapped), offset_(offset), size_(size) {}
  ~EmulatedImport() override { munmap(base_, mapped_); }
  MemoryKind kind() const override { return MemoryKind::kEmulated; }
  void* data() const override { return base_ + offset_; }
  uint64_t size() const override { return size_; }

 private:
  uint8_t* base_;
  uint64_t mapped_;
  uint64_t offset_;
  uint64_t size_;
};

Result<HostCopyStream*> AsHostStream(CopyStream& stream) {
  auto* s = dynamic_cast<HostCopyStream*>(&stream);
  if (!s) return Status::InvalidArgument("stream was not created by the emulated backend");
  return s;
}

Status CheckRange(const ImportedMemory& mem, uint64_t offset, uint64_t size) {
  if (offset > mem.size() || size > mem.size() - offset) {
    return Status::InvalidArgument("range [" + std::to_string(offset) + ", +" +
                                   std::to_string(size) + ") outside the imported " +
                                   std::to_string(mem.size()) + " bytes");
  }
  return Status::OK();
}

// The emulated devices this process sees, by ordinal: one by default; REFT_EMULATED_DEVICE_UUIDS
// ("uuid,uuid,...") lists them instead, the way CUDA_VISIBLE_DEVICES narrows and renumbers real
// GPUs per process (tests give the trainer and reftd different lists).
std::vector<std::string> EmulatedDeviceUuids() {
  std::vector<std::string> uuids;
  const char* env = std::getenv("REFT_EMULATED_DEVICE_UUIDS");
  std::string list = env != nullptr ? env : "";
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) uuids.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  if (uuids.empty()) uuids.push_back("EMU-00000000-0000-0000-0000-000000000000");
  return uuids;
}

class EmulatedBackend final : public DeviceBackend {
 public:
  MemoryKind kind() const override { return MemoryKind::kEmulated; }
  int DeviceCount() const override { return static_cast<int>(EmulatedDeviceUuids().size()); }
  Result<DeviceIdentity> Identify(int ordinal) const override {
    const auto uuids = EmulatedDeviceUuids();
    if (ordinal < 0 || ordinal >= static_cast<int>(uuids.size())) {
      return Status::InvalidArgument("no emulated device " + std::to_string(ordinal));
    }
    // A stable stand-in for the PCI address: the same device has it in every process.
    return DeviceIdentity{uuids[ordinal], "emulated:" + uuids[ordinal]};
  }

  Result<MemoryExport> Export(const void* ptr, uint64_t size) override {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    MutexLock lock(g_alloc_mu);
    auto it = Containing(p);
    if (it == g_allocations.end()) return NotEmulated();
    const AllocationEntry& a = it->second;
    if (p - it->first > a.size || size > a.size - (p - it->first)) return NotEmulated();
    if (!a.exportable) {
      return Status::Unsupported("emulated allocation is not exportable (it stands in for VMM / "
                                 "expandable-segment memory)");
    }
    MemoryExport ex;
    ex.kind = MemoryKind::kEmulated;
    ex.fd = a.fd;
    ex.allocation_id = (static_cast<uint64_t>(getpid()) << 32) | a.id;
    ex.allocation_size = a.size;
    ex.offset = p - it->first;
    ex.size = size;
    return ex;
  }

  Result<int> Locate(const void* ptr) override {
    MutexLock lock(g_alloc_mu);
    if (Containing(reinterpret_cast<uintptr_t>(ptr)) == g_allocations.end()) return NotEmulated();
    return 0;
  }

  // The trainer's own copy of emulated memory (the staged fallback): the host writes before
  // RecordReadyEvent are complete, so `ready` is already signalled; the copy is paced like the
  // device link.
  Status CopyLocalToHost(int, const void* src, void* dst, uint64_t size,
                         const EventExport& ready) override {
    REFT_RETURN_NOT_OK(WaitCounterEvent(ready, 60000));
    PacedCopy(dst, src, size, EmulatedCopyBandwidth());
    return Status::OK();
  }
  Status CopyHostToLocal(int, const void* src, void* dst, uint64_t size, void*) override {
    PacedCopy(dst, src, size, EmulatedCopyBandwidth());
    return Status::OK();
  }

  Result<std::shared_ptr<ImportedMemory>> Import(const MemoryExport& ex) override {
    if (ex.kind != MemoryKind::kEmulated) return Status::InvalidArgument("not an emulated export");
    if (ex.fd < 0) return Status::InvalidArgument("emulated export without a memfd");
    if (ex.offset > ex.allocation_size || ex.size > ex.allocation_size - ex.offset) {
      return Status::InvalidArgument("emulated export range outside its allocation");
    }
    // An exporter that could still shrink the memfd would turn the daemon's next copy into a
    // SIGBUS: only sealed allocations (EmulatedAllocation) are imported.
    REFT_RETURN_NOT_OK(RequireShrinkSealed(ex.fd, ex.allocation_size, "emulated memfd"));
    const uint64_t mapped = std::max<uint64_t>(ex.allocation_size, 1);
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, ex.fd, 0);
    if (base == MAP_FAILED) return Status::FromErrno(errno, "mmap(emulated memfd)");
    return std::shared_ptr<ImportedMemory>(
        new EmulatedImport(static_cast<uint8_t*>(base), mapped, ex.offset, ex.size));
  }

  Result<std::unique_ptr<CopyStream>> CreateStream(int device) override {
    REFT_ASSIGN_OR_RETURN(auto stream, HostCopyStream::Create(/*paced=*/true, "reft-emu-copy"));
    return std::unique_ptr<CopyStream>(std::move(stream));
  }

  Result<EventExport> RecordReadyEvent(int, void*) override { return RecordHostReadyEvent(); }
  Status WaitEventOnHost(const EventExport& event, int64_t timeout_ms) override {
    return WaitCounterEvent(event, timeout_ms);
  }
  // Page-locking is a no-op here, but the kernel's rule is kept: Linux (>= 6.5) refuses a
  // long-term pin of a shared file mapping whose file system tracks dirty pages, i.e. anything
  // but tmpfs/hugetlbfs, and cudaHostRegister then fails (seen on an H200 with a slot dir on
  // ext4). Tests on the emulated device meet the same refusal a GPU node would.
  Status PinHost(void* ptr, uint64_t) override { return CheckLongTermPinnable(ptr); }
  Status UnpinHost(void*) override { return Status::OK(); }

  Status CopyToHostAsync(const ImportedMemory& src, uint64_t offset, void* dst, uint64_t size,
                         CopyStream& stream) override {
    REFT_RETURN_NOT_OK(CheckRange(src, offset, size));
    REFT_ASSIGN_OR_RETURN(auto* s, AsHostStream(stream));
    s->EnqueueCopy(dst, static_cast<const uint8_t*>(src.data()) + offset, size);
    return Status::OK();
  }

  Status CopyToDeviceAsync(const void* src, const ImportedMemory& dst, uint64_t offset,
                           uint64_t size, CopyStream& stream) override {
    REFT_RETURN_NOT_OK(CheckRange(dst, offset, size));
    REFT_ASSIGN_OR_RETURN(auto* s, AsHostStream(stream));
    s->EnqueueCopy(static_cast<uint8_t*>(dst.data()) + offset, src, size);
    return Status::OK();
  }

  // The "device kernel" XORs in device memory, then the result crosses the paced link once.
  Status XorToHostAsync(const ImportedMemory* const* srcs, const uint64_t* offsets, size_t nsrc,
                        void* dst_host, uint64_t size, CopyStream& stream) override {
    if (nsrc == 0) return Status::InvalidArgument("XOR of zero sources");
    std::vector<const void*> ptrs(nsrc);
    for (size_t i = 0; i < nsrc; ++i) {
      REFT_RETURN_NOT_OK(CheckRange(*srcs[i], offsets[i], size));
      ptrs[i] = static_cast<const uint8_t*>(srcs[i]->data()) + offsets[i];
    }
    REFT_ASSIGN_OR_RETURN(auto* s, AsHostStream(stream));
    auto scratch = std::make_shared<std::vector<uint8_t>>(size);
    s->EnqueueWork([scratch, ptrs, size] {
      return XorReduce(scratch->data(), ptrs.data(), ptrs.size(), size);
    });
    s->EnqueueCopy(dst_host, scratch->data(), size);
    s->EnqueueWork([scratch] { return Status::OK(); });  // keeps scratch alive until copied
    return Status::OK();
  }

 private:
  // The registered allocation whose range may hold `p` (caller holds g_alloc_mu), or end().
  static std::map<uintptr_t, AllocationEntry>::iterator Containing(uintptr_t p)
      REFT_REQUIRES(g_alloc_mu) {
    auto it = g_allocations.upper_bound(p);
    if (it == g_allocations.begin()) return g_allocations.end();
    --it;
    return p - it->first < std::max<uint64_t>(it->second.size, 1) ? it : g_allocations.end();
  }
  static Status NotEmulated() {
    return Status::Unsupported("pointer is not inside an emulated-device allocation");
  }
};

}  // namespace

void SetEmulatedCopyBandwidth(uint64_t bytes_per_second) {
  std::call_once(g_bandwidth_from_env, [] {});  // an explicit setting wins over the env
  g_bandwidth.store(bytes_per_second);
}

uint64_t EmulatedCopyBandwidth() {
  std::call_once(g_bandwidth_from_env, ReadBandwidthFromEnv);
  return g_bandwidth.load();
}

struct EmulatedAllocation::Impl {
  int fd = -1;
  void* data = nullptr;
  uint64_t size = 0;
  uint64_t mapped = 0;
};

Result<std::unique_ptr<EmulatedAllocation>> EmulatedAllocation::Create(uint64_t size,
                                                                       bool exportable) {
  auto impl = std::make_unique<Impl>();
  impl->size = size;
  impl->mapped = std::max<uint64_t>(size, 1);
  impl->fd = memfd_create("reft-emulated-device", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (impl->fd < 0) return Status::FromErrno(errno, "memfd_create(emulated device)");
  auto fail = [&](const char* what) {
    Status st = Status::FromErrno(errno, what);
    close(impl->fd);
    return st;
  };
  if (ftruncate(impl->fd, static_cast<off_t>(impl->mapped)) != 0)
    return fail("ftruncate(emulated device)");
  // The importer relies on the size: forbid shrinking (a SIGBUS in the daemon) and growing.
  if (fcntl(impl->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return fail("F_ADD_SEALS");
  impl->data = mmap(nullptr, impl->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, impl->fd, 0);
  if (impl->data == MAP_FAILED) return fail("mmap(emulated device)");
  {
    MutexLock lock(g_alloc_mu);
    g_allocations[reinterpret_cast<uintptr_t>(impl->data)] =
        AllocationEntry{size, impl->fd, g_next_alloc_id.fetch_add(1), exportable};
  }
  std::unique_ptr<EmulatedAllocation> alloc(new EmulatedAllocation());
  alloc->impl_ = std::move(impl);
  return alloc;
}

EmulatedAllocation::~EmulatedAllocation() {
  if (!impl_) return;
  {
    MutexLock lock(g_alloc_mu);
    g_allocations.erase(reinterpret_cast<uintptr_t>(impl_->data));
  }
  munmap(impl_->data, impl_->mapped);
  close(impl_->fd);
}

void* EmulatedAllocation::data() const { return impl_->data; }
uint64_t EmulatedAllocation::size() const { return impl_->size; }
int EmulatedAllocation::fd() const { return impl_->fd; }

DeviceBackend* EmulatedDeviceBackend() {
  static EmulatedBackend backend;
  return &backend;
}

}  // namespace reft::kernels
