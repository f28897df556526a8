#include "tests/testing/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace forecastd::testing {

int PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  char path_template[] = "/tmp/forecastd-test-output-XXXXXX";
  const int out_fd = mkstemp(path_template);
  if (out_fd < 0) return absl::InternalError(absl::StrCat("mkstemp: ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(out_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // The child: signals start unblocked whatever the test runner did.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // A test killed hard must not leave its daemon running.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    close(out_fd);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "execv %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out_fd);
  return ChildProcess(pid, path_template);
}

ChildProcess::ChildProcess(pid_t pid, std::string output_path)
    : pid_(pid), output_path_(std::move(output_path)) {}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_),
      output_path_(std::move(other.output_path_)),
      exited_(other.exited_),
      exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.output_path_.clear();
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && Running()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!output_path_.empty()) unlink(output_path_.c_str());
}

bool ChildProcess::Signal(int signal_number) { return kill(pid_, signal_number) == 0; }

bool ChildProcess::Running() {
  if (exited_) return false;
  int status = 0;
  const pid_t done = waitpid(pid_, &status, WNOHANG);
  if (done != pid_) return true;
  exited_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return false;
}

absl::StatusOr<int> ChildProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return exit_code_;
}

std::string ChildProcess::Output() const {
  std::ifstream in(output_path_);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv, absl::Duration timeout) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(argv);
  if (!child.ok()) return child.status();
  absl::StatusOr<int> code = child->WaitForExit(timeout);
  if (!code.ok()) return code.status();
  return RunResult{*code, child->Output()};
}

TempDir::TempDir() {
  char path_template[] = "/tmp/forecastd-test-XXXXXX";
  const char* made = mkdtemp(path_template);
  path_ = made != nullptr ? made : "";
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect ", host, ":", port, ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("short write");
  }
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0)
    response.append(buffer, static_cast<size_t>(n));
  close(fd);
  const size_t line_end = response.find("\r\n");
  const std::string status_line = response.substr(0, line_end);
  if (status_line.find(" 200 ") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("GET ", path, ": ", status_line));
  }
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

}  // namespace forecastd::testing
