#include "client/http_get.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace forecastd {
namespace {

// Closes a socket on every return path.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status Await(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
    }
    pollfd p{fd, events, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll ", what, ": ", std::strerror(errno)));
    }
  }
}

// Connects a non-blocking socket to the first address of `host`:`port` that accepts.
absl::StatusOr<int> Connect(const std::string& host, const std::string& port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ":", port, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    absl::Status ready = Await(fd, POLLOUT, deadline, "connecting");
    int error = 0;
    socklen_t len = sizeof(error);
    if (ready.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0) {
      freeaddrinfo(found);
      return fd;
    }
    last_error = ready.ok() ? std::strerror(error) : std::string(ready.message());
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", host, ":", port, ": ", last_error));
}

// Decodes a `Transfer-Encoding: chunked` body.
absl::StatusOr<std::string> Dechunk(absl::string_view body) {
  std::string out;
  while (true) {
    const size_t line_end = body.find("\r\n");
    if (line_end == absl::string_view::npos) return absl::UnknownError("truncated chunked body");
    absl::string_view size_text = body.substr(0, line_end);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions
    size_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size)) {
      return absl::UnknownError(absl::StrCat("bad chunk size '", size_text, "'"));
    }
    body.remove_prefix(line_end + 2);
    if (size == 0) return out;
    if (body.size() < size) return absl::UnknownError("truncated chunk");
    out.append(body.data(), size);
    body.remove_prefix(size);
    if (absl::StartsWith(body, "\r\n")) body.remove_prefix(2);
  }
}

}  // namespace

absl::StatusOr<std::string> HttpGet(absl::string_view host_port, absl::string_view path,
                                    absl::Duration timeout) {
  std::string host(host_port);
  std::string port = "80";
  if (absl::StartsWith(host_port, "[")) {
    const size_t close_bracket = host_port.find(']');
    if (close_bracket == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad address '", host_port, "'"));
    }
    host = std::string(host_port.substr(1, close_bracket - 1));
    const absl::string_view rest = host_port.substr(close_bracket + 1);
    if (absl::StartsWith(rest, ":")) port = std::string(rest.substr(1));
  } else if (const size_t colon = host_port.rfind(':'); colon != absl::string_view::npos) {
    host = std::string(host_port.substr(0, colon));
    port = std::string(host_port.substr(colon + 1));
  }
  if (host.empty() || port.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address '", host_port, "' (expected host:port)"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> connected = Connect(host, port, deadline);
  if (!connected.ok()) return connected.status();
  Socket socket(*connected);

  const std::string host_header = host.find(':') != std::string::npos
                                      ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
  const std::string request = absl::StrCat(
      "GET ", path, " HTTP/1.1\r\nHost: ", host_header,
      "\r\nUser-Agent: forecastctl\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    if (absl::Status s = Await(socket.fd(), POLLOUT, deadline, "sending"); !s.ok()) return s;
    const ssize_t n = send(socket.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[16384];
  while (true) {
    if (absl::Status s = Await(socket.fd(), POLLIN, deadline, "reading the response"); !s.ok()) {
      return s;
    }
    const ssize_t n = recv(socket.fd(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    response.append(buffer, static_cast<size_t>(n));
  }

  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    return absl::UnknownError(absl::StrCat("no HTTP response from ", host_port));
  }
  const absl::string_view head = absl::string_view(response).substr(0, head_end);
  const std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  const std::vector<absl::string_view> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/")) {
    return absl::UnknownError(absl::StrCat("not an HTTP response: '", lines[0], "'"));
  }
  if (status[1] != "200") {
    return absl::UnknownError(absl::StrCat("GET ", path, ": ", lines[0]));
  }
  bool chunked = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(lines[i].substr(0, colon)),
                               "transfer-encoding") &&
        absl::StrContains(absl::AsciiStrToLower(lines[i].substr(colon + 1)), "chunked")) {
      chunked = true;
    }
  }
  const absl::string_view body = absl::string_view(response).substr(head_end + 4);
  if (chunked) return Dechunk(body);
  return std::string(body);
}

}  // namespace forecastd
