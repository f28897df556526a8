#!/usr/bin/env python3
"""forecastd's Predict under closed-loop gRPC load, against the floor of gRPC, in one run.

Starts, on free loopback ports, bench/echo_server (a Forecaster whose Predict computes nothing:
same messages, same sizes) and forecastd twice on copies of the model directory that differ
only in their config.json `batching` section: "off" (max_batch_size 1: one request per forward
pass) and "on" (dynamic batching, --on-* flags). For each concurrency level it runs
build/bench/load_gen against the three in turn, so the three figures of a level are taken
minutes apart at most; after the first level it times the model's forward pass at B=1 with
build/bench/forecast_bench on the same window. It prints a table, the two target checks and
one JSON line with every figure:

  latency   at the lowest level (1): forecastd-on p50 / (echo p50 + forward p50) <= 1.5
  throughput at the highest level (64): forecastd-on req/s / forecastd-off req/s >= 5

Builds nothing: run `make build` first (or pass --build-dir). Every process it starts is
stopped on exit, also on an error or a signal (and dies with it if this script is killed).

Usage:
    load.py                                   levels 1,4,16,64, 2 s each after 0.5 s warm-up
    load.py --concurrency 1,64 --duration-s 5
    load.py --build-dir build-release --record
    load.py --devices cuda:0 --forecastd /tmp/bundle/bin/forecastd --bin-dir /tmp/bundle/bin \
        --model-dir /tmp/seed/lstm_h128_l2 --input-csv window.csv     (a GPU host)

With --devices other than cpu the forward B=1 of the latency check is forecastd-on's own mean
server compute at the lowest level (forecast_bench times the CPU backend only).

Exit status: 0 when every point ran without a failed call (whether or not the targets were
met: see "targets_met" in the JSON line); 1 when a process failed or a call failed; 2 on bad
arguments or missing binaries.
"""

import argparse
import copy
import ctypes
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from bench_report import (REPO, RESULTS_MD, command_line, cpu_model, fmt_us, git_describe,
                          markdown_table, text_table, write_section)

LATENCY_TARGET = 1.5     # on p50 / (echo p50 + forward p50), at most
THROUGHPUT_TARGET = 5.0  # on req/s / off req/s, at least
TARGETS = ("echo", "forecastd-off", "forecastd-on")


class LoadError(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# Processes.
# ----------------------------------------------------------------------------------------------


def _die_with_parent():
    # Runs in the child between fork and exec: SIGKILL it when this script dies, even by
    # SIGKILL, so no server outlives a killed run. (Linux only; a no-op elsewhere.)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def child_setup(cpus=None):
    """The child's set-up: _die_with_parent, then, with `cpus`, its affinity (as taskset -c)."""
    def setup():
        _die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)
    return setup


class Servers:
    """The processes this run started; stop_all() ends each of them, by its own pid."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.procs = []  # (name, Popen, log path)

    def start(self, name, cmd, port_pattern, timeout_s, cpus=None):
        """Starts cmd with stdout and stderr in a log file (on `cpus` when given); returns the
        port it reports."""
        log_path = os.path.join(self.log_dir, name + ".log")
        log = open(log_path, "wb")
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=REPO,
                                    preexec_fn=child_setup(cpus))
        finally:
            log.close()
        self.procs.append((name, proc, log_path))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                m = re.search(port_pattern, f.read())
            if m:
                return int(m.group(1))
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise LoadError(f"{name} did not report its port within {timeout_s} s "
                        f"(exit status {proc.poll()}): {shlex.join(cmd)}\n{self.tail(log_path)}")

    @staticmethod
    def tail(log_path, lines=20):
        try:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self):
        for name, proc, log_path in self.procs:
            if proc.poll() is not None:
                raise LoadError(f"{name} exited with status {proc.returncode}:\n"
                                f"{self.tail(log_path)}")

    def stop_all(self):
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def _raise_on_signal(signum, frame):
    raise SystemExit(128 + signum)


# ----------------------------------------------------------------------------------------------
# Model copies and the window.
# ----------------------------------------------------------------------------------------------


def batching_configs(args):
    """{"forecastd-off": section, "forecastd-on": section} for config.json (proto JSON names)."""
    on = {"maxBatchSize": args.on_max_batch, "maxQueueDelayUs": str(args.on_delay_us)}
    if args.on_preferred:
        on["preferredBatchSize"] = args.on_preferred
    return {"forecastd-off": {"maxBatchSize": 1}, "forecastd-on": on}


def write_repository(root, model_dir, config, batching):
    """root/<name>/ = model_dir's version folders plus config.json with `batching`."""
    cfg = copy.deepcopy(config)
    cfg["batching"] = batching
    dst = os.path.join(root, cfg["name"])
    shutil.copytree(model_dir, dst, ignore=shutil.ignore_patterns("config.json", ".*"))
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return dst


def read_window(csv_path, T, F):
    """The first T rows, first F columns, of a CSV with a header line (what load_gen sends)."""
    rows = []
    with open(csv_path, encoding="utf-8") as f:
        next(f)
        for line in f:
            if line.strip():
                rows.append([float(c) for c in line.strip().split(",")[:F]])
            if len(rows) == T:
                return rows
    raise LoadError(f"{csv_path} holds fewer than {T} rows")


def write_io(path, rows):
    """A safetensors file with tensor `input` (1, T, F) float32, for forecast_bench."""
    T, F = len(rows), len(rows[0])
    data = struct.pack(f"<{T * F}f", *(v for row in rows for v in row))
    header = json.dumps({"__metadata__": {"generator": "bench/load.py"},
                         "input": {"dtype": "F32", "shape": [1, T, F],
                                   "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


# ----------------------------------------------------------------------------------------------
# Measuring.
# ----------------------------------------------------------------------------------------------


def run_json(cmd, timeout_s, what, cpus=None):
    """Runs cmd (on `cpus` when given); returns the JSON objects of its stdout lines."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
                           preexec_fn=child_setup(cpus))
    except subprocess.TimeoutExpired:
        raise LoadError(f"{what} timed out after {timeout_s:.0f} s: {shlex.join(cmd)}")
    if p.returncode != 0:
        raise LoadError(f"{what} exit status {p.returncode}: {shlex.join(cmd)}\n"
                        f"{p.stderr.strip()}")
    try:
        return [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]
    except json.JSONDecodeError:
        raise LoadError(f"{what}: expected JSON lines, got {p.stdout!r}: {shlex.join(cmd)}")


def load_point(args, label, port, concurrency, model, T, F, cpus=None):
    cmd = [args.load_gen, "--target", f"127.0.0.1:{port}", "--label", label, "--model", model,
           "--lookback", str(T), "--features", str(F), "--input-csv", args.input_csv,
           "--concurrency", str(concurrency), "--warmup-s", str(args.warmup_s),
           "--duration-s", str(args.duration_s), "--channels", str(args.channels)]
    if args.client_poll:
        cmd.append("--poll")
    timeout = 60 + 3 * (args.warmup_s + args.duration_s)
    return run_json(cmd, timeout, "load_gen", cpus)[-1]


def forward_b1(args, model_dir, io_path, out_dir, cpus=None):
    """forecast_bench at B=1 (on `cpus` when given): a probe, then about --compute-s seconds of
    calls."""
    def cmd(warmup, iters):
        return [args.forecast_bench, "--model", model_dir, "--version", str(args.version),
                "--io", io_path, "--batch", "1", "--warmup", str(warmup), "--iters", str(iters),
                "--backend", "dnnl", "--output", os.path.join(out_dir, "forward.safetensors")]
    probe = run_json(cmd(5, 20), 300, "forecast_bench", cpus)[-1]
    iters = int(min(100000, max(100, args.compute_s * 1e6 / max(probe["median_us"], 1.0))))
    c = cmd(50, iters)
    result = run_json(c, 300 + 10 * args.compute_s, "forecast_bench", cpus)[-1]
    result["command"] = shlex.join(c)
    return result


def median_point(runs):
    """One point from the same point's runs: each number the median over the runs (with one
    run, that run)."""
    out = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = statistics.median_low(r[k] for r in runs) if isinstance(v, int) else \
                statistics.median(r[k] for r in runs)
    if len(runs) > 1:
        out["rounds"] = len(runs)
    return out


# ----------------------------------------------------------------------------------------------
# Reporting.
# ----------------------------------------------------------------------------------------------


def checks(points, forward, levels):
    """The two target figures, from the lowest and the highest level measured."""
    by = {(p["concurrency"], p["target"]): p for p in points}
    lo, hi = min(levels), max(levels)
    echo, on_lo = by[(lo, "echo")], by[(lo, "forecastd-on")]
    floor = echo["p50_us"] + forward["median_us"]
    latency = {"concurrency": lo, "on_p50_us": on_lo["p50_us"], "echo_p50_us": echo["p50_us"],
               "forward_b1_p50_us": forward["median_us"], "floor_us": floor,
               "ratio": on_lo["p50_us"] / floor, "target_max": LATENCY_TARGET}
    latency["met"] = latency["ratio"] <= LATENCY_TARGET
    # Where forecastd-on's time goes at the lowest level, by the server's own Timing (means):
    # queue and compute, the rest of the server's time (admission: parsing and checking the
    # request; completion: filling the reply), and outside it (gRPC both ways, the client).
    total = on_lo.get("mean_server_total_us", 0.0)
    latency["stages_us"] = {
        "queue": on_lo["mean_server_queue_us"], "compute": on_lo["mean_server_compute_us"],
        "admission_and_completion": max(0.0, total - on_lo["mean_server_queue_us"]
                                        - on_lo["mean_server_compute_us"]),
        "server_total": total, "outside_server_p50": on_lo["p50_us"] - total,
        "echo_p50": echo["p50_us"]}
    off_hi, on_hi = by[(hi, "forecastd-off")], by[(hi, "forecastd-on")]
    throughput = {"concurrency": hi, "on_rps": on_hi["requests_per_s"],
                  "off_rps": off_hi["requests_per_s"],
                  "ratio": on_hi["requests_per_s"] / max(off_hi["requests_per_s"], 1e-9),
                  "target_min": THROUGHPUT_TARGET,
                  # forecastd-on cannot answer faster than the echo: the best on/off ratio
                  # batching could give on this machine, were the forward pass free.
                  "echo_bound": by[(hi, "echo")]["requests_per_s"] /
                  max(off_hi["requests_per_s"], 1e-9)}
    throughput["met"] = throughput["ratio"] >= THROUGHPUT_TARGET
    return latency, throughput


def table(points, forward, levels):
    head = ["concurrency", "target", "p50 us", "p90 us", "p99 us", "req/s", "batch rows",
            "server compute us", "client CPU", "errors"]
    body = []
    for c in levels:
        for p in (p for p in points if p["concurrency"] == c):
            server = p["target"] != "echo"
            body.append([str(c), p["target"], fmt_us(p["p50_us"]), fmt_us(p["p90_us"]),
                         fmt_us(p["p99_us"]), f"{p['requests_per_s']:,.0f}",
                         f"{p['mean_batch_rows']:.1f}" if server else "-",
                         fmt_us(p["mean_server_compute_us"]) if server else "-",
                         f"{p['client_cpu_cores']:.2f}", str(p["errors"])])
        if c == min(levels):
            echo = next(p for p in points if p["concurrency"] == c and p["target"] == "echo")
            floor = echo["p50_us"] + forward["median_us"]
            body.append([str(c), "echo + forward B=1", fmt_us(floor), "-", "-", "-", "1",
                         fmt_us(forward["median_us"]), "-", "-"])
    return head, body


def check_lines(latency, throughput):
    mark = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    return [
        f"latency    (concurrency {latency['concurrency']}): forecastd-on p50 "
        f"{fmt_us(latency['on_p50_us'])} us / (echo p50 {fmt_us(latency['echo_p50_us'])} + "
        f"forward B=1 p50 {fmt_us(latency['forward_b1_p50_us'])}) us = {latency['ratio']:.2f}  "
        f"(target <= {LATENCY_TARGET}: {mark(latency['met'])})",
        "stages    (concurrency {c}, forecastd-on, server's own timing, means): queue {q} + "
        "compute {k} + admission and completion {a} = server {t} us; outside the server "
        "(gRPC, client) {o} us at p50, against the echo's whole p50 {e} us".format(
            c=latency["concurrency"], **{k2: fmt_us(v) for k2, v in zip(
                "qkatoe", (latency["stages_us"][n] for n in (
                    "queue", "compute", "admission_and_completion", "server_total",
                    "outside_server_p50", "echo_p50")))}),
        f"throughput (concurrency {throughput['concurrency']}): forecastd-on "
        f"{throughput['on_rps']:,.0f} req/s / forecastd-off {throughput['off_rps']:,.0f} req/s "
        f"= {throughput['ratio']:.2f}  (target >= {THROUGHPUT_TARGET}: "
        f"{mark(throughput['met'])}; the echo's req/s / forecastd-off's bounds it here: "
        f"{throughput['echo_bound']:.2f})",
    ]


def record(env, head, body, lines, path):
    """Replaces the section with the same date, host and command in path, or appends one."""
    key = f"{env['date']} | {env['cpu']} | {env['cores']} cores | {env['command']}"
    begin = f"<!-- load.py section: {key} -->"
    end = "<!-- load.py section end -->"
    on = json.dumps(env["batching"]["forecastd-on"], separators=(",", ":"))
    section = "\n".join([
        begin,
        f"## {env['date']}: Predict under closed-loop load, {env['cpu']}, {env['cores']} cores",
        "",
        "Written by `bench/load.sh --record`: latency and requests/s of forecastd's Predict "
        f"({env['model']}, one (1, {env['T']}, {env['F']}) window per request) against "
        "bench/echo_server, the same messages with no computing; see bench/README.md.",
        "",
        f"- forecastd `{env['git']}`; batching off `{{\"maxBatchSize\":1}}`, on `{on}`",
        f"- {env['warmup_s']} s warm-up + {env['duration_s']} s per point, "
        f"median of {env['rounds']} round(s), "
        f"{env['channels']} gRPC channel(s), the client {env['client']}; "
        f"forecastd --devices {env['devices']} "
        f"--cpu-workers {env['cpu_workers']}{env['forecastd_args']}, "
        f"OMP_NUM_THREADS {env['omp_num_threads']}; load average before the run "
        f"{env['loadavg']}",
        f"- command: `{env['command']}`",
        "",
        markdown_table(head, body),
        "",
    ] + [f"- {line}" for line in lines] + [end])
    write_section(path, begin, end, section)


# ----------------------------------------------------------------------------------------------


def parse_levels(text):
    try:
        levels = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers such as 1,4,16,64")
    if not levels or any(c < 1 for c in levels):
        raise argparse.ArgumentTypeError(f"{text!r}: levels must be >= 1")
    return levels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build-dir", default="build",
                    help="where `make build` put the binaries (default: %(default)s)")
    ap.add_argument("--model-dir", default="models/demo_lstm",
                    help="the model served and timed (default: %(default)s)")
    ap.add_argument("--version", type=int, default=1, help="its version folder (default: 1)")
    ap.add_argument("--input-csv", default="models/sample_input.csv",
                    help="the window sent: first T rows, first F columns (default: %(default)s)")
    ap.add_argument("--concurrency", type=parse_levels, default=[1, 4, 16, 64],
                    help="closed-loop clients per point, comma-separated (default: 1,4,16,64)")
    ap.add_argument("--duration-s", type=float, default=2.0, help="measured s per point (2)")
    ap.add_argument("--warmup-s", type=float, default=0.5, help="untimed s per point (0.5)")
    ap.add_argument("--channels", type=int, default=1, help="load_gen gRPC channels (1)")
    ap.add_argument("--client-poll", action="store_true",
                    help="load_gen --poll: the client polls its completion queue without "
                         "sleeping (takes a core), so an answer's latency does not include "
                         "waking the client's thread")
    ap.add_argument("--rounds", type=int, default=1,
                    help="sweeps over every level and target; each figure reported is its "
                         "median over the rounds (default: 1)")
    ap.add_argument("--compute-s", type=float, default=1.0,
                    help="seconds of forecast_bench B=1 calls (default: 1)")
    ap.add_argument("--on-max-batch", type=int, default=64,
                    help="batching on: max_batch_size (default: 64)")
    ap.add_argument("--on-delay-us", type=int, default=0,
                    help="batching on: max_queue_delay_us (default: 0, see bench/README.md)")
    ap.add_argument("--on-preferred", type=lambda s: [int(x) for x in s.split(",") if x],
                    default=[],
                    help="batching on: preferred_batch_size, comma-separated (default: none)")
    ap.add_argument("--devices", default="cpu",
                    help="forecastd --devices (default cpu; cuda:0 on a GPU host, where the "
                         "forward B=1 is forecastd-on's own server compute)")
    ap.add_argument("--forecastd", default="",
                    help="the forecastd binary (default: BUILD_DIR/server/forecastd)")
    ap.add_argument("--bin-dir", default="",
                    help="where load_gen, echo_server and forecast_bench are "
                         "(default: BUILD_DIR/bench)")
    ap.add_argument("--cpu-workers", type=int, default=0,
                    help="forecastd --cpu-workers (default 0: one per core)")
    ap.add_argument("--forecastd-arg", action="append", default=[], metavar="ARG",
                    help="one more forecastd argument, e.g. --forecastd-arg=--cpu-helpers=0 "
                         "(repeatable)")
    ap.add_argument("--omp-threads", type=int, default=0,
                    help="OMP_NUM_THREADS for forecastd and forecast_bench alike (default 0: "
                         "leave the environment's)")
    ap.add_argument("--start-timeout-s", type=float, default=60,
                    help="how long a server may take to report its port (default: 60)")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the model copies and logs under DIR and keep them")
    ap.add_argument("--record", action="store_true",
                    help=f"update {os.path.relpath(RESULTS_MD, REPO)} with this run")
    ap.add_argument("--results", default=RESULTS_MD, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.duration_s <= 0 or args.warmup_s < 0 or args.compute_s <= 0:
        ap.error("--duration-s and --compute-s must be > 0, --warmup-s >= 0")
    if args.channels < 1 or args.rounds < 1:
        ap.error("--channels and --rounds must be >= 1")
    if args.on_max_batch < 1 or args.on_delay_us < 0 or any(
            not 1 <= b <= args.on_max_batch for b in args.on_preferred):
        ap.error("--on-max-batch >= 1, --on-delay-us >= 0, --on-preferred in [1, max batch]")

    os.chdir(REPO)
    build = args.build_dir
    bin_dir = args.bin_dir or os.path.join(build, "bench")
    args.forecastd = args.forecastd or os.path.join(build, "server", "forecastd")
    args.load_gen = os.path.join(bin_dir, "load_gen")
    args.echo_server = os.path.join(bin_dir, "echo_server")
    args.forecast_bench = os.path.join(bin_dir, "forecast_bench")
    needed = [args.forecastd, args.load_gen, args.echo_server]
    if args.devices == "cpu":
        needed.append(args.forecast_bench)
    missing = [b for b in needed if not os.access(b, os.X_OK)]
    if missing:
        print(f"error: missing {', '.join(missing)}; run `make build` first (or "
              f"`cmake --build {build} --target forecastd load_gen echo_server forecast_bench`, "
              f"or pass --build-dir)", file=sys.stderr)
        return 2
    try:
        with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        model, T, F = config["name"], int(config["lookback"]), len(config["featureNames"])
        P, targets = int(config["horizon"]), config["targetNames"]
        window = read_window(args.input_csv, T, F)
    except (OSError, ValueError, KeyError, LoadError) as e:
        print(f"error: {args.model_dir} / {args.input_csv}: {e}", file=sys.stderr)
        return 2

    configs = batching_configs(args)
    env = {"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "devices": args.devices,
           "cores": os.cpu_count(), "git": git_describe(), "command": command_line(),
           "model": model, "T": T, "F": F, "batching": configs, "warmup_s": args.warmup_s,
           "duration_s": args.duration_s, "channels": args.channels,
           "client": "polling (load_gen --poll)" if args.client_poll else "on gRPC's callbacks",
           "cpu_workers": args.cpu_workers, "rounds": args.rounds,
           "forecastd_args": "".join(f" {a}" for a in args.forecastd_arg),
           "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    if args.omp_threads > 0:
        os.environ["OMP_NUM_THREADS"] = str(args.omp_threads)  # inherited by every child
    env["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"host: {env['cpu']}, {env['cores']} cores, load average {env['loadavg']}; "
          f"forecastd {env['git']}; {model} (1, {T}, {F}) -> ({P}, {len(targets)}); "
          f"OMP_NUM_THREADS {env['omp_num_threads']}")
    for name, section in configs.items():
        print(f"{name}: batching {json.dumps(section, separators=(',', ':'))}")
    signal.signal(signal.SIGTERM, _raise_on_signal)
    root = args.keep or tempfile.mkdtemp(prefix="forecastd-load-")
    os.makedirs(root, exist_ok=True)
    servers = Servers(root)
    points, failures, forward = [], [], None
    try:
        ports = {"echo": servers.start(
            "echo", [args.echo_server, "--address", "127.0.0.1:0", "--horizon", str(P),
                     "--target-names", ",".join(targets)],
            r"listening on port (\d+)", args.start_timeout_s)}
        for name, section in configs.items():
            repo = os.path.join(root, name)
            os.makedirs(repo)
            write_repository(repo, args.model_dir, config, section)
            ports[name] = servers.start(
                name, [args.forecastd, "--model-repository", repo, "--load-model", model,
                       "--devices", args.devices, "--grpc-address", "127.0.0.1:0",
                       "--metrics-address", "127.0.0.1:0", "--http-address", "", "--cpu-workers",
                       str(args.cpu_workers), "--log-level", "info", *args.forecastd_arg],
                r"serving gRPC on \S+ \(port (\d+)\)", args.start_timeout_s)
        io_path = os.path.join(root, "window.io.safetensors")
        write_io(io_path, window)

        raw_points, forwards = [], []
        for r in range(args.rounds):
            tag = f"round {r + 1}/{args.rounds} " if args.rounds > 1 else ""
            for i, c in enumerate(args.concurrency):
                for name in TARGETS:
                    servers.check_alive()
                    p = load_point(args, name, ports[name], c, model, T, F)
                    raw_points.append(p)
                    print(f"  {tag}c={c:<3} {name:<14} p50 {fmt_us(p['p50_us']):>7} us  p99 "
                          f"{fmt_us(p['p99_us']):>7} us  {p['requests_per_s']:>9,.0f} req/s  "
                          f"batch {p['mean_batch_rows']:.1f}"
                          + (f"  ERRORS {p['errors']}: {p.get('first_error', '')}"
                             if p["errors"] else ""), flush=True)
                    if p["errors"] or p["requests"] == 0:
                        failures.append(f"c={c} {name}: {p['errors']} failed calls, "
                                        f"{p['requests']} answered ({p.get('first_error', '')})")
                if i == 0 and args.devices == "cpu":
                    fw = forward_b1(args, os.path.join(root, "forecastd-off", model), io_path,
                                    root)
                    forwards.append(fw)
                    print(f"  {tag}forward B=1 (forecast_bench, {fw['iters']} calls): p50 "
                          f"{fmt_us(fw['median_us'])} us, p90 {fmt_us(fw['p90_us'])} us")
                elif i == 0:
                    # On a GPU the forward B=1 is what the server measured for forecastd-on's
                    # requests at this level (forecast_bench runs on the CPU only).
                    on = raw_points[-1]
                    fw = {"median_us": on["mean_server_compute_us"],
                          "p90_us": on["mean_server_compute_us"], "iters": on["requests"],
                          "command": f"forecastd --devices {args.devices}: mean server "
                                     f"compute_us of forecastd-on at concurrency {c}"}
                    forwards.append(fw)
                    print(f"  {tag}forward B=1 (forecastd-on's server compute, mean): "
                          f"{fmt_us(fw['median_us'])} us")
        points = [median_point([p for p in raw_points
                                if p["concurrency"] == c and p["target"] == name])
                  for c in args.concurrency for name in TARGETS]
        forward = median_point(forwards)
    except LoadError as e:
        failures.append(str(e))
    finally:
        servers.stop_all()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    latency = throughput = None
    if forward and len(points) == len(TARGETS) * len(args.concurrency):
        head, body = table(points, forward, args.concurrency)
        latency, throughput = checks(points, forward, args.concurrency)
        lines = check_lines(latency, throughput)
        print()
        print(text_table(head, body))
        print()
        print("\n".join(lines))
    if failures:
        bar = "!" * 100
        print(f"\n{bar}\nLOAD RUN FAILED:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        print(bar, file=sys.stderr)
    if args.record and failures:
        print("not recorded: the run failed", file=sys.stderr)
    elif args.record and latency:
        record(env, head, body, lines, args.results)
        print(f"recorded in {os.path.relpath(args.results, REPO)}")
    summary = dict(env, ok=not failures, forward_b1=forward, points=points, latency=latency,
                   throughput=throughput,
                   targets_met=bool(latency and latency["met"] and throughput["met"]))
    print(json.dumps(summary, separators=(",", ":")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
