// A minimal HTTP/1.1 GET over a plain socket, enough to read forecastd's /metrics without an
// HTTP library: one request, `Connection: close`, identity or chunked bodies.
// Stateless; thread-safe.
#ifndef FORECASTD_CLIENT_HTTP_GET_H_
#define FORECASTD_CLIENT_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace forecastd {

// The body of `GET http://<host_port><path>`. `host_port` is host:port, [v6-address]:port
// or host (port 80). UNAVAILABLE when nothing answers there, DEADLINE_EXCEEDED when the
// whole exchange takes longer than `timeout`, UNKNOWN with the status line for any status
// other than 200, INVALID_ARGUMENT for a malformed address.
absl::StatusOr<std::string> HttpGet(absl::string_view host_port, absl::string_view path,
                                    absl::Duration timeout);

}  // namespace forecastd

#endif  // FORECASTD_CLIENT_HTTP_GET_H_
