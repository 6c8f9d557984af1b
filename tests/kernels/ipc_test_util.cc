#include "ipc_test_util.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace reft::kernels::testing {

bool SendWithFd(int sock, const std::string& bytes, int fd) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &msg, 0) == static_cast<ssize_t>(bytes.size());
}

bool RecvWithFd(int sock, std::string* bytes, int* fd) {
  std::vector<char> buf(65536);
  iovec iov{buf.data(), buf.size()};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(sock, &msg, 0);
  if (n <= 0) return false;
  bytes->assign(buf.data(), static_cast<size_t>(n));
  *fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  }
  return true;
}

namespace {
template <typename T>
void Put(std::string* s, const T& v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
template <typename T>
bool Get(const std::string& s, size_t* pos, T* v) {
  if (s.size() - *pos < sizeof(T)) return false;
  std::memcpy(v, s.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}
}  // namespace

bool SendExport(int sock, const MemoryExport& ex) {
  std::string s;
  Put(&s, ex.kind);
  Put(&s, ex.device);
  Put(&s, ex.allocation_id);
  Put(&s, ex.allocation_size);
  Put(&s, ex.offset);
  Put(&s, ex.size);
  s += ex.ipc_handle;
  return SendWithFd(sock, s, ex.fd);
}

bool RecvExport(int sock, MemoryExport* ex) {
  std::string s;
  if (!RecvWithFd(sock, &s, &ex->fd)) return false;
  size_t pos = 0;
  if (!Get(s, &pos, &ex->kind) || !Get(s, &pos, &ex->device) || !Get(s, &pos, &ex->allocation_id) ||
      !Get(s, &pos, &ex->allocation_size) || !Get(s, &pos, &ex->offset) ||
      !Get(s, &pos, &ex->size)) {
    return false;
  }
  ex->ipc_handle = s.substr(pos);
  return true;
}

bool SendEvent(int sock, const EventExport& ev) {
  return SendWithFd(sock, "E" + ev.ipc_handle, ev.fd);
}

bool RecvEvent(int sock, EventExport* ev) {
  std::string s;
  if (!RecvWithFd(sock, &s, &ev->fd) || s.empty() || s[0] != 'E') return false;
  ev->ipc_handle = s.substr(1);
  return true;
}

}  // namespace reft::kernels::testing
