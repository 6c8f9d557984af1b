#include "tiny_tmpfs.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <catch2/catch.hpp>

namespace reft::testing {

TinyTmpfs::TinyTmpfs(const std::string& options, bool read_only) {
  char templ[] = "/tmp/reft-full-XXXXXX";
  if (::mkdtemp(templ) == nullptr) FAIL("mkdtemp: " << std::strerror(errno));
  path_ = templ;
  if (::mount("tmpfs", path_.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, options.c_str()) != 0) {
    const int err = errno;
    ::rmdir(path_.c_str());
    if (err == EPERM || err == EACCES) {
      std::fprintf(stderr,
                   "SKIPPED: cannot mount a tmpfs here (%s); the full-directory tests need "
                   "root / CAP_SYS_ADMIN\n",
                   std::strerror(err));
      std::fflush(stderr);
      std::_Exit(77);
    }
    FAIL("mount tmpfs on " << path_ << ": " << std::strerror(err));
  }
}

TinyTmpfs::~TinyTmpfs() {
  ::umount2(path_.c_str(), MNT_DETACH);
  ::rmdir(path_.c_str());
}

}  // namespace reft::testing
