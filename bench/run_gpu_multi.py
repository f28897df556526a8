#!/usr/bin/env python3
"""Training samples/s on 1 and N GPUs: forecastd's data-parallel engine against PyTorch's
DistributedDataParallel (NCCL, one process per GPU) on the same GPUs, in one run.

For each workload this script writes the model with seeded random weights (bench/configs/
<workload>.json plus model.safetensors, through run_cpu.Workload, as run_gpu.py does), then for
each row (workload, precision, global batch B) runs:

1. forecastd on one GPU: `gpu_bench --train --devices cuda:D0 --batch B` (one
   CudaTrainingEngine: the batch copied in from host memory, forward, MSE, backward, Adam, the
   loss read back);
2. forecastd on N GPUs: `gpu_bench --train --devices cuda:D0,...,cuda:DN-1 --batch B`
   (engine/train/data_parallel.h: one rank per GPU, each B/N windows, the gradient arena
   all-reduced over NCCL, the same update on every rank); gpu_bench also times that
   all-reduce alone (arena-sized AllReduceScaledSum on the ranks' streams, `allreduce_us`);
3. PyTorch on one GPU and DDP on N (bench/ddp_train.py; one run per workload and world size
   covers all of the workload's rows): the same model and weights, the same step, with
   torch.autocast(bfloat16) for bf16 against forecastd's PRECISION_BF16, TF32 off for fp32.

Both sides: --warmup untimed steps, then --iters steps each timed on the host clock (every step
ends in a synchronisation, reading the loss back); samples/s = B / median step time. Then a table
and one JSON line; with $OUT set (or --out DIR) both are written there too (gpu_multi.txt,
gpu_multi.json).

Columns: samples/s of each of the four; scaling efficiency = N-GPU samples/s / (N x 1-GPU
samples/s), per side; forecastd/DDP = forecastd's N-GPU samples/s / DDP's (> 1: forecastd
faster), and the same at 1 GPU; forecastd's all-reduce per step (us) and its share of
forecastd's N-GPU step.

Usage:
    run_gpu_multi.py --bin-dir /tmp/bundle/bin                 the default rows, GPUs 0 and 1
    run_gpu_multi.py --bin-dir DIR --quick                     fewer steps, one batch per group
    run_gpu_multi.py --bin-dir DIR --case transformer_large:bf16:32 --devices cuda:2,cuda:3
    run_gpu_multi.py --bin-dir DIR --dry-run                   print the commands, time nothing

Exit status: 0 when every measurement ran; 1 when one failed; 2 on bad arguments.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from bench_report import command_line, fmt_us, git_describe, text_table  # noqa: E402
from run_cpu import BenchError, Workload, available_workloads  # noqa: E402

# (workload, precision, global batches): transformer_large in bf16 and fp32, the bidirectional
# LSTM in fp32 (its bf16 step is not what this compares).
DEFAULT_CASES = ["transformer_large:bf16:32,64", "transformer_large:fp32:32,64",
                 "lstm_h256_l2_bi:fp32:64,256"]
DDP_TRAIN = os.path.join(HERE, "ddp_train.py")
FIGURES = ("median_us", "p90_us", "mean_us", "min_us", "samples_per_s")


def parse_cases(items, ap):
    """["transformer_large:bf16:32,64", ...] -> [(workload, math, B), ...] in order."""
    known = available_workloads()
    rows = []
    for item in items:
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in known or parts[1] not in ("fp32", "bf16"):
            ap.error(f"{item!r}: expected WORKLOAD:MATH:B[,B...], WORKLOAD one of {known}, "
                     f"MATH fp32 or bf16")
        try:
            batches = [int(b) for b in parts[2].split(",")]
        except ValueError:
            ap.error(f"{item!r}: batch sizes must be integers")
        rows += [(parts[0], parts[1], b) for b in batches]
    return rows


def parse_devices(text, ap):
    ordinals = []
    for item in text.split(","):
        item = item.strip().removeprefix("cuda:")
        if not item.isdigit():
            ap.error(f"--devices {text!r}: expected cuda:N,cuda:N[,...]")
        ordinals.append(int(item))
    if len(ordinals) < 2 or len(set(ordinals)) != len(ordinals):
        ap.error(f"--devices {text!r}: at least two distinct GPUs")
    return ordinals


def run_json_lines(args, cmd, env=None):
    """Runs cmd; returns the JSON objects it printed on stdout, one a line."""
    print("  $ " + shlex.join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {args.timeout_s} s: {shlex.join(cmd)}")
    except OSError as e:
        raise BenchError(f"cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise BenchError(f"exit status {p.returncode}: {shlex.join(cmd)}\n{tail}")
    out = []
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    if not out:
        raise BenchError(f"no JSON line on stdout, got {p.stdout!r}: {shlex.join(cmd)}")
    return out


def fd_cmd(args, w, math_mode, batch, devices):
    return [args.fd_bin, "--train", "--model", w.model_dir, "--version", "1", "--batch",
            str(batch), "--warmup", str(args.warmup), "--iters", str(args.iters), "--math",
            math_mode, "--seed", str(w.seed),
            "--devices", ",".join(f"cuda:{d}" for d in devices)]


def ddp_cmd(args, name, rows, world_size):
    cases = {}
    for _, math_mode, batch in rows:
        cases.setdefault(math_mode, []).append(str(batch))
    return [sys.executable, DDP_TRAIN, "--workload", name, "--world-size", str(world_size),
            "--devices", ",".join(f"cuda:{d}" for d in args.devices[:world_size]),
            "--warmup", str(args.warmup), "--iters", str(args.iters), "--seed", str(args.seed),
            "--cases"] + [f"{m}:{','.join(bs)}" for m, bs in cases.items()]


def figures(result):
    return {k: float(result[k]) for k in FIGURES if result.get(k) is not None}


def fill_ratios(row, n):
    """Scaling efficiencies and forecastd/DDP ratios from whatever the row has."""
    def sps(key):
        return row.get(key, {}).get("samples_per_s")

    fd1, fdn, pt1, ptn = sps("forecastd_1"), sps("forecastd_n"), sps("ddp_1"), sps("ddp_n")
    if fd1 and fdn:
        row["forecastd_efficiency"] = fdn / (n * fd1)
    if pt1 and ptn:
        row["ddp_efficiency"] = ptn / (n * pt1)
    if fdn and ptn:
        row["ratio_n"] = fdn / ptn
    if fd1 and pt1:
        row["ratio_1"] = fd1 / pt1
    ar = row.get("forecastd_allreduce_us")
    if ar is not None and "forecastd_n" in row:
        row["allreduce_share"] = ar / row["forecastd_n"]["median_us"]


def table(rows, n):
    head = ["workload", "math", "B", "fd 1 GPU/s", f"fd {n} GPU/s", "fd eff",
            "DDP 1 GPU/s", f"DDP {n} GPU/s", "DDP eff", f"fd/DDP {n}", "fd/DDP 1",
            "fd allreduce us", "of fd step"]

    def sps(r, key):
        v = r.get(key, {}).get("samples_per_s")
        return "-" if v is None else f"{v:,.1f}"

    def num(r, key, fmt):
        return "-" if key not in r else format(r[key], fmt)

    body = [[r["workload"], r["math"], str(r["batch"]), sps(r, "forecastd_1"),
             sps(r, "forecastd_n"), num(r, "forecastd_efficiency", ".2f"), sps(r, "ddp_1"),
             sps(r, "ddp_n"), num(r, "ddp_efficiency", ".2f"), num(r, "ratio_n", ".2f"),
             num(r, "ratio_1", ".2f"),
             fmt_us(r.get("forecastd_allreduce_us")), num(r, "allreduce_share", ".1%")]
            for r in rows]
    return head, body


def device_description(devices):
    names = [torch.cuda.get_device_name(d) for d in devices]
    same = all(x == names[0] for x in names)
    return (f"{len(devices)} x {names[0]}" if same else " + ".join(names)) + \
        f" (cuda:{','.join(map(str, devices))})"


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001  (a torch built without CUDA or NCCL)
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--case", nargs="+", metavar="WORKLOAD:MATH:B[,B...]", default=DEFAULT_CASES,
                    help="rows: workload (bench/configs), fp32 or bf16, global batch sizes "
                         "(default: %(default)s)")
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build-gpub", "bench"),
                    help="where gpu_bench is (default: %(default)s)")
    ap.add_argument("--devices", default="cuda:0,cuda:1",
                    help="the GPUs of the N-GPU runs; the 1-GPU runs use the first "
                         "(default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (default: 5)")
    ap.add_argument("--iters", type=int, default=20, help="timed steps (default: 20)")
    ap.add_argument("--quick", action="store_true",
                    help="2 warm-up and 8 timed steps, and only the first batch of each "
                         "workload and precision")
    ap.add_argument("--seed", type=int, default=20240601, help="base seed of the weights")
    ap.add_argument("--timeout-s", type=int, default=300, help="per gpu_bench / ddp_train run")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="skip the measurements not started within this many seconds "
                         "(default: none)")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the model files, print the commands, time nothing")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the files under DIR and keep them (default: a temp dir, removed)")
    ap.add_argument("--out", default=os.environ.get("OUT") or None,
                    help="also write gpu_multi.txt and gpu_multi.json here (default: $OUT)")
    args = ap.parse_args(argv)

    if args.warmup < 0 or args.iters < 1:
        ap.error("--iters must be >= 1, --warmup >= 0")
    rows_wanted = parse_cases(args.case, ap)
    args.devices = parse_devices(args.devices, ap)
    n = len(args.devices)
    if args.quick:
        args.warmup, args.iters = min(args.warmup, 2), min(args.iters, 8)
        firsts = {}
        for name, math_mode, batch in rows_wanted:
            firsts.setdefault((name, math_mode), (name, math_mode, batch))
        rows_wanted = list(firsts.values())
    for name, math_mode, batch in rows_wanted:
        if batch % n:
            ap.error(f"{name}:{math_mode}:{batch}: the global batch does not split evenly over "
                     f"{n} GPUs")
    args.fd_bin = os.path.abspath(os.path.join(args.bin_dir, "gpu_bench"))
    if not args.dry_run:
        if not os.access(args.fd_bin, os.X_OK):
            print(f"error: {args.fd_bin} is missing or not executable (--bin-dir)",
                  file=sys.stderr)
            return 2
        if torch.cuda.device_count() <= max(args.devices):
            print(f"error: --devices {args.devices} but torch {torch.__version__} sees "
                  f"{torch.cuda.device_count()} GPUs", file=sys.stderr)
            return 2

    env = {"date": datetime.date.today().isoformat(),
           "device": device_description(args.devices) if not args.dry_run else None,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "nccl": nccl_version(),
           "python": platform.python_version(), "git": git_describe(),
           "command": command_line(), "warmup": args.warmup, "iters": args.iters}
    print(f"devices: {env['device']}; torch {env['torch']} (CUDA {env['cuda']}, NCCL "
          f"{env['nccl']}), forecastd {env['git']}; {args.warmup} warm-up + {args.iters} timed "
          f"steps per measurement", flush=True)

    root = args.keep or tempfile.mkdtemp(prefix="forecastd-gpu-multi-")
    os.makedirs(root, exist_ok=True)
    rows, failures, notes = [], [], []
    started = time.monotonic()

    def out_of_time(what):
        elapsed = time.monotonic() - started
        if args.budget_s and elapsed > args.budget_s:
            notes.append(f"{what}: skipped, {elapsed:.0f} s > --budget-s {args.budget_s:g}")
            print(f"SKIPPED {what}: out of time budget", flush=True)
            return True
        return False

    try:
        names = list(dict.fromkeys(name for name, _, _ in rows_wanted))
        for name in names:
            mine = [r for r in rows_wanted if r[0] == name]
            if out_of_time(name):
                continue
            # The input file Workload writes is not used in training: one window is enough.
            w = Workload(name, 1, root, args.seed)
            print(f"{name}: {w.spec.describe()}, seed {w.seed}", flush=True)
            by_key = {}
            for _, math_mode, batch in mine:
                row = {"workload": name, "math": math_mode, "batch": batch, "gpus": n}
                by_key[(math_mode, batch)] = row
                rows.append(row)
                for key, devices in (("forecastd_1", args.devices[:1]),
                                     ("forecastd_n", args.devices)):
                    cmd = fd_cmd(args, w, math_mode, batch, devices)
                    what = f"{name} {math_mode} B={batch} forecastd x{len(devices)}"
                    if args.dry_run:
                        print("would run:", shlex.join(cmd))
                        continue
                    if out_of_time(what):
                        continue
                    try:
                        fd = run_json_lines(args, cmd)[-1]
                    except BenchError as e:
                        failures.append(f"{what}: {e}")
                        print(f"FAILED {what}: {e}", file=sys.stderr, flush=True)
                        continue
                    row[key] = figures(fd)
                    if key == "forecastd_n" and fd.get("allreduce_us") is not None:
                        row["forecastd_allreduce_us"] = float(fd["allreduce_us"])
                    print(f"    {what}: {fd['samples_per_s']:,.1f} samples/s (median "
                          f"{fmt_us(float(fd['median_us']))} us)", flush=True)
            for key, world_size in (("ddp_1", 1), ("ddp_n", n)):
                cmd = ddp_cmd(args, name, mine, world_size)
                what = f"{name} PyTorch x{world_size}"
                if args.dry_run:
                    print("would run:", shlex.join(cmd))
                    continue
                if out_of_time(what):
                    continue
                try:
                    lines = run_json_lines(args, cmd)
                except BenchError as e:
                    failures.append(f"{what}: {e}")
                    print(f"FAILED {what}: {e}", file=sys.stderr, flush=True)
                    continue
                for pt in lines:
                    row = by_key.get((pt.get("math"), pt.get("batch")))
                    if row is None:
                        continue
                    row[key] = figures(pt)
                    print(f"    {name} {pt['math']} B={pt['batch']} PyTorch x{world_size}: "
                          f"{pt['samples_per_s']:,.1f} samples/s (median "
                          f"{fmt_us(float(pt['median_us']))} us)", flush=True)
                missing = [k for k, r in by_key.items() if key not in r]
                if missing:
                    failures.append(f"{what}: no result for {missing}")
            for row in by_key.values():
                fill_ratios(row, n)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.dry_run:
        return 0

    head, body = table(rows, n)
    report = [f"{env['date']}: {env['device']}; torch {env['torch']} (NCCL {env['nccl']}); "
              f"forecastd {env['git']}",
              f"training samples/s = global batch B / median step ({args.warmup} warm-up + "
              f"{args.iters} timed steps); fp32 with TF32 off, bf16: forecastd PRECISION_BF16 "
              f"vs torch.autocast(bfloat16)",
              f"PyTorch: plain on 1 GPU, DDP (NCCL, one process per GPU) on {n}; "
              f"eff = {n}-GPU / ({n} x 1-GPU); fd/DDP = forecastd samples/s / PyTorch's "
              f"(> 1: forecastd faster)",
              f"fd allreduce: forecastd's arena all-reduce alone on {n} GPUs, and its share of "
              f"forecastd's {n}-GPU step", "",
              text_table(head, body)]
    if notes:
        report += ["", "notes:"] + [f"  {x}" for x in notes]
    if failures:
        report += ["", "FAILED:"] + [f"  {x}" for x in failures]
    text = "\n".join(report)
    line = json.dumps(dict(env, ok=not failures, gpus=n, results=rows, failures=failures,
                           notes=notes), separators=(",", ":"))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gpu_multi.txt"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "gpu_multi.json"), "w", encoding="utf-8") as f:
            f.write(line + "\n")
    print()
    print(text)
    print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
