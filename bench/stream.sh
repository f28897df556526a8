#!/usr/bin/env bash
# Tick streams against their peers, side by side in one run (bench/README.md, "Tick streams"):
#   (a) one stream, one tick in flight, --ticks ticks: per-tick p50/p99 (forecastd), with
#       stream_bench's blocking client (the least latency of its own for one key)
#   (b) the same ticks, same client, against bench/echo_server's Stream: the gRPC floor, no
#       compute
#   (c) one Step of the model at B=1 in-process (CPU backend), and the server's compute_us
#   (d) windowed Predict of the same model at concurrency 1 (bench/load_gen)
#   (e) 1, 100, 1,000 and 10,000 streams (one tick in flight each, over --calls gRPC streams on
#       --channels connections): ticks/s and p99; and Predict at concurrency 1,000 over as many
#       connections, for the throughput ratio
# then a table with the ratios. The model is bench/configs/<--workload>.json with
# streaming.mode STREAM_MODE_STATE and seeded random weights (stream_bench model).
# Builds nothing: build forecastd, echo_server, load_gen and stream_bench first.
#
#   bench/stream.sh                                   the CPU run
#   bench/stream.sh --build-dir build-cpu --ticks 5000 --duration-s 5
#   bench/stream.sh --devices cuda:0 --forecastd /opt/fd/bin/forecastd --bin-dir /opt/fd/bin
#
# Options:
#   --build-dir DIR      where the programs are (default: build)
#   --bin-dir DIR        the bench programs' directory (default: BUILD_DIR/bench)
#   --forecastd PATH     the forecastd binary (default: BUILD_DIR/server/forecastd)
#   --address HOST:PORT  forecastd's gRPC address (default 127.0.0.1:0, a free port)
#   --devices LIST       forecastd --devices (default cpu; cuda:0 on a GPU host)
#   --workload NAME      bench/configs/NAME.json (default lstm_h128_l2)
#   --ticks N            (a) and (b): measured ticks (default 7500), split over the rounds
#   --rounds N           (a) and (b) take turns N times (default 25: short turns, so that a
#                        change in the machine's state falls on both alike); medians of the
#                        rounds
#   --levels LIST        (e): stream counts (default 1,100,1000,10000)
#   --duration-s S       (e) and Predict: measured seconds per point (default 3)
#   --last-duration-s S  the largest level's measured seconds (default 1.5)
#   --warmup-s S         untimed seconds before each point (default 1)
#   --calls N            gRPC streams the keys of a level share (default 4)
#   --client KIND        (e): stream_bench's client, blocking (default: a thread per call, which
#                        carried the most ticks/s at 1,000 keys on a 16-core GPU host) or callback
#   --channels N         (e): gRPC channels, each its own connection, that a level's calls and
#                        Predict at concurrency 1,000 spread over (default 1); (a), (b) and (d)
#                        use one
#   --server-cpus LIST   run forecastd and echo_server alike under `taskset -c LIST` (default:
#                        any core)
#   --client-cpus LIST   run stream_bench and load_gen under `taskset -c LIST` (default: any)
#   --cpu-workers N      forecastd --cpu-workers (default 0: one per core)
#   --forecastd-arg ARG  one more forecastd argument (repeatable), e.g.
#                        --forecastd-arg=--tick-batches-per-model=1
#   --omp-threads N      OMP_NUM_THREADS for forecastd and the in-process Step (default: env)
# Every process it starts is stopped when it exits.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
source "${repo}/bench/bench_command.sh"
export_bench_command bench/stream.sh "$@"

build_dir=build
bin_dir=""
forecastd=""
address=127.0.0.1:0
devices=cpu
workload=lstm_h128_l2
ticks=7500
rounds=25
levels=1,100,1000,10000
duration_s=3
last_duration_s=1.5
warmup_s=1
calls=4
channels=1
client=blocking
server_cpus=""
client_cpus=""
cpu_workers=0
forecastd_args=()
omp_threads=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --forecastd) forecastd=$2; shift 2 ;;
    --address) address=$2; shift 2 ;;
    --devices) devices=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --ticks) ticks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --duration-s) duration_s=$2; shift 2 ;;
    --last-duration-s) last_duration_s=$2; shift 2 ;;
    --warmup-s) warmup_s=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    --channels) channels=$2; shift 2 ;;
    --client) client=$2; shift 2 ;;
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --cpu-workers) cpu_workers=$2; shift 2 ;;
    --forecastd-arg) forecastd_args+=("$2"); shift 2 ;;
    --forecastd-arg=*) forecastd_args+=("${1#--forecastd-arg=}"); shift ;;
    --omp-threads) omp_threads=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stream.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin_dir=${bin_dir:-${build_dir}/bench}
forecastd=${forecastd:-${build_dir}/server/forecastd}
for program in "${forecastd}" "${bin_dir}/echo_server" "${bin_dir}/load_gen" \
               "${bin_dir}/stream_bench"; do
  [[ -x ${program} ]] || { echo "stream.sh: ${program} is missing: build it first" >&2; exit 1; }
done
if [[ -n ${omp_threads} ]]; then export OMP_NUM_THREADS=${omp_threads}; fi
# Core sets: the same for both servers, so that (b) stays the floor of (a).
server_on=()
client_on=()
[[ -n ${server_cpus} ]] && server_on=(taskset -c "${server_cpus}")
[[ -n ${client_cpus} ]] && client_on=(taskset -c "${client_cpus}")

work=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start VAR LOG PATTERN COMMAND...: starts COMMAND with its output in LOG and sets VAR to the
# port its log reports (PATTERN's group). Not in a subshell, so the pid is kept for cleanup.
start() {
  local var=$1 log=$2 pattern=$3
  shift 3
  "$@" >"${log}" 2>&1 &
  local pid=$! found="" i
  pids+=("${pid}")
  for ((i = 0; i < 1200; i++)); do
    # (The log appears once the background shell has opened it.)
    found=$(sed -nE "s/.*${pattern}.*/\1/p" "${log}" 2>/dev/null | head -n1 || true)
    [[ -n ${found} ]] && break
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z ${found} ]]; then
    echo "stream.sh: $1 did not report its port; its log:" >&2
    cat "${log}" >&2
    exit 1
  fi
  printf -v "${var}" '%s' "${found}"
}

results=${work}/results.jsonl
model_line=$("${bin_dir}/stream_bench" model --config "bench/configs/${workload}.json" \
               --out "${work}/repo")
read -r T F P K < <(python3 -c 'import json,sys; m=json.loads(sys.argv[1]);
print(m["lookback"], m["features"], m["horizon"], m["targets"])' "${model_line}")
targets=$(python3 -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))["targetNames"]))' \
            "bench/configs/${workload}.json")

echo "starting echo_server and forecastd (--devices ${devices}) ..." >&2
start echo_port "${work}/echo.log" 'listening on port ([0-9]+)' \
  "${server_on[@]}" "${bin_dir}/echo_server" --horizon "${P}" --target-names "${targets}"
start fd_port "${work}/forecastd.log" 'serving gRPC on [^ ]+ \(port ([0-9]+)\)' \
  "${server_on[@]}" "${forecastd}" --model-repository "${work}/repo" --load-model "${workload}" \
  --devices "${devices}" --grpc-address "${address}" --metrics-address 127.0.0.1:0 \
  --http-address '' --cpu-workers "${cpu_workers}" ${forecastd_args[@]+"${forecastd_args[@]}"}
fd=127.0.0.1:${fd_port}
echo_target=127.0.0.1:${echo_port}

predict() {  # concurrency, seconds, extra flags...
  local concurrency=$1 seconds=$2
  shift 2
  "${client_on[@]}" "${bin_dir}/load_gen" --target "${fd}" --label predict --model "${workload}" --lookback "${T}" \
    --features "${F}" --concurrency "${concurrency}" --warmup-s "${warmup_s}" \
    --duration-s "${seconds}" --ready-timeout-s 120 "$@" >>"${results}"
}
ticks_point() {  # label, target, streams, extra flags...
  local label=$1 target=$2 streams=$3
  shift 3
  "${client_on[@]}" "${bin_dir}/stream_bench" ticks --target "${target}" --label "${label}" --model "${workload}" \
    --features "${F}" --streams "${streams}" --calls "${calls}" --warmup-s "${warmup_s}" "$@" \
    >>"${results}"
}

echo "(c) one step in-process ..." >&2
"${server_on[@]}" "${bin_dir}/stream_bench" step --model "${work}/repo/${workload}" >>"${results}"
echo "(d) windowed Predict, concurrency 1 (waits for the model) ..." >&2
predict 1 "${duration_s}"
# (a) and (b) take turns, --rounds times, so that a change in the machine's state (other load,
# idle cores) falls on both alike; the table gives the median of their rounds.
round_ticks=$(((ticks + rounds - 1) / rounds))
for ((round = 1; round <= rounds; ++round)); do
  echo "(a) one stream, ${round_ticks} ticks, round ${round}/${rounds} ..." >&2
  ticks_point stream "${fd}" 1 --ticks "${round_ticks}" --client blocking
  echo "(b) echo stream, ${round_ticks} ticks, round ${round}/${rounds} ..." >&2
  ticks_point echo "${echo_target}" 1 --ticks "${round_ticks}" --client blocking
done
IFS=, read -r -a level_list <<<"${levels}"
last=${level_list[-1]}
for streams in "${level_list[@]}"; do
  seconds=${duration_s}
  [[ ${streams} == "${last}" && ${#level_list[@]} -gt 1 ]] && seconds=${last_duration_s}
  echo "(e) ${streams} streams, ${seconds} s ..." >&2
  ticks_point streams "${fd}" "${streams}" --duration-s "${seconds}" --channels "${channels}" \
    --client "${client}"
done
echo "(e) windowed Predict, concurrency 1000, ${channels} channel(s) ..." >&2
predict 1000 "${duration_s}" --channels "${channels}"

python3 - "${results}" "${devices}" "${workload}" "${channels}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
devices, workload, channels = sys.argv[2], sys.argv[3], int(sys.argv[4])
step = next(r for r in rows if r.get("what") == "step")
forward = next(r for r in rows if r.get("what") == "forward")
pred = {r["concurrency"]: r for r in rows if r.get("target") == "predict"}
def rounds_of(label):
    # (a) and (b) ran in alternating rounds: the median of the rounds' p50, p99 and rate, and
    # the ticks and server means over all of them.
    rs = [r for r in rows if r.get("label") == label]
    med = lambda key: statistics.median(r[key] for r in rs)
    out = dict(rs[0])
    for key in ("p50_us", "p99_us", "ticks_per_s", "p50_server_compute_us"):
        out[key] = med(key)
    n = sum(r["ticks"] for r in rs)
    out["ticks"] = n
    out["rounds"] = len(rs)
    out["round_p50_us"] = [r["p50_us"] for r in rs]
    for key in ("mean_server_compute_us", "mean_server_total_us"):
        out[key] = sum(r[key] * r["ticks"] for r in rs) / max(1, n)
    return out
tick = rounds_of("stream")
echo = rounds_of("echo")
levels = [r for r in rows if r.get("label") == "streams"]
# On the CPU the step is timed in-process; elsewhere the server's own compute_us is the step.
compute = step["p50_us"] if devices == "cpu" else tick["p50_server_compute_us"]
compute_src = "in-process Step p50" if devices == "cpu" else "server compute_us p50"

def line(name, p50, p99, rate, note=""):
    print(f"| {name} | {p50:,.0f} | {p99:,.0f} | {rate} | {note} |")

print(f"\nworkload {workload}, forecastd --devices {devices}\n")
print("| point | p50 us | p99 us | per second | notes |")
print("| --- | ---: | ---: | ---: | --- |")
rounds_note = lambda r: f"{r['ticks']} ticks in {r['rounds']} rounds (p50s {', '.join(f'{v:.0f}' for v in r['round_p50_us'])})"
line("(a) 1 stream, 1 tick in flight", tick["p50_us"], tick["p99_us"], f"{tick['ticks_per_s']:,.0f} ticks",
     f"{rounds_note(tick)}; server total {tick['mean_server_total_us']:.0f} us, compute {tick['mean_server_compute_us']:.0f} us (mean), {tick['p50_server_compute_us']:.0f} us (p50)")
line("(b) gRPC echo stream", echo["p50_us"], echo["p99_us"], f"{echo['ticks_per_s']:,.0f} ticks", rounds_note(echo))
line("(c) Step B=1 in-process", step["p50_us"], step["p99_us"], "-", f"{step['backend']}; Forward B=1 (T-step window) p50 {forward['p50_us']:.0f} us")
p1 = pred.get(1)
if p1:
    line("(d) Predict, concurrency 1", p1["p50_us"], p1["p99_us"], f"{p1['requests_per_s']:,.0f} windows",
         f"server compute {p1['mean_server_compute_us']:.0f} us")
for r in levels:
    line(f"(e) {r['streams']:,} streams", r["p50_us"], r["p99_us"], f"{r['ticks_per_s']:,.0f} ticks",
         f"{r['calls']} gRPC streams on {r.get('channels', 1)} connection(s), {r.get('client', 'blocking')} client; mean batch {r['mean_batch_rows']:.1f}; errors {r['errors']}"
         + (f" ({r['first_error']})" if r.get("first_error") else ""))
p1000 = pred.get(1000)
if p1000:
    line("(e) Predict, concurrency 1,000", p1000["p50_us"], p1000["p99_us"], f"{p1000['requests_per_s']:,.0f} windows",
         f"{channels} connection(s); mean batch {p1000['mean_batch_rows']:.1f}; errors {p1000['errors']}")
print("\n| ratio | value |")
print("| --- | ---: |")
r1 = tick["p50_us"] / (echo["p50_us"] + compute)
print(f"| tick p50 / (echo p50 + step compute [{compute_src}]) | {r1:.2f} |")
if devices == "cpu":
    # The same with the step as the server measured it in (a): its caches are not kept warm by
    # a loop of steps, as the in-process timing's are.
    r1s = tick["p50_us"] / (echo["p50_us"] + tick["p50_server_compute_us"])
    print(f"| tick p50 / (echo p50 + step compute [server compute_us p50]) | {r1s:.2f} |")
if p1:
    print(f"| windowed Predict p50 / tick p50 (concurrency 1) | {p1['p50_us'] / tick['p50_us']:.2f} |")
at1000 = next((r for r in levels if r["streams"] == 1000), None)
if at1000 and p1000 and p1000["requests_per_s"] > 0:
    print(f"| ticks/s at 1,000 streams / windows/s of Predict at concurrency 1,000 | {at1000['ticks_per_s'] / p1000['requests_per_s']:.1f} |")
print("\n" + json.dumps({"rows": rows}))
PY
