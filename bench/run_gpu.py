#!/usr/bin/env python3
"""forecastd vs PyTorch on one CUDA GPU, side by side in one run.

For each (workload, batch) pair this script writes a model with seeded random weights
(bench/configs/<workload>.json plus model.safetensors, through scripts/forecastd_torch.py, exactly
as run_cpu.py does) and an input batch into a temporary directory, then:

1. runs `gpu_bench` (bench/gpu_bench.cc) on it: forecastd's forward pass on CudaBackend with
   the weights uploaded once, timed per call with CUDA events, eager and as a CUDA-graph replay;
2. times the same model in PyTorch on the same GPU: eval mode, torch.inference_mode() (the
   transformer takes the fused encoder fast path), fp32 with TF32 off for matmuls and cuDNN,
   each call between two CUDA events and waited for; then the forward captured once with
   torch.cuda.graph (after a warm-up on a side stream) and its replays timed the same way;
3. checks forecastd's forecast against PyTorch's eager one: max |a - b| / max(|b|, 1) must be
   <= --tolerance (1e-4);
3b. unless --no-bf16, times bf16 as well: forecastd with the model precision BF16 (gpu_bench
   --math bf16) against PyTorch under torch.autocast(bfloat16), eager, with both errors against
   the float64 forecast (reported, not checked);
3c. at B = --train-batch (32; 0: none), unless --no-train, times one training step on both
   sides: forecastd's `gpu_bench --train` (TrainingEngine::Step on the GPU: the batch copied
   in from host memory, forward, MSE loss, backward, Adam update, the loss read back) against
   the PyTorch loop doing the same (pinned host batch .to(device, non_blocking=True), train
   mode with the model's dropout, MSE, zero_grad, backward, Adam step, loss.item()), each
   step timed on the host clock; in fp32 and, unless --no-bf16, in bf16 (forecastd's training
   precision BF16 against torch.autocast(bfloat16));
4. prints a table, then one JSON line; with $OUT set (or --out DIR) writes both there too
   (gpu_bench.txt, gpu_bench.json).

A timed call is (B, T, F) raw windows already on the GPU to raw forecasts on the GPU on both
sides (normalisation included, no host copies); warm-up calls are not timed. Both sides run the
same --warmup and --iters; with no --iters, a short PyTorch probe picks enough calls that its
eager side runs about --target-s, between --min-iters and --max-iters.

--device cpu is a debugging mode for a machine without a GPU: PyTorch runs on the CPU (timed
with perf_counter, no graphs) and the forecastd side is `forecast_bench --backend dnnl` from
--bin-dir, so the files, the checks and the report can be exercised anywhere.

Usage:
    run_gpu.py --bin-dir /tmp/bundle/bin                 the default pairs
    run_gpu.py --bin-dir DIR --case lstm_h256_l2_bi:1,32 --iters 50
    run_gpu.py --bin-dir build/bench --device cpu --case lstm_h128_l2:1

Exit status: 0 when every pair ran and matched; 1 when gpu_bench failed or a forecast differed
from PyTorch's by more than --tolerance; 2 on bad arguments.
"""

import argparse
import copy
import datetime
import json
import math
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
from forecastd_torch import max_rel_err, read_safetensors, run_inference, run_module  # noqa: E402
from run_cpu import (  # noqa: E402  (bench/ is on sys.path)
    BenchError, Workload, parse_cases, summarize_us, torch_train_steps)

# transformer_large at B=1024 is left out: about 45 TFLOP a call in fp32 (~1 s on an H100 for
# each side and mode) and ~16 GB of activations on forecastd's side.
DEFAULT_CASES = ["lstm_h128_l2:1,32,1024", "lstm_h128_l2_bi:1,32,1024",
                 "lstm_h256_l2_bi:1,32,1024", "transformer_small:1,32,1024",
                 "transformer_large:1,32"]


# ----------------------------------------------------------------------------------------------
# PyTorch on the device.
# ----------------------------------------------------------------------------------------------


def module_on(module, device):
    """A copy of module on `device`, with forecastd_torch's CPU-side constants moved there too:
    the transformer's cached positional table (and causal mask), and the de-normaliser's target
    index (built on the CPU on every call, which a CUDA graph could not capture). Same math."""
    m = copy.deepcopy(module).to(device)
    spec = m.spec
    if spec.arch == "transformer":
        kinds = ["pe"] + (["mask"] if spec.causal else [])
        for kind in kinds:
            # The cache key has no device: fill it with the device's copy.
            m._constants[(kind, spec.T, torch.float32)] = (
                m._constant(kind, spec.T, torch.float32).to(device))
    if m.normalizer is not None:
        normalizer = m.normalizer
        idx = torch.tensor(spec.target_index, dtype=torch.long, device=device)

        def denormalize(y, target_index, _n=normalizer, _idx=idx):
            std, mean = _n.std[_idx], _n.mean[_idx]
            if y.dim() == 4:
                std, mean = std[:, None], mean[:, None]
            return y * std + mean

        normalizer.denormalize = denormalize
    m.eval()
    return m


def enable_fastpath():
    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        torch.backends.mha.set_fastpath_enabled(True)


def time_calls(call, device, warmup, iters):
    """Summary of `iters` calls of call(), each timed alone, after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    samples_ns = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        for _ in range(iters):
            start.record()
            call()
            stop.record()
            stop.synchronize()
            samples_ns.append(start.elapsed_time(stop) * 1e6)
    else:
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            call()
            samples_ns.append(time.perf_counter_ns() - t0)
    return summarize_us(samples_ns)


def time_torch_eager(m, x, warmup, iters):
    enable_fastpath()
    with torch.inference_mode():
        return time_calls(lambda: m(x), x.device, warmup, iters)


def time_torch_graph(m, x, warmup, iters):
    """(summary, forecast) of CUDA-graph replays of m(x); raises on a capture failure."""
    enable_fastpath()
    static_x = x.clone()
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                m(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = m(static_x)
        summary = time_calls(graph.replay, x.device, max(warmup, 3), iters)
        torch.cuda.synchronize()
        return summary, static_y.clone()


# ----------------------------------------------------------------------------------------------
# forecastd's side.
# ----------------------------------------------------------------------------------------------


def fd_cmd(args, w, batch, warmup, iters, math="fp32"):
    cmd = [args.fd_bin, "--model", w.model_dir, "--version", "1", "--io", w.io_path,
           "--batch", str(batch), "--warmup", str(warmup), "--iters", str(iters),
           "--output", w.out_path(batch, "" if math == "fp32" else "." + math)]
    if args.device == "cpu":
        return cmd + ["--backend", "dnnl"]
    if math != "fp32":
        cmd += ["--math", math]
    if args.no_graph:
        cmd.append("--no-graph")
    return cmd


def run_fd(args, cmd):
    """Runs gpu_bench (or forecast_bench); returns its JSON line as a dict."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {args.timeout_s} s: {shlex.join(cmd)}")
    except OSError as e:
        raise BenchError(f"cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        raise BenchError(f"exit status {p.returncode}: {shlex.join(cmd)}\n{p.stderr.strip()}")
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    try:
        result = json.loads(lines[-1])
        float(result["median_us"])
    except (IndexError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise BenchError(f"expected one JSON line with median_us on stdout, got {p.stdout!r}: "
                         f"{shlex.join(cmd)}")
    return result


# ----------------------------------------------------------------------------------------------
# One pair.
# ----------------------------------------------------------------------------------------------

FIGURES = ("median_us", "p90_us", "mean_us", "min_us")


def bench_pair(args, w, m, batch, device):
    x = w.x[:batch].to(device).contiguous()
    row = {"workload": w.name, "batch": batch, "warmup": args.warmup}
    if args.dry_run:
        print("would run:", shlex.join(fd_cmd(args, w, batch, args.warmup, args.iters or 20)))
        return None

    if args.iters:
        iters = args.iters
    else:
        probe = time_torch_eager(m, x, 2, 5)["median_us"]
        iters = math.ceil(args.target_s * 1e6 / probe)
        iters = int(min(args.max_iters, max(args.min_iters, iters)))
    row["iters"] = iters

    cmd = fd_cmd(args, w, batch, args.warmup, iters)
    fd = run_fd(args, cmd)
    row["forecastd"] = {k: float(fd[k]) for k in FIGURES}
    row["forecastd_graph"] = ({k: float(fd["graph"][k]) for k in FIGURES}
                              if fd.get("graph") else None)
    if fd.get("graph_error"):
        row["forecastd_graph_error"] = fd["graph_error"]
    row["forecastd_cmd"] = shlex.join(cmd)
    if "device" in fd:
        row["device"] = fd["device"]

    row["torch"] = time_torch_eager(m, x, args.warmup, iters)
    row["torch_graph"] = None
    if device.type == "cuda" and not args.no_graph:
        try:
            row["torch_graph"], y_graph = time_torch_graph(m, x, args.warmup, iters)
        except Exception as e:  # noqa: BLE001  (report any capture failure, keep going)
            row["torch_graph_error"] = f"{type(e).__name__}: {e}"
            y_graph = None

    # The reference is PyTorch's forecast in float64 on the CPU through its plain (non-fused)
    # path: on CUDA, PyTorch's own fused float32 encoder path is measured ~1e-3 away from it
    # (see bench/RESULTS.md), so both float32 results are checked against the float64 truth.
    want = run_inference(m, x).cpu().numpy()
    m64 = copy.deepcopy(w.module).to("cpu").double()
    truth = run_module(m64, x.detach().to("cpu").double()).numpy()
    row["torch_vs_float64"] = max_rel_err(want, truth)
    if row["torch_graph"] is not None:
        row["torch_graph_rel_err"] = max_rel_err(y_graph.cpu().numpy(), want)
    try:
        got = read_safetensors(w.out_path(batch))[0]["output"]
    except Exception as e:  # noqa: BLE001  (any unreadable output is the same failure)
        raise BenchError(f"{w.out_path(batch)}: no readable tensor 'output': {e}")
    row["max_rel_err"] = max_rel_err(got, truth)
    row["forecastd_vs_torch"] = max_rel_err(got, want)
    print(f"  {w.name} B={batch}: vs PyTorch float64 on the CPU: forecastd "
          f"{row['max_rel_err']:.2e}, PyTorch float32 {row['torch_vs_float64']:.2e}", flush=True)
    row["ok"] = row["max_rel_err"] <= args.tolerance
    row["ratio"] = row["torch"]["median_us"] / row["forecastd"]["median_us"]
    if row["forecastd_graph"] and row["torch_graph"]:
        row["graph_ratio"] = row["torch_graph"]["median_us"] / row["forecastd_graph"]["median_us"]
    if device.type == "cuda" and not args.no_bf16:
        bench_bf16(args, w, m, x, batch, iters, truth, row)
    if device.type == "cuda" and not args.no_train and batch == args.train_batch:
        bench_train(args, w, batch, device, row)
    return row


def time_torch_train(args, w, batch, device, iters, bf16):
    """Summary of PyTorch training steps of a fresh copy of the model on `device`
    (run_cpu.torch_train_steps)."""
    return torch_train_steps(module_on(w.module, device), w, batch, device, args.warmup, iters,
                             bf16)


def bench_train(args, w, batch, device, row):
    """The training-step columns (fp32 and, unless --no-bf16, bf16) for this pair's row."""
    iters = max(args.min_iters, min(args.max_iters, 50))
    row["train_iters"] = iters
    for math_mode in ("fp32",) + (() if args.no_bf16 else ("bf16",)):
        cmd = [args.fd_bin, "--train", "--model", w.model_dir, "--version", "1", "--batch",
               str(batch), "--warmup", str(args.warmup), "--iters", str(iters), "--math", math_mode,
               "--seed", str(w.seed)]
        suffix = "" if math_mode == "fp32" else "_bf16"
        fd = run_fd(args, cmd)
        row["forecastd_train" + suffix] = {k: float(fd[k]) for k in FIGURES}
        row["torch_train" + suffix] = time_torch_train(args, w, batch, device, iters,
                                                       math_mode == "bf16")
        row["train_ratio" + suffix] = (row["torch_train" + suffix]["median_us"] /
                                       row["forecastd_train" + suffix]["median_us"])
        torch.cuda.empty_cache()


def bench_bf16(args, w, m, x, batch, iters, truth, row):
    """The bf16 columns: forecastd's model precision BF16 (gpu_bench --math bf16: GEMM inputs
    rounded to bfloat16, fp32 accumulation and storage) against PyTorch under
    torch.autocast(bfloat16) (bf16 activations and weights in matmuls and cuDNN's RNN). Both
    eager; errors against the same float64 truth, reported, not checked."""
    cmd = fd_cmd(args, w, batch, args.warmup, iters, math="bf16")
    fd = run_fd(args, cmd)
    row["forecastd_bf16"] = {k: float(fd[k]) for k in FIGURES}
    row["forecastd_bf16_graph"] = ({k: float(fd["graph"][k]) for k in FIGURES}
                                   if fd.get("graph") else None)
    got = read_safetensors(w.out_path(batch, ".bf16"))[0]["output"]
    row["forecastd_bf16_err"] = max_rel_err(got, truth)

    def call():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return m(x)

    enable_fastpath()
    with torch.inference_mode():
        row["torch_bf16"] = time_calls(call, x.device, args.warmup, iters)
        y = call().float().cpu().numpy()
    row["torch_bf16_err"] = max_rel_err(y, truth)
    row["bf16_ratio"] = row["torch_bf16"]["median_us"] / row["forecastd_bf16"]["median_us"]


# ----------------------------------------------------------------------------------------------
# Reporting.
# ----------------------------------------------------------------------------------------------


def table(rows):
    head = ["workload", "B", "forecastd us", "torch eager us", "eager ratio",
            "forecastd graph us", "torch graph us", "graph ratio", "forecastd err", "torch err",
            "bf16 forecastd us", "bf16 torch us", "bf16 ratio", "bf16 forecastd err",
            "bf16 torch err", "train forecastd us", "train torch us", "train ratio",
            "bf16 train forecastd us", "bf16 train torch us", "bf16 train ratio", "iters"]
    body = []
    for r in rows:
        fdg, ptg = r.get("forecastd_graph"), r.get("torch_graph")
        body.append([
            r["workload"], str(r["batch"]), fmt_us(r["forecastd"]["median_us"]),
            fmt_us(r["torch"]["median_us"]), f"{r['ratio']:.2f}",
            fmt_us(fdg["median_us"]) if fdg else "-", fmt_us(ptg["median_us"]) if ptg else "-",
            f"{r['graph_ratio']:.2f}" if "graph_ratio" in r else "-",
            f"{r['max_rel_err']:.1e}" + ("" if r["ok"] else " FAIL"),
            f"{r['torch_vs_float64']:.1e}",
            fmt_us(r["forecastd_bf16"]["median_us"]) if "forecastd_bf16" in r else "-",
            fmt_us(r["torch_bf16"]["median_us"]) if "torch_bf16" in r else "-",
            f"{r['bf16_ratio']:.2f}" if "bf16_ratio" in r else "-",
            f"{r['forecastd_bf16_err']:.1e}" if "forecastd_bf16_err" in r else "-",
            f"{r['torch_bf16_err']:.1e}" if "torch_bf16_err" in r else "-"] + [
            cell for suffix in ("", "_bf16") for cell in (
                fmt_us(r["forecastd_train" + suffix]["median_us"])
                if "forecastd_train" + suffix in r else "-",
                fmt_us(r["torch_train" + suffix]["median_us"])
                if "torch_train" + suffix in r else "-",
                f"{r['train_ratio' + suffix]:.2f}" if "train_ratio" + suffix in r else "-")] + [
            str(r["iters"])])
    return head, body


def device_description(device):
    if device.type != "cuda":
        return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    p = torch.cuda.get_device_properties(device)
    return f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--case", nargs="+", metavar="WORKLOAD:B[,B...]", default=DEFAULT_CASES,
                    help="workloads (bench/configs/*.json) and batch sizes "
                         "(default: %(default)s)")
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build-gpub", "bench"),
                    help="where gpu_bench (forecast_bench with --device cpu) is "
                         "(default: %(default)s)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cuda (default), or cpu to debug the script without a GPU")
    ap.add_argument("--warmup", type=int, default=10, help="warm-up calls (default: 10)")
    ap.add_argument("--iters", type=int, default=0,
                    help="timed calls; default: from a PyTorch probe, ~--target-s of them")
    ap.add_argument("--target-s", type=float, default=0.25,
                    help="seconds PyTorch's eager calls should take (default: 0.25)")
    ap.add_argument("--min-iters", type=int, default=20, help="(default: 20)")
    ap.add_argument("--max-iters", type=int, default=300, help="(default: 300)")
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="max |a-b|/max(|b|,1) between forecastd and PyTorch (default: 1e-4)")
    ap.add_argument("--seed", type=int, default=20240601, help="base seed for weights and inputs")
    ap.add_argument("--timeout-s", type=int, default=300, help="per gpu_bench run")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="skip the pairs not started within this many seconds (default: none)")
    ap.add_argument("--no-graph", action="store_true", help="eager timings only")
    ap.add_argument("--no-bf16", action="store_true",
                    help="skip the bf16 columns (forecastd --math bf16 vs PyTorch autocast)")
    ap.add_argument("--train-batch", type=int, default=32,
                    help="batch size whose pairs also time a training step (default: 32)")
    ap.add_argument("--no-train", action="store_true", help="skip the training-step columns")
    ap.add_argument("--math-sdpa", action="store_true",
                    help="PyTorch attention through its plain fp32 math kernel only (no flash, "
                         "memory-efficient or cuDNN scaled-dot-product attention)")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the model files, print the gpu_bench commands, time nothing")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the files under DIR and keep them (default: a temp dir, removed)")
    ap.add_argument("--out", default=os.environ.get("OUT") or None,
                    help="also write gpu_bench.txt and gpu_bench.json here (default: $OUT)")
    args = ap.parse_args(argv)

    if args.warmup < 0 or args.iters < 0 or args.min_iters < 1:
        ap.error("--min-iters must be >= 1, --warmup and --iters >= 0")
    pairs = parse_cases(args.case, ap)
    binary = "gpu_bench" if args.device == "cuda" else "forecast_bench"
    args.fd_bin = os.path.abspath(os.path.join(args.bin_dir, binary))
    if not args.dry_run and not os.access(args.fd_bin, os.X_OK):
        print(f"error: {args.fd_bin} is missing or not executable (--bin-dir)", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"error: torch {torch.__version__} sees no CUDA device (use --device cpu to debug "
              f"without one)", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    # fp32 on both sides: forecastd's CudaBackend runs TF32 off by default.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.math_sdpa and hasattr(torch.backends.cuda, "enable_flash_sdp"):
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)

    env = {"date": datetime.date.today().isoformat(), "device": device_description(device),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
           "python": platform.python_version(), "git": git_describe(),
           "command": command_line()}
    print(f"device: {env['device']}; torch {env['torch']} (CUDA {env['cuda']}, cuDNN "
          f"{env['cudnn']}), forecastd {env['git']}; TF32 off on both sides", flush=True)

    root = args.keep or tempfile.mkdtemp(prefix="forecastd-gpu-bench-")
    os.makedirs(root, exist_ok=True)
    rows, failures, notes = [], [], []
    started = time.monotonic()
    try:
        workloads = {}
        for name, batch in pairs:
            elapsed = time.monotonic() - started
            if args.budget_s and elapsed > args.budget_s:
                notes.append(f"{name} B={batch}: skipped, {elapsed:.0f} s > --budget-s "
                             f"{args.budget_s:g}")
                print(f"SKIPPED {name} B={batch}: out of time budget", flush=True)
                continue
            if name not in workloads:
                bmax = max(b for n, b in pairs if n == name)
                w = Workload(name, bmax, root, args.seed)
                workloads[name] = (w, module_on(w.module, device))
                print(f"{name}: {w.spec.describe()}, seed {w.seed}", flush=True)
            w, m = workloads[name]
            try:
                row = bench_pair(args, w, m, batch, device)
            except BenchError as e:
                failures.append(f"{name} B={batch}: {os.path.basename(args.fd_bin)} failed: {e}")
                print(f"FAILED {name} B={batch}: {e}", file=sys.stderr, flush=True)
                continue
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            if row is None:
                continue
            rows.append(row)
            fdg, ptg = row["forecastd_graph"], row["torch_graph"]
            print(f"  B={batch:<5} iters={row['iters']:<4} forecastd "
                  f"{fmt_us(row['forecastd']['median_us'])} "
                  f"(graph {fmt_us(fdg['median_us']) if fdg else '-'}) us  torch "
                  f"{fmt_us(row['torch']['median_us'])} (graph "
                  f"{fmt_us(ptg['median_us']) if ptg else '-'}) us  ratio {row['ratio']:.2f}  "
                  f"err {row['max_rel_err']:.1e}", flush=True)
            for key in ("forecastd_graph_error", "torch_graph_error"):
                if key in row:
                    notes.append(f"{name} B={batch}: {key}: {row[key]}")
                    print(f"    {key}: {row[key]}", flush=True)
            if not row["ok"]:
                failures.append(f"{name} B={batch}: forecastd's output differs from PyTorch's float64 forecast by "
                                f"{row['max_rel_err']:.3g} > {args.tolerance:g}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.dry_run:
        return 0

    head, body = table(rows)
    report = [f"{env['date']}: {env['device']}; torch {env['torch']}; forecastd {env['git']}",
              "ratios: PyTorch median / forecastd median (> 1: forecastd faster); "
              "eager and CUDA-graph replay; fp32, TF32 off; errors: max relative difference "
              "from PyTorch's float64 forecast on the CPU", "",
              text_table(head, body)]
    if notes:
        report += ["", "notes:"] + [f"  {n}" for n in notes]
    if failures:
        report += ["", "FAILED:"] + [f"  {f}" for f in failures]
    text = "\n".join(report)
    summary = dict(env, ok=not failures, tolerance=args.tolerance,
                   results=[{k: v for k, v in r.items() if k != "forecastd_cmd"} for r in rows],
                   failures=failures, notes=notes)
    line = json.dumps(summary, separators=(",", ":"))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gpu_bench.txt"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "gpu_bench.json"), "w", encoding="utf-8") as f:
            f.write(line + "\n")
    print()
    print(text)
    if failures:
        print("\n" + "!" * 100 + "\nBENCHMARK RUN FAILED:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        print("!" * 100, file=sys.stderr)
    print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
