// Helpers for tests that run real binaries: start a child process, signal it, collect its
// exit code and output, find a free loopback port, and fetch a URL over plain HTTP.
// A ChildProcess is owned by one test thread; the free functions are thread-safe.
#ifndef FORECASTD_TESTS_TESTING_PROCESS_H_
#define FORECASTD_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace forecastd::testing {

// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
int PickFreePort();

// A child process with stdout and stderr sent to a file that the test can read. The
// destructor kills a child that is still running.
class ChildProcess {
 public:
  static absl::StatusOr<ChildProcess> Start(const std::vector<std::string>& argv);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool Signal(int signal_number);
  // True while the child has not exited (reaps it if it has).
  bool Running();
  // The exit code (128 + signal for a killed child), or DEADLINE_EXCEEDED if it is still
  // running after `timeout`; `timeout` is a safety bound, not a measurement.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);
  // Everything the child wrote to stdout and stderr so far.
  std::string Output() const;

 private:
  ChildProcess(pid_t pid, std::string output_path);

  pid_t pid_ = -1;
  std::string output_path_;
  bool exited_ = false;
  int exit_code_ = -1;
};

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `argv` to completion (bounded by `timeout`).
absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                              absl::Duration timeout = absl::Seconds(60));

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// GET http://host:port/path; returns the body of a 200 response, or an error naming the
// status line.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_PROCESS_H_
