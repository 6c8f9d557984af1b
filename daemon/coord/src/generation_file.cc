/// \file generation_file.cc
#include "generation_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <sstream>

namespace reft::coord::internal {

namespace {

// Job ids never contain '/' (store rules); anything outside [A-Za-z0-9_.-] is written as %XX
// so the name is a plain file name whatever the id holds.
std::string FileName(const std::string& job) {
  std::string out;
  for (unsigned char c : job) {
    if (std::isalnum(c) || c == '_' || c == '-' || (c == '.' && !out.empty())) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out + ".gen";
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "writing " + path);
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace

Status SaveGeneration(const std::string& dir, const std::string& job, const GenerationRecord& rec) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "creating " + dir);
  }
  const std::string path = dir + "/" + FileName(job);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::ostringstream os;
  std::string reason = rec.reason;
  for (char& c : reason) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  os << "reft-generation 1\ngeneration " << rec.generation << "\nbase " << rec.base_step
     << "\nfloor " << rec.persist_floor << "\nreason " << reason << "\n";
  if (rec.epoch != 0) os << "epoch " << rec.epoch << "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::FromErrno(errno, "creating " + tmp);
  Status st = WriteAll(fd, os.str(), tmp);
  if (st.ok() && ::fsync(fd) != 0) st = Status::FromErrno(errno, "fsync " + tmp);
  if (::close(fd) != 0 && st.ok()) st = Status::FromErrno(errno, "closing " + tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Status::FromErrno(errno, "renaming " + tmp);
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Result<std::optional<GenerationRecord>> LoadGeneration(const std::string& dir,
                                                       const std::string& job) {
  const std::string path = dir + "/" + FileName(job);
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    if (errno == ENOENT) return std::optional<GenerationRecord>();
    return Status::FromErrno(errno, "opening " + path);
  }
  std::string text;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    if (text.size() > 64 * 1024) break;
  }
  std::fclose(f);
  std::istringstream in(text);
  std::string line;
  GenerationRecord rec;
  auto bad = [&](const std::string& why) {
    return Status::Corrupted(path + ": " + why + " (job generation record)");
  };
  if (!std::getline(in, line) || line != "reft-generation 1") return bad("unknown header");
  auto field = [&](const std::string& key, std::string* value) {
    if (!std::getline(in, line) || line.rfind(key + " ", 0) != 0) return false;
    *value = line.substr(key.size() + 1);
    return true;
  };
  std::string g, b, fl;
  if (!field("generation", &g) || !field("base", &b) || !field("floor", &fl) ||
      !field("reason", &rec.reason)) {
    return bad("missing field");
  }
  try {
    size_t pos = 0;
    rec.generation = std::stoull(g, &pos);
    if (pos != g.size()) return bad("bad generation");
    rec.base_step = std::stoll(b, &pos);
    if (pos != b.size()) return bad("bad base");
    rec.persist_floor = std::stoll(fl, &pos);
    if (pos != fl.size()) return bad("bad floor");
    std::string e;  // written since restore epochs exist; older records have none
    if (field("epoch", &e)) {
      rec.epoch = std::stoll(e, &pos);
      if (pos != e.size()) return bad("bad epoch");
    }
  } catch (const std::exception&) {
    return bad("unparsable number");
  }
  return std::optional<GenerationRecord>(rec);
}

}  // namespace reft::coord::internal
