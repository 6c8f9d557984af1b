#pragma once
/// \file progress.h
/// \brief A one-line progress bar on stderr for long operations (persist, restore-check,
/// rebuild), drawn only when stderr is a terminal: scripts and `-o json` pipelines see nothing
/// extra, and the line is erased before the result is printed.

#include <chrono>
#include <cstdint>
#include <string>

namespace reft::ctl {

class ProgressBar {
 public:
  /// Enabled when stderr is a TTY (isatty(2)) and $REFT_NO_PROGRESS is unset.
  ProgressBar();
  ~ProgressBar() { Finish(); }

  /// \brief Redraws the line: "[=====>     ]  42%  fetch 1.2 GiB / 2.9 GiB  message" (a
  /// bar when `total` > 0, otherwise the phase, a count and the message). `unit` "bytes"
  /// formats sizes; anything else prints plain counts followed by the unit.
  void Update(const std::string& phase, uint64_t done, uint64_t total, const std::string& unit,
              const std::string& message);
  /// \brief Erases the line (idempotent).
  void Finish();

  bool enabled() const { return enabled_; }

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace reft::ctl
