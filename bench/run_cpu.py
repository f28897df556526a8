#!/usr/bin/env python3
"""forecastd vs PyTorch on the CPU, side by side in one run.

For each (workload, batch) pair this script writes a model with seeded random weights
(bench/configs/<workload>.json plus model.safetensors, through scripts/forecastd_torch.py) and an
input batch into a temporary directory, times forecastd's `forecast_bench --backend dnnl` on it,
times the same model in PyTorch (eval mode, torch.inference_mode(), same threads, warm-up and
iterations), checks that both forecasts agree, and prints a table whose ratio column is
PyTorch median / forecastd median (> 1: forecastd is faster).

Run it with a PyPI torch (MKL + oneDNN), never Debian's python3-torch (reference BLAS, 5-15x
slower, which would flatter forecastd); bench/run_cpu.sh picks the interpreter.

Usage:
    run_cpu.py                                    the default pairs
    run_cpu.py --case lstm_h256_l2:1,32 transformer_large:1
    run_cpu.py --iters 200 --warmup 20            fixed counts instead of the ~2 s probe
    run_cpu.py --peer-only                        PyTorch only (no forecast_bench needed)
    run_cpu.py --dry-run                          write the files, print the commands, time nothing
    run_cpu.py --record                           also update bench/RESULTS.md

Exit status: 0 when every pair ran and matched; 1 when forecast_bench failed or a forecast
differed from PyTorch's by more than --tolerance; 2 on bad arguments.
"""

import argparse
import contextlib
import copy
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_report import (  # noqa: E402  (the script's folder is on sys.path)
    command_line, cpu_model, fmt_us, git_describe, markdown_table, text_table, write_section)
from forecastd_torch import (  # noqa: E402  (needs the sys.path entry above)
    Spec, build_module, make_input, max_rel_err, randomize, read_safetensors, run_inference,
    run_module, write_model, write_safetensors)

CONFIGS = os.path.join(HERE, "configs")
DEFAULT_CASES = ["lstm_h128_l2:1,32", "lstm_h128_l2_bi:1,32", "transformer_small:1,32"]
RESULTS_MD = os.path.join(HERE, "RESULTS.md")


def available_workloads():
    return sorted(f[:-5] for f in os.listdir(CONFIGS) if f.endswith(".json"))


def parse_cases(items, ap):
    """["name:1,32", ...] -> [(name, 1), (name, 32), ...] in the order given."""
    known = available_workloads()
    pairs = []
    for item in items:
        name, sep, batches = item.partition(":")
        if name not in known:
            ap.error(f"unknown workload {name!r}; bench/configs has {known}")
        if not sep:
            ap.error(f"{item!r}: expected WORKLOAD:B[,B...], e.g. {name}:1,32")
        try:
            bs = [int(b) for b in batches.split(",")]
        except ValueError:
            ap.error(f"{item!r}: batch sizes must be integers")
        if any(b < 1 for b in bs):
            ap.error(f"{item!r}: batch sizes must be >= 1")
        pairs += [(name, b) for b in bs]
    return pairs


def workload_seed(name, base):
    return base + zlib.crc32(name.encode("utf-8")) % 100000


# ----------------------------------------------------------------------------------------------
# Timing.
# ----------------------------------------------------------------------------------------------


def summarize_us(samples_ns):
    """Figures in microseconds, with the same names forecast_bench prints. p90 is the
    nearest-rank 90th percentile."""
    s = sorted(samples_ns)
    p90 = s[max(0, math.ceil(0.9 * len(s)) - 1)]
    return {"median_us": statistics.median(s) / 1e3, "p90_us": p90 / 1e3,
            "mean_us": statistics.fmean(s) / 1e3, "min_us": s[0] / 1e3}


def precision_context(bf16):
    """PyTorch's bf16 on the CPU, torch.autocast (its oneDNN bf16 kernels), or plain fp32."""
    if bf16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def time_torch(module, x, warmup, iters, bf16=False):
    """Times module(x) one call at a time with time.perf_counter_ns; returns the summary."""
    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        torch.backends.mha.set_fastpath_enabled(True)
    module.eval()
    samples = []
    with torch.inference_mode(), precision_context(bf16):
        for _ in range(warmup):
            module(x)
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            module(x)
            samples.append(time.perf_counter_ns() - t0)
    return summarize_us(samples)


class BenchError(Exception):
    pass


def train_step_fn(model, opt, x_host, y_host, device, bf16):
    """One PyTorch training step as a closure: the batch copied to `device` (non-blocking from
    pinned memory on a GPU), the forward under torch.autocast(bfloat16) with bf16, MSE, the
    backward and opt's step; returns the loss (loss.item(), which waits for the device)."""
    cuda = device.type == "cuda"

    def step():
        xb = x_host.to(device, non_blocking=cuda)
        yb = y_host.to(device, non_blocking=cuda)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.mse_loss(model(xb).float(), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def torch_train_steps(m, w, batch, device, warmup, iters, bf16=False):
    """Summary of PyTorch training steps of `m`, a copy of w's module already on `device`: Adam
    at lr 1e-5, MSE against targets drawn with the inputs from N(0, 1) (seed w.seed + batch),
    each step timed alone on the host clock after `warmup` untimed ones; the batch is copied to
    the device on every step (from pinned memory on a GPU), as a training loop does; under
    torch.autocast(bfloat16) with bf16."""
    m.train()
    gen = torch.Generator().manual_seed(w.seed + batch)
    cuda = device.type == "cuda"
    x_host = torch.randn(batch, w.spec.T, w.spec.F, generator=gen)
    with torch.no_grad():
        shape = m(x_host[:1].to(device)).shape[1:]
    y_host = torch.randn(batch, *shape, generator=gen)
    if cuda:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
    opt = torch.optim.Adam(m.parameters(), lr=1e-5)
    step = train_step_fn(m, opt, x_host, y_host, device, bf16)
    for _ in range(warmup):
        step()
    samples_ns = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        step()
        samples_ns.append(time.perf_counter_ns() - t0)
    del opt
    return summarize_us(samples_ns)


def bench_train_step(args, w):
    """A training-step row for workload w at B = --train-batch: forecast_bench --train (the CPU
    TrainingEngine on oneDNN: Adam, MSE) against torch_train_steps on the CPU, same threads."""
    batch = args.train_batch
    row = {"workload": w.name + " (train step)", "batch": batch, "warmup": args.warmup}
    base = [args.forecast_bench, "--train", "--model", w.model_dir, "--version", "1", "--batch",
            str(batch), "--seed", str(w.seed)]
    probe = run_forecast_bench(args, base + ["--warmup", "1", "--iters", "3"])["median_us"]
    iters = choose_iters(args, [probe, probe])
    row["iters"] = iters
    cmd = base + ["--warmup", str(args.warmup), "--iters", str(iters)]
    fd = run_forecast_bench(args, cmd)
    row["forecastd"] = {k: fd[k] for k in ("median_us", "p90_us", "mean_us", "min_us")}
    row["forecastd_cmd"] = shlex.join(cmd)
    row["pytorch"] = torch_train_steps(copy.deepcopy(w.module), w, batch, torch.device("cpu"),
                                       args.warmup, iters)
    row["ratio"] = row["pytorch"]["median_us"] / row["forecastd"]["median_us"]
    return row


def forecast_bench_cmd(args, model_dir, io_path, out_path, batch, warmup, iters):
    backend = "dnnl-bf16" if args.bf16 else args.backend
    return [args.forecast_bench, "--model", model_dir, "--version", "1", "--io", io_path,
            "--batch", str(batch), "--warmup", str(warmup), "--iters", str(iters),
            "--backend", backend, "--output", out_path]


def run_forecast_bench(args, cmd):
    """Runs forecast_bench; returns its JSON line as a dict."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {args.timeout_s} s: {shlex.join(cmd)}")
    except OSError as e:
        raise BenchError(f"cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        raise BenchError(f"exit status {p.returncode}: {shlex.join(cmd)}\n{p.stderr.strip()}")
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    try:
        result = json.loads(lines[-1])
        for k in ("median_us", "p90_us", "mean_us", "min_us"):
            result[k] = float(result[k])
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise BenchError(f"expected one JSON line with median_us, p90_us, mean_us, min_us on "
                         f"stdout, got {p.stdout!r}: {shlex.join(cmd)}")
    return result


# ----------------------------------------------------------------------------------------------
# One workload: files, then each batch size.
# ----------------------------------------------------------------------------------------------


class Workload:
    """A model with seeded random weights, written in forecastd's layout under root."""

    def __init__(self, name, max_batch, root, seed):
        self.name = name
        with open(os.path.join(CONFIGS, name + ".json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self.spec = Spec(cfg)
        self.module = build_module(self.spec)
        self.seed = workload_seed(name, seed)
        randomize(self.module, self.seed)
        self.module.eval()
        self.x = make_input(self.spec, self.module, self.seed, max_batch)  # (Bmax, T, F) raw
        self.model_dir = os.path.join(root, name)
        self.io_path = os.path.join(root, name + ".io.safetensors")
        meta = {"format": "pt", "generator": "bench/run_cpu.py", "seed": self.seed}
        write_model(self.model_dir, cfg, self.module, version=1, metadata=meta)
        # The bench's own config.json is the one served, byte for byte.
        shutil.copyfile(os.path.join(CONFIGS, name + ".json"),
                        os.path.join(self.model_dir, "config.json"))
        write_safetensors(self.io_path, [("input", self.x.numpy())], meta)
        self.root = root

    def out_path(self, batch, tag=""):
        return os.path.join(self.root, f"{self.name}.b{batch}{tag}.out.safetensors")


def choose_iters(args, probes_us):
    """--iters, or enough that the slower side runs ~--target-s, at least --min-iters."""
    if args.iters:
        return args.iters
    slowest = max(probes_us)
    return int(min(args.max_iters, max(args.min_iters, math.ceil(args.target_s * 1e6 / slowest))))


def bench_pair(args, w, batch):
    """Returns a result row (dict); raises BenchError when forecast_bench fails."""
    x = w.x[:batch].contiguous()
    row = {"workload": w.name, "batch": batch, "warmup": args.warmup}
    run_fd = not args.peer_only

    if args.dry_run:
        cmd = forecast_bench_cmd(args, w.model_dir, w.io_path, w.out_path(batch), batch,
                                 args.warmup, args.iters or args.min_iters)
        print("would run:", shlex.join(cmd))
        return None

    probes = [time_torch(w.module, x, 3, 5, args.bf16)["median_us"]]
    if run_fd and not args.iters:
        probe_cmd = forecast_bench_cmd(args, w.model_dir, w.io_path, w.out_path(batch, ".probe"),
                                       batch, 3, 5)
        probes.append(run_forecast_bench(args, probe_cmd)["median_us"])
    iters = choose_iters(args, probes)
    row["iters"] = iters

    # forecastd first, then PyTorch, each alone on the machine.
    if run_fd:
        cmd = forecast_bench_cmd(args, w.model_dir, w.io_path, w.out_path(batch), batch,
                                 args.warmup, iters)
        fd = run_forecast_bench(args, cmd)
        row["forecastd"] = {k: fd[k] for k in ("median_us", "p90_us", "mean_us", "min_us")}
        row["forecastd_cmd"] = shlex.join(cmd)
    pt = time_torch(w.module, x, args.warmup, iters, args.bf16)
    row["pytorch"] = pt

    if run_fd:
        want = run_inference(w.module, x).numpy()
        try:
            got = read_safetensors(w.out_path(batch))[0]["output"]
        except Exception as e:  # noqa: BLE001  (any unreadable output is the same failure)
            raise BenchError(f"{w.out_path(batch)}: no readable tensor 'output': {e}")
        # Under --bf16 both sides are held to the fp32 forecast; PyTorch's own bf16 error is
        # printed beside forecastd's.
        row["max_rel_err"] = max_rel_err(got, want)
        if args.bf16:
            with torch.inference_mode(), precision_context(True):
                row["pytorch_rel_err"] = max_rel_err(w.module(x).float().numpy(), want)
        row["ok"] = row["max_rel_err"] <= args.tolerance
        if not row["ok"]:
            if got.shape != want.shape:
                detail = f"shape {list(got.shape)} vs PyTorch's {list(want.shape)}"
            else:
                # Is the PyTorch side itself that far from exact? (It should be ~1e-6.)
                y64 = run_module(copy.deepcopy(w.module).double(), x.double()).numpy()
                detail = (f"forecastd vs PyTorch fp64 {max_rel_err(got, y64):.2e}, PyTorch fp32 "
                          f"vs fp64 {max_rel_err(want, y64):.2e}")
            row["mismatch_detail"] = detail
        row["ratio"] = pt["median_us"] / row["forecastd"]["median_us"]
    return row


# ----------------------------------------------------------------------------------------------
# Reporting.
# ----------------------------------------------------------------------------------------------


def table(rows):
    head = ["workload", "B", "forecastd median us", "PyTorch median us", "ratio",
            "forecastd p90 us", "PyTorch p90 us", "max rel err", "iters"]
    body = []
    for r in rows:
        fd = r.get("forecastd") or {}
        ratio = r.get("ratio")
        err = r.get("max_rel_err")
        body.append([r["workload"], str(r["batch"]), fmt_us(fd.get("median_us")),
                     fmt_us(r["pytorch"]["median_us"]),
                     "-" if ratio is None else f"{ratio:.2f}",
                     fmt_us(fd.get("p90_us")), fmt_us(r["pytorch"]["p90_us"]),
                     "-" if err is None else (f"{err:.1e}" + ("" if r["ok"] else " FAIL")
                                              + (f" ({r['pytorch_rel_err']:.1e})"
                                                 if "pytorch_rel_err" in r else "")),
                     str(r["iters"])])
    return head, body


def record(env, head, body, path):
    """Replaces the section with the same date, host and command in path, or appends one."""
    key = f"{env['date']} | {env['cpu']} | {env['cores']} cores | {env['command']}"
    begin = f"<!-- run_cpu.py section: {key} -->"
    end = "<!-- run_cpu.py section end -->"
    section = "\n".join([
        begin,
        f"## {env['date']}: {env['cpu']}, {env['cores']} cores",
        "",
        f"- threads: {env['threads']} (forecastd via OMP_NUM_THREADS, PyTorch "
        f"torch.set_num_threads)",
        f"- torch {env['torch']}, numpy {env['numpy']}, Python {env['python']}",
        f"- forecastd `{env['git']}`",
        f"- precision: {env['precision']}",
        f"- command: `{env['command']}`",
        "",
        markdown_table(head, body),
        end,
    ])
    write_section(path, begin, end, section)


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--case", nargs="+", metavar="WORKLOAD:B[,B...]", default=DEFAULT_CASES,
                    help="workloads (bench/configs/*.json) and batch sizes "
                         "(default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("--forecast-bench", default=os.path.join(REPO, "build", "bench",
                                                             "forecast_bench"),
                    help="the forecastd benchmark binary (default: %(default)s)")
    ap.add_argument("--backend", default="dnnl", help="forecast_bench --backend (default: dnnl)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads for both sides (default: every core this process may use, "
                         "%(default)s)")
    ap.add_argument("--warmup", type=int, default=20, help="warm-up calls (default: 20)")
    ap.add_argument("--iters", type=int, default=0,
                    help="timed calls; default: from a probe, so the slower side runs ~--target-s")
    ap.add_argument("--target-s", type=float, default=2.0,
                    help="seconds the slower side's timed calls should take (default: 2)")
    ap.add_argument("--min-iters", type=int, default=30, help="(default: 30)")
    ap.add_argument("--max-iters", type=int, default=100000, help="(default: 100000)")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="max |a-b|/max(|b|,1) between forecastd and PyTorch's fp32 forecast "
                         "(default: 1e-4; 5e-2 with --bf16)")
    ap.add_argument("--train-batch", type=int, default=32,
                    help="also time one training step per workload at this batch size on both "
                         "sides (0: none; not with --bf16, whose training runs on a GPU) "
                         "(default: %(default)s)")
    ap.add_argument("--bf16", action="store_true",
                    help="both sides compute in bf16: forecast_bench --backend dnnl-bf16 (needs "
                         "a CPU with AVX512-BF16 or AMX), PyTorch under torch.autocast('cpu', "
                         "torch.bfloat16)")
    ap.add_argument("--seed", type=int, default=20240601, help="base seed for weights and inputs")
    ap.add_argument("--timeout-s", type=int, default=600, help="per forecast_bench run")
    ap.add_argument("--peer-only", action="store_true",
                    help="time PyTorch alone (no forecast_bench needed; nothing is checked)")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the model files, print the forecast_bench commands, time nothing")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the files under DIR and keep them (default: a temp dir, removed)")
    ap.add_argument("--record", action="store_true",
                    help=f"update {os.path.relpath(RESULTS_MD, REPO)} with this run")
    ap.add_argument("--results", default=RESULTS_MD, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.tolerance is None:
        args.tolerance = 5e-2 if args.bf16 else 1e-4
    if args.list:
        for name in available_workloads():
            with open(os.path.join(CONFIGS, name + ".json"), encoding="utf-8") as f:
                print(f"{name:<20} {Spec(json.load(f)).describe()}")
        return 0
    if args.threads < 1 or args.warmup < 0 or args.iters < 0 or args.min_iters < 1:
        ap.error("--threads and --min-iters must be >= 1, --warmup and --iters >= 0")
    if args.record and (args.peer_only or args.dry_run):
        ap.error("--record needs forecastd's figures; drop --peer-only / --dry-run")
    pairs = parse_cases(args.case, ap)
    if not (args.peer_only or args.dry_run):
        if not os.access(args.forecast_bench, os.X_OK):
            print(f"error: {args.forecast_bench} is missing or not executable; run `make build` "
                  f"first (or pass --forecast-bench, or --peer-only)", file=sys.stderr)
            return 2
        args.forecast_bench = os.path.abspath(args.forecast_bench)

    torch.set_num_threads(args.threads)
    env = {
        "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
        "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "numpy": np.__version__, "python": platform.python_version(), "git": git_describe(),
        "command": command_line(),
        "precision": ("bf16 (forecastd: oneDNN bf16 products; PyTorch: torch.autocast cpu "
                      "bfloat16); max rel err against PyTorch's fp32 forecast, PyTorch's own "
                      "bf16 error in brackets") if args.bf16 else "fp32",
    }
    print(f"host: {env['cpu']}, {env['cores']} cores; torch {env['torch']} "
          f"(torch.get_num_threads() = {env['threads']}), forecastd {env['git']}")
    if torch.__file__.startswith("/usr/lib/python3/"):
        print("WARNING: this is Debian's python3-torch (reference BLAS): its times are not a fair "
              "peer; use bench/run_cpu.sh", file=sys.stderr)

    root = args.keep or tempfile.mkdtemp(prefix="forecastd-bench-")
    os.makedirs(root, exist_ok=True)
    rows, failures = [], []
    try:
        workloads = {}
        for name, batch in pairs:
            if name not in workloads:
                bmax = max(b for n, b in pairs if n == name)
                workloads[name] = Workload(name, bmax, root, args.seed)
                print(f"{name}: {workloads[name].spec.describe()}, seed {workloads[name].seed}")
            try:
                row = bench_pair(args, workloads[name], batch)
            except BenchError as e:
                failures.append(f"{name} B={batch}: forecast_bench failed: {e}")
                print(f"FAILED {name} B={batch}: {e}", file=sys.stderr)
                continue
            if row is None:
                continue
            rows.append(row)
            fd = row.get("forecastd")
            print(f"  B={batch:<4} iters={row['iters']:<6} "
                  f"forecastd {fmt_us(fd['median_us']) if fd else '-'} us  "
                  f"PyTorch {fmt_us(row['pytorch']['median_us'])} us"
                  + (f"  ratio {row['ratio']:.2f}  err {row['max_rel_err']:.1e}" if fd else ""),
                  flush=True)
            if (fd and args.train_batch > 0 and not args.bf16
                    and batch == max(b for n, b in pairs if n == name)):
                try:
                    train_row = bench_train_step(args, workloads[name])
                except BenchError as e:
                    failures.append(f"{name} train step: forecast_bench failed: {e}")
                    print(f"FAILED {name} train step: {e}", file=sys.stderr)
                else:
                    rows.append(train_row)
                    print(f"  train B={args.train_batch:<4} iters={train_row['iters']:<6} "
                          f"forecastd {fmt_us(train_row['forecastd']['median_us'])} us  "
                          f"PyTorch {fmt_us(train_row['pytorch']['median_us'])} us  "
                          f"ratio {train_row['ratio']:.2f}", flush=True)
            if fd and not row["ok"]:
                failures.append(f"{name} B={batch}: forecastd's output differs from PyTorch's by "
                                f"{row['max_rel_err']:.3g} > {args.tolerance:g} "
                                f"({row['mismatch_detail']})")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.dry_run:
        return 0

    head, body = table(rows)
    print()
    print(text_table(head, body))
    if failures:
        bar = "!" * 100
        print(f"\n{bar}\nBENCHMARK RUN FAILED:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        print(bar, file=sys.stderr)
    if args.record and failures:
        print("not recorded: the run failed", file=sys.stderr)
    elif args.record and rows:
        record(env, head, body, args.results)
        print(f"recorded in {os.path.relpath(args.results, REPO)}")
    summary = dict(env, ok=not failures, tolerance=args.tolerance, peer_only=args.peer_only,
                   results=[{k: v for k, v in r.items() if k != "forecastd_cmd"} for r in rows])
    print(json.dumps(summary, separators=(",", ":")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
