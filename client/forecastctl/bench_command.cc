// `forecastctl bench MODEL`: the Benchmark RPC over a grid of batch sizes and concurrencies,
// one call per point (each point's result on stderr as it comes, the version of the first
// pinned for the rest), then a table of latency percentiles and throughput, optionally
// exported as CSV.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/output.h"

namespace forecastd::ctl {
namespace {

struct BenchArgs {
  std::string model;
  int64_t version = 0;
  std::vector<int> batch_sizes = {1};
  std::vector<int> concurrency = {1};
  uint32_t duration_ms = 1000;
  uint32_t warmup_requests = 0;
  std::string csv;
};

std::string CsvReport(const v1::BenchmarkResponse& r) {
  std::string out =
      "model,version,device,batch_size,concurrency,requests,requests_per_second,"
      "windows_per_second,p50_us,p90_us,p99_us,mean_queue_us,mean_compute_us,mean_batch_size\n";
  for (const v1::BenchmarkPoint& p : r.points()) {
    absl::StrAppend(&out, r.model(), ",", r.version(), ",", r.device(), ",", p.batch_size(), ",",
                    p.concurrency(), ",", p.requests(), ",", JsonDouble(p.requests_per_second()),
                    ",", JsonDouble(p.windows_per_second()), ",", JsonDouble(p.p50_us()), ",",
                    JsonDouble(p.p90_us()), ",", JsonDouble(p.p99_us()), ",",
                    JsonDouble(p.mean_queue_us()), ",", JsonDouble(p.mean_compute_us()), ",",
                    JsonDouble(p.mean_batch_size()), "\n");
  }
  return out;
}

int RunBench(Context& context, const BenchArgs& args) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  const size_t points = args.batch_sizes.size() * args.concurrency.size();
  const bool progress = !context.flags.json;
  if (progress && isatty(STDERR_FILENO) != 0) {
    std::fprintf(stderr, "Benchmarking %s: %zu point(s) of %u ms each\n", args.model.c_str(),
                 points, args.duration_ms);
  }
  // One call per point, so that each point shows as it ends; every point after the first
  // measures the version the first did, even if another is promoted meanwhile.
  v1::BenchmarkResponse response;
  size_t done = 0;
  for (const int b : args.batch_sizes) {
    for (const int c : args.concurrency) {
      v1::BenchmarkRequest request;
      request.set_model(args.model);
      request.set_version(done == 0 ? args.version : response.version());
      request.add_batch_sizes(b);
      request.add_concurrency(c);
      request.set_duration_ms(args.duration_ms);
      request.set_warmup_requests(args.warmup_requests);
      absl::StatusOr<v1::BenchmarkResponse> point = (*client)->Benchmark(request);
      if (!point.ok()) return ServerError(point.status());
      if (done == 0) {
        response.set_model(point->model());
        response.set_version(point->version());
        response.set_device(point->device());
      }
      ++done;
      for (const v1::BenchmarkPoint& p : point->points()) {
        *response.add_points() = p;
        if (progress) {
          std::fprintf(stderr,
                       "point %zu/%zu: batch %d, concurrency %d: %s req/s, p50 %s, p99 %s\n", done,
                       points, b, c, FormatRate(p.requests_per_second()).c_str(),
                       FormatMicros(p.p50_us()).c_str(), FormatMicros(p.p99_us()).c_str());
        }
      }
    }
  }
  if (!args.csv.empty()) {
    std::ofstream out(args.csv);
    out << CsvReport(response);
    out.close();
    if (!out) return UsageError(absl::StrCat("cannot write '", args.csv, "'"));
  }
  if (context.flags.json) {
    PrintJson(response);
    return kExitOk;
  }
  std::cout << "model " << response.model() << " version " << response.version() << " on "
            << response.device() << "\n";
  TextTable table({"BATCH", "CONCURRENCY", "REQUESTS", "REQ/S", "WINDOWS/S", "P50", "P90", "P99",
                   "QUEUE", "COMPUTE", "MEAN BATCH"});
  for (const v1::BenchmarkPoint& p : response.points()) {
    table.AddRow({absl::StrCat(p.batch_size()), absl::StrCat(p.concurrency()),
                  absl::StrCat(p.requests()), FormatRate(p.requests_per_second()),
                  FormatRate(p.windows_per_second()), FormatMicros(p.p50_us()),
                  FormatMicros(p.p90_us()), FormatMicros(p.p99_us()),
                  FormatMicros(p.mean_queue_us()), FormatMicros(p.mean_compute_us()),
                  FormatNumber(p.mean_batch_size())});
  }
  std::cout << table.Render();
  if (!args.csv.empty()) std::cout << "wrote " << args.csv << "\n";
  return kExitOk;
}

}  // namespace

void AddBenchCommand(CLI::App& app, Context& context) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = AddCommand(
      app, "bench", "Benchmark a model in the server: latency percentiles and throughput",
      "  forecastctl bench demo_lstm --batch-sizes 1,8,32 --concurrency 1,4 --duration-ms 1000\n"
      "  forecastctl bench demo_lstm --batch-sizes 1,32 --csv bench.csv\n"
      "Runs the model through the same engine path as Predict with synthetic inputs, one\n"
      "point per (batch size, concurrency), each shown on stderr as it ends, then the table;\n"
      "latencies are measured in the server.");
  bench->add_option("MODEL", args->model, "model name")->required();
  bench->add_option("--version", args->version, "model version (default: the serving one)")
      ->check(NonNegative());
  bench->add_option("--batch-sizes", args->batch_sizes, "windows per request, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(Positive());
  bench->add_option("--concurrency", args->concurrency, "requests in flight, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(Positive());
  bench->add_option("--duration-ms", args->duration_ms, "measuring time per point")
      ->capture_default_str()
      ->check(Between(1, 600000));
  bench->add_option("--warmup-requests", args->warmup_requests,
                    "unmeasured requests per point (0: the server's default, 10)");
  bench->add_option("--csv", args->csv, "also write the points to this CSV file");
  bench->callback(
      [&context, args] { context.action = [&context, args] { return RunBench(context, *args); }; });
}

}  // namespace forecastd::ctl
