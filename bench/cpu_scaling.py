#!/usr/bin/env python3
"""How forecastd's Predict throughput on the CPU grows with the cores it is given, in one run.

For each count K of --cores, starts forecastd pinned to the first K CPUs of this process's
affinity mask (as `taskset -c` would; forecastd then plans its workers from those K: one per
physical core) with dynamic batching (load.py's "on" section), and drives it with
build/bench/load_gen at --concurrency requests in flight, load_gen pinned to the last
--client-cpus CPUs of the mask, which no server count uses, so the client never takes a core
from the server. Then the server on every CPU of the mask with load_gen sharing them (the row
"all, shared"). Before the servers it times the model's forward pass at B=1 with
build/bench/forecast_bench on one CPU.

Per row: req/s, req/s per core, p50 and p99, mean rows per batch, mean server compute per
batch, and two efficiencies:

  scaling     req/s(K) / (K x req/s(1))         the server against itself on one core
  vs compute  req/s(K) / (K x 1e6 / forward_us) against one core's bare B=1 forward rate

Target: at the largest K, `vs compute` at least 0.6 (req/s >= 0.6 x cores x one core's B=1
rate). Builds nothing; every process it starts is stopped on exit.

Usage:
    cpu_scaling.py --cores 1,4,8,12 --client-cpus 4        a 16-CPU host
    cpu_scaling.py --forecastd /tmp/b/bin/forecastd --bin-dir /tmp/b/bin \\
        --model-dir /tmp/seed/lstm_h128_l2 --input-csv window.csv --cores 1,2,4,8,12

Exit status: 0 when every point ran without a failed call (whether or not the target was met:
"target_met" in the JSON line); 1 when a process or a call failed; 2 on bad arguments.
"""

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile

import load
from bench_report import command_line, cpu_model, fmt_us, git_describe, text_table

TARGET = 0.6  # req/s(K) / (K x one core's B=1 forward rate), at least, at the largest K


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build", help="where the binaries are (build)")
    ap.add_argument("--forecastd", default="", help="the daemon (default: BUILD/server/forecastd)")
    ap.add_argument("--bin-dir", default="",
                    help="load_gen and forecast_bench (default: BUILD/bench)")
    ap.add_argument("--model-dir", default="models/demo_lstm",
                    help="a model directory: config.json + version folders (models/demo_lstm)")
    ap.add_argument("--version", type=int, default=1, help="its version folder (1)")
    ap.add_argument("--input-csv", default="models/sample_input.csv",
                    help="the window load_gen sends (models/sample_input.csv)")
    ap.add_argument("--cores", type=load.parse_levels, default=None,
                    help="server CPU counts, comma-separated (default: 1 and every CPU the "
                         "client leaves)")
    ap.add_argument("--client-cpus", type=int, default=1,
                    help="CPUs at the end of the mask kept for load_gen (1)")
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight (64)")
    ap.add_argument("--channels", type=int, default=4, help="load_gen gRPC channels (4)")
    ap.add_argument("--duration-s", type=float, default=3.0, help="measured s per point (3)")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="untimed s per point (1)")
    ap.add_argument("--compute-s", type=float, default=1.0,
                    help="s of B=1 forwards for the one-core rate (1)")
    ap.add_argument("--on-max-batch", type=int, default=64, help="max_batch_size (64)")
    ap.add_argument("--on-delay-us", type=int, default=0, help="max_queue_delay_us (0)")
    ap.add_argument("--cpu-pinning", default="auto", help="forecastd's --cpu-pinning (auto)")
    ap.add_argument("--cpu-workers", type=int, default=0,
                    help="forecastd's --cpu-workers (0: its default, one per physical core)")
    ap.add_argument("--no-shared", action="store_true",
                    help="skip the row of the server on every CPU with load_gen beside it")
    ap.add_argument("--start-timeout-s", type=float, default=60, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.on_preferred, args.client_poll = [], False

    mask = sorted(os.sched_getaffinity(0))
    if args.cores is None:
        args.cores = sorted({1, max(1, len(mask) - args.client_cpus)})
    if args.client_cpus < 1 or any(k < 1 for k in args.cores) or \
            max(args.cores) + args.client_cpus > len(mask):
        ap.error(f"--cores up to {len(mask) - max(args.client_cpus, 1)} with --client-cpus "
                 f">= 1 on this mask of {len(mask)} CPUs")
    os.chdir(load.REPO)
    bin_dir = args.bin_dir or os.path.join(args.build_dir, "bench")
    args.forecastd = args.forecastd or os.path.join(args.build_dir, "server", "forecastd")
    args.load_gen = os.path.join(bin_dir, "load_gen")
    args.forecast_bench = os.path.join(bin_dir, "forecast_bench")
    missing = [b for b in (args.forecastd, args.load_gen, args.forecast_bench)
               if not os.access(b, os.X_OK)]
    if missing:
        print(f"error: missing {', '.join(missing)}; run `make build` first", file=sys.stderr)
        return 2
    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    model, T, F = config["name"], int(config["lookback"]), len(config["featureNames"])
    window = load.read_window(args.input_csv, T, F)
    client = mask[-args.client_cpus:]
    env = {"cpu": cpu_model(), "cpus": len(mask), "git": git_describe(),
           "command": command_line(), "model": model, "concurrency": args.concurrency,
           "cpu_workers": args.cpu_workers, "cpu_pinning": args.cpu_pinning,
           "client_cpus": client, "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    print(f"host: {env['cpu']}, {len(mask)} CPUs, load average {env['loadavg']}; forecastd "
          f"{env['git']}; {model}; load_gen on CPUs {client}", flush=True)

    signal.signal(signal.SIGTERM, load._raise_on_signal)
    root = tempfile.mkdtemp(prefix="forecastd-scaling-")
    rows, failures, forward = [], [], None
    try:
        repo = os.path.join(root, "repo")
        os.makedirs(repo)
        on = load.batching_configs(args)["forecastd-on"]
        model_dir = load.write_repository(repo, args.model_dir, config, on)
        io_path = os.path.join(root, "window.io.safetensors")
        load.write_io(io_path, window)
        forward = load.forward_b1(args, model_dir, io_path, root, cpus=mask[:1])
        print(f"forward B=1 on one CPU (forecast_bench, {forward['iters']} calls): p50 "
              f"{fmt_us(forward['median_us'])} us", flush=True)
        plans = [(str(k), mask[:k], client) for k in args.cores]
        if not args.no_shared:
            plans.append(("all, shared", mask, None))
        for label, cpus, client_cpus in plans:
            servers = load.Servers(root)
            try:
                port = servers.start(
                    f"forecastd-{len(cpus)}",
                    [args.forecastd, "--model-repository", repo, "--load-model", model,
                     "--devices", "cpu", "--grpc-address", "127.0.0.1:0",
                     "--metrics-address", "127.0.0.1:0", "--http-address", "",
                     "--cpu-pinning", args.cpu_pinning, "--cpu-workers", str(args.cpu_workers),
                     "--log-level", "info"],
                    r"serving gRPC on \S+ \(port (\d+)\)", args.start_timeout_s, cpus=cpus)
                p = load.load_point(args, f"cores={label}", port, args.concurrency, model, T, F,
                                    cpus=client_cpus)
                servers.check_alive()
            finally:
                servers.stop_all()
            with open(os.path.join(root, f"forecastd-{len(cpus)}.log"), encoding="utf-8",
                      errors="replace") as f:
                plan = re.search(r"cpu: (\d+ CPUs? on .*)", f.read())
            p["cores"], p["label"] = len(cpus), label
            p["server_plan"] = plan.group(1).strip() if plan else ""
            rows.append(p)
            print(f"  cores {label:<11} {p['requests_per_s']:>9,.0f} req/s  p50 "
                  f"{fmt_us(p['p50_us']):>7} us  p99 {fmt_us(p['p99_us']):>7} us  batch "
                  f"{p['mean_batch_rows']:.1f}"
                  + (f"  ERRORS {p['errors']}: {p.get('first_error', '')}" if p["errors"]
                     else "") + f"\n    ({p['server_plan']})", flush=True)
            if p["errors"] or p["requests"] == 0:
                failures.append(f"cores {label}: {p['errors']} failed calls")
    except load.LoadError as e:
        failures.append(str(e))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    one = next((r for r in rows if r["cores"] == 1 and r["label"] == "1"), None)
    compute_rate = 1e6 / forward["median_us"] if forward else None
    for r in rows:
        r["per_core"] = r["requests_per_s"] / r["cores"]
        r["scaling"] = r["per_core"] / one["requests_per_s"] if one else None
        r["vs_compute"] = r["per_core"] / compute_rate if compute_rate else None
    head = ["server cores", "req/s", "req/s a core", "p50 us", "p99 us", "rows a batch",
            "compute us a batch", "scaling", "vs compute"]
    body = [[r["label"], f"{r['requests_per_s']:,.0f}", f"{r['per_core']:,.0f}",
             fmt_us(r["p50_us"]), fmt_us(r["p99_us"]), f"{r['mean_batch_rows']:.1f}",
             fmt_us(r.get("mean_server_compute_us", 0)),
             f"{r['scaling']:.2f}" if r["scaling"] is not None else "-",
             f"{r['vs_compute']:.2f}" if r["vs_compute"] is not None else "-"] for r in rows]
    print()
    print(text_table(head, body))
    pinned = [r for r in rows if r["label"] != "all, shared"]
    largest = max(pinned, key=lambda r: r["cores"]) if pinned else None
    met = bool(largest and largest["vs_compute"] is not None and largest["vs_compute"] >= TARGET)
    if largest and forward:
        print(f"\nat {largest['cores']} cores: {largest['requests_per_s']:,.0f} req/s against "
              f"{TARGET} x {largest['cores']} x {compute_rate:,.0f} (one core's B=1 rate) = "
              f"{TARGET * largest['cores'] * compute_rate:,.0f}: "
              f"{'met' if met else 'NOT met'} ({largest['vs_compute']:.2f})")
    if failures:
        print("\nSCALING RUN FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
    print(json.dumps(dict(env, ok=not failures, forward_b1=forward, rows=rows, target_met=met),
                     separators=(",", ":")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
