#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "reft/units.h"

namespace reft::ctl {

namespace {

int TerminalWidth() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 80;
}

std::string Amount(uint64_t v, const std::string& unit) {
  if (unit == "bytes") return FormatBytes(v);
  return std::to_string(v);
}

}  // namespace

ProgressBar::ProgressBar() {
  const char* off = std::getenv("REFT_NO_PROGRESS");
  enabled_ = ::isatty(STDERR_FILENO) == 1 && (off == nullptr || *off == '\0');
}

void ProgressBar::Update(const std::string& phase, uint64_t done, uint64_t total,
                         const std::string& unit, const std::string& message) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done != total && now - last_ < std::chrono::milliseconds(50)) return;
  last_ = now;
  std::string line;
  if (total > 0) {
    const uint64_t shown = done > total ? total : done;
    const int width = 24;
    const int filled = static_cast<int>(static_cast<double>(shown) * width / total);
    line = "[";
    for (int i = 0; i < width; ++i) line += i < filled ? '=' : (i == filled ? '>' : ' ');
    char pct[16];
    std::snprintf(pct, sizeof(pct), "] %3d%%  ", static_cast<int>(100.0 * shown / total));
    line += pct;
    line += phase + " " + Amount(shown, unit) + " / " + Amount(total, unit);
    if (unit != "bytes" && !unit.empty()) line += " " + unit;
  } else {
    line = phase;
    if (done > 0) line += " " + Amount(done, unit);
  }
  if (!message.empty()) line += "  " + message;
  const size_t max = static_cast<size_t>(TerminalWidth() - 1);
  if (line.size() > max) line.resize(max);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace reft::ctl
