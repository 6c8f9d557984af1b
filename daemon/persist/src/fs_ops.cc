#include "fs_ops.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace reft::persist::internal {

std::string ErrnoText(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

Status FsError(int err, const std::string& root, const std::string& what) {
  std::string msg = "persistent directory " + root + ": " + what + ": " + ErrnoText(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return Status::PermissionDenied(msg);
    case ENOSPC:
    case EDQUOT:
      return Status::IoError(msg + " (in-memory snapshots are unaffected)");
    default:
      return Status::IoError(msg);
  }
}

int FsyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = ::fsync(fd);
  int err = rc == 0 ? 0 : errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); their renames are ordered anyway.
  return err == EINVAL ? 0 : err;
}

Status MakeDirDurable(const std::string& path, mode_t mode, const std::string& root,
                      const std::string& rel) {
  if (::mkdir(path.c_str(), mode) == 0) {
    const std::string parent = path.substr(0, path.find_last_of('/'));
    if (int err = FsyncDir(parent)) return FsError(err, root, "fsync of the parent of " + rel);
    return Status::OK();
  }
  if (errno != EEXIST) return FsError(errno, root, "creating directory " + rel);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return FsError(errno, root, "stat " + rel);
  if (!S_ISDIR(st.st_mode)) {
    return Status::IoError("persistent directory " + root + ": " + rel +
                           " exists and is not a directory");
  }
  return Status::OK();
}

std::string RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  return ec ? path + ": " + ec.message() : std::string();
}

bool ProcessAlive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

Status WriteFileDurably(const DurableWrite& w, const Producer& produce) {
  const std::string temp = w.dir + "/" + w.temp_name;
  const std::string final_path = w.dir + "/" + w.final_name;
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, w.mode);
  if (fd < 0) return FsError(errno, w.root, "creating a temp file for " + w.rel);
  // From here on every failure closes and unlinks the temp file: nothing half-written stays.
  auto fail = [&](int err, const std::string& what) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    return FsError(err, w.root, what + " " + w.rel);
  };
  if (::fchmod(fd, w.mode) != 0) return fail(errno, "chmod of");
  if (w.preallocate && w.expected_bytes > 0 &&
      ::fallocate(fd, 0, 0, static_cast<off_t>(w.expected_bytes)) != 0) {
    const int err = errno;
    if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL) {
      return fail(err, "reserving " + std::to_string(w.expected_bytes) + " bytes for");
    }
  }
  uint64_t written = 0;
  int write_err = 0;
  Status st = produce([&](const void* data, size_t size) -> Status {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const size_t piece = std::min(size, w.piece);
      if (w.bucket != nullptr) w.bucket->Acquire(piece);
      ssize_t n = ::write(fd, p, piece);
      if (n < 0) {
        if (errno == EINTR) continue;
        write_err = errno;
        return Status::IoError("write failed");
      }
      p += n;
      size -= static_cast<size_t>(n);
      written += static_cast<uint64_t>(n);
    }
    return Status::OK();
  });
  if (write_err != 0) return fail(write_err, "writing");
  if (!st.ok()) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    return st;
  }
  if (written != w.expected_bytes) {
    ::close(fd);
    ::unlink(temp.c_str());
    return Status::Internal("wrote " + std::to_string(written) + " bytes of " + w.rel +
                            ", expected " + std::to_string(w.expected_bytes));
  }
  if (::fdatasync(fd) != 0) return fail(errno, "fdatasync of");
  const int rc = ::close(fd);  // NFS reports deferred write errors here
  fd = -1;
  if (rc != 0) return fail(errno, "closing");
  if (::rename(temp.c_str(), final_path.c_str()) != 0) return fail(errno, "renaming the temp file to");
  if (int err = FsyncDir(w.dir)) {
    return FsError(err, w.root, "fsync of the directory of " + w.rel +
                                    " (the file itself is complete)");
  }
  return Status::OK();
}

}  // namespace reft::persist::internal
