// Provokes real oneDNN failures through both its C and C++ APIs.
#include "backends/cpu/dnnl_status.h"

#include <string>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

absl::Status CApiFailure() {
  dnnl_engine_t engine = nullptr;
  // There is no CPU engine with index 7.
  DNNL_RETURN_IF_ERROR(dnnl_engine_create(&engine, dnnl_cpu, 7));
  dnnl_engine_destroy(engine);
  return absl::OkStatus();
}

absl::StatusOr<int> CppApiFailure() {
  DNNL_TRY(dnnl::engine bad(dnnl::engine::kind::cpu, 7));
  return 1;
}

absl::StatusOr<int> CppApiSuccess() {
  DNNL_TRY(dnnl::engine good(dnnl::engine::kind::cpu, 0));
  return 1;
}

TEST_CASE("oneDNN C API failures become Status", "[unit][dnnl]") {
  const absl::Status s = CApiFailure();
  REQUIRE(!s.ok());
  const std::string m(s.message());
  CAPTURE(m);
  REQUIRE(m.find("oneDNN error dnnl_invalid_arguments") == 0);
  REQUIRE(m.find("dnnl_engine_create(&engine, dnnl_cpu, 7)") != std::string::npos);
  REQUIRE(m.find("tests/backends/cpu/dnnl_status_test.cc:") != std::string::npos);
}

TEST_CASE("oneDNN C++ exceptions become Status and never escape", "[unit][dnnl]") {
  REQUIRE(CppApiSuccess().value() == 1);
  const absl::StatusOr<int> r = CppApiFailure();
  REQUIRE(!r.ok());
  const std::string m(r.status().message());
  CAPTURE(m);
  REQUIRE(m.find("oneDNN error dnnl_invalid_arguments") == 0);
  REQUIRE(m.find("could not create an engine") != std::string::npos);
}

TEST_CASE("oneDNN status codes map to Status codes", "[unit][dnnl]") {
  const VendorCallSite site{"x", "f.cc", 1};
  REQUIRE(DnnlStatus(dnnl_success, "", site).ok());
  REQUIRE(DnnlStatus(dnnl_out_of_memory, "", site).code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(DnnlStatus(dnnl_unimplemented, "", site).code() == absl::StatusCode::kUnimplemented);
  REQUIRE(DnnlStatus(dnnl_runtime_error, "", site).code() == absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace forecastd
