#!/usr/bin/env bash
# Triton's perf_analyzer against forecastd serving the repository's demo models on a GPU, over
# KServe gRPC, with the tensors in the requests, in system shared memory and in CUDA shared
# memory (perf_analyzer allocates the device memory and registers its CUDA IPC handle), one
# line each: rc, throughput and latency as perf_analyzer reports them.
#
#   bench/perf_analyzer_gpu.sh --bin-dir DIR --pa-dir DIR [--device cuda:0] [--model demo_lstm]
#                              [--concurrency 1] [--interval-ms 2000] [--out DIR]
#
# --bin-dir holds forecastd and forecastctl (a GPU bundle's bin/); --pa-dir perf_analyzer and
# its libraries (bench/fetch_perf_analyzer.sh). perf_analyzer's full output goes to
# OUT/perf_analyzer_<mode>.log. Exit status: 0 when every mode ran without error.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir=""
pa_dir=""
device="cuda:0"
model="demo_lstm"
concurrency=1
interval_ms=2000
out="/tmp/perf_analyzer_gpu"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --pa-dir) pa_dir="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --interval-ms) interval_ms="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "perf_analyzer_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "${bin_dir}/forecastd" && -x "${pa_dir}/perf_analyzer" ]] || {
  echo "perf_analyzer_gpu.sh: needs --bin-dir (forecastd) and --pa-dir (perf_analyzer)" >&2
  exit 2
}
mkdir -p "${out}"

# A port nobody listens on, from the kernel's ephemeral range.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
grpc_port="$(free_port)"
metrics_port="$(free_port)"
"${bin_dir}/forecastd" --model-repository "${repo}/models" --devices "${device}" \
  --grpc-address "127.0.0.1:${grpc_port}" --metrics-address "127.0.0.1:${metrics_port}" \
  --http-address "" \
  > "${out}/forecastd.log" 2>&1 &
daemon=$!
trap 'kill "${daemon}" 2>/dev/null; wait "${daemon}" 2>/dev/null' EXIT
for _ in $(seq 1 120); do
  if "${bin_dir}/forecastctl" --address "127.0.0.1:${grpc_port}" --timeout 2 models list \
    > /dev/null 2>&1; then
    break
  fi
  kill -0 "${daemon}" 2>/dev/null || { echo "forecastd exited:"; cat "${out}/forecastd.log"; exit 1; }
  sleep 0.5
done

rc_all=0
printf '%-7s %4s %12s %10s %10s %10s\n' mode rc "infer/s" "p50 us" "p90 us" "p99 us"
for mode in none system cuda; do
  log="${out}/perf_analyzer_${mode}.log"
  args=(-m "${model}" -u "127.0.0.1:${grpc_port}" -i grpc --concurrency-range "${concurrency}"
        --measurement-interval "${interval_ms}" --stability-percentage 50 --percentile 50)
  if [[ "${mode}" != none ]]; then
    # The forecast's bytes: P * targets * 4 (the config's horizon and targets).
    out_bytes="$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))
print(int(c.get("horizon", 1)) * max(1, len(c.get("targetNames", c.get("target_names", [1])))) * 4)' \
      "${repo}/models/${model}/config.json")"
    args+=(--shared-memory "${mode}" --output-shared-memory-size "${out_bytes}")
  fi
  LD_LIBRARY_PATH="${pa_dir}:${LD_LIBRARY_PATH:-}" timeout 120 "${pa_dir}/perf_analyzer" \
    "${args[@]}" > "${log}" 2>&1
  rc=$?
  [[ ${rc} -eq 0 ]] || rc_all=1
  # perf_analyzer's summary: "Concurrency: 1, throughput: 2902.1 infer/sec, latency 332 usec",
  # and its "p90 latency: ..." lines.
  throughput="$(grep -oE 'throughput: [0-9.]+' "${log}" | tail -1 | awk '{print $2}')"
  p50="$(grep -oE 'latency [0-9]+ usec' "${log}" | tail -1 | awk '{print $2}')"
  p90="$(grep -oE 'p90 latency: [0-9]+' "${log}" | tail -1 | awk '{print $3}')"
  p99="$(grep -oE 'p99 latency: [0-9]+' "${log}" | tail -1 | awk '{print $3}')"
  printf '%-7s %4s %12s %10s %10s %10s\n' "${mode}" "${rc}" "${throughput:--}" "${p50:--}" \
    "${p90:--}" "${p99:--}"
  [[ ${rc} -eq 0 ]] || tail -5 "${log}" | sed 's/^/    /'
done
exit "${rc_all}"
