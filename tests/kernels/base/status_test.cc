#include "kernels/base/status.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

absl::Status FailIf(bool fail) {
  return fail ? absl::InvalidArgumentError("asked to fail") : absl::OkStatus();
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

int steps_run = 0;

absl::Status TwoSteps(bool fail_first) {
  steps_run = 0;
  RETURN_IF_ERROR(FailIf(fail_first));
  ++steps_run;
  RETURN_IF_ERROR(Half(4));  // a StatusOr works too
  ++steps_run;
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(const int quarter, Half(half));
  return quarter;
}

absl::StatusOr<std::unique_ptr<std::string>> MakeString(bool fail) {
  if (fail) return absl::NotFoundError("no string");
  return std::make_unique<std::string>("moved");
}

absl::StatusOr<std::string> TakeString(bool fail) {
  std::unique_ptr<std::string> s;
  ASSIGN_OR_RETURN(s, MakeString(fail));  // assignment to an existing lvalue
  return *s;
}

TEST_CASE("RETURN_IF_ERROR stops at the first error and passes it on", "[unit][status]") {
  REQUIRE(TwoSteps(/*fail_first=*/false).ok());
  REQUIRE(steps_run == 2);
  const absl::Status failed = TwoSteps(/*fail_first=*/true);
  REQUIRE(failed.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(failed.message() == "asked to fail");
  REQUIRE(steps_run == 0);
}

TEST_CASE("ASSIGN_OR_RETURN binds values and propagates errors", "[unit][status]") {
  REQUIRE(Quarter(12).value() == 3);
  REQUIRE(Quarter(6).status().code() == absl::StatusCode::kInvalidArgument);  // 6 -> 3 is odd
  REQUIRE(Quarter(7).status().message() == "odd");
  REQUIRE(TakeString(false).value() == "moved");
  REQUIRE(TakeString(true).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("VendorError names the library, code, message, expression and place", "[unit][status]") {
  const absl::Status s =
      VendorError(absl::StatusCode::kResourceExhausted, "CUDA", "cudaErrorMemoryAllocation",
                  "out of memory", FD_VENDOR_CALL_SITE(cudaMalloc(&p, 64)));
  REQUIRE(s.code() == absl::StatusCode::kResourceExhausted);
  const std::string m(s.message());
  CAPTURE(m);
  REQUIRE(m.rfind("CUDA error cudaErrorMemoryAllocation: out of memory in `cudaMalloc(&p, 64)` at ",
                  0) == 0);
  REQUIRE(m.find("status_test.cc:") != std::string::npos);
  // Source paths are relative to the project root, not the build machine's checkout.
  REQUIRE(m.find(" at tests/kernels/base/status_test.cc:") != std::string::npos);
  // Also where the compiler saw them relative to a build directory (ccache's CCACHE_BASEDIR).
  const absl::Status relative = VendorError(absl::StatusCode::kInternal, "cuBLAS", "X", "y",
                                            {"f()", "../../backends/cuda/x.cc", 7});
  REQUIRE(absl::EndsWith(relative.message(), "in `f()` at backends/cuda/x.cc:7"));
}

}  // namespace
}  // namespace forecastd
