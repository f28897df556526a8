#!/usr/bin/env python3
"""PyTorch's side of bench/run_gpu_multi.sh: training steps of a bench workload on one GPU or
data-parallel over several with DistributedDataParallel (NCCL), timed as forecastd's
`gpu_bench --train [--devices ...]` times its own.

The model is the one bench/run_gpu.py compares forecastd against: scripts/forecastd_torch.py's
module for bench/configs/<workload>.json with the same seeded weights (run_cpu.Workload's seed),
moved to the GPU by run_gpu.module_on, in train mode with the config's dropout. A step, for a
global batch of B windows split evenly over the world size W (B/W per rank):

    x, y = pinned host shard .to(device, non_blocking=True)     # standardised windows, targets
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(math == bf16)):
        loss = mse_loss(model(x).float(), y)                    # the normalised forecast
    zero_grad(set_to_none=True); loss.backward(); Adam step (lr 1e-5); loss.item()

as forecastd's step: the batch copied in from host memory, forward, MSE, backward (gradients
all-reduced by DDP, overlapped with the backward in its buckets), the optimiser's update, and
one synchronisation to read the loss back. fp32 runs with TF32 off for matmuls and cuDNN, as
forecastd's PRECISION_FP32 does.

W = 1 is plain PyTorch in this process: no process group and no DDP wrapper, the single-GPU
loop a user would run, so DDP's own cost shows in the scaling efficiency. W > 1 spawns W
processes (torch.multiprocessing.spawn), rank r on the r-th of --devices, joined by
init_process_group("nccl") through a file:// rendezvous in a temporary directory (nothing
beyond this host), the model wrapped in DistributedDataParallel(device_ids=[device],
broadcast_buffers=False, or forward_sync_buffers=False where torch has it): the only buffers are
the normaliser's statistics, which never change, and forecastd does not send them either. Each
rank times its own steps on the host clock; a step's time is its slowest rank's, gathered to
rank 0.

Prints one JSON line per case (MATH:B):
  {"peer":"pytorch","workload":...,"world_size":W,"ddp":bool,"batch":B,"rank_batch":B/W,
   "math":...,"warmup":...,"iters":...,"median_us":...,"p90_us":...,"mean_us":...,"min_us":...,
   "samples_per_s":B/median,"last_loss":...}

Usage:
    ddp_train.py --workload transformer_large --world-size 2 --cases bf16:32 fp32:64
    ddp_train.py --workload lstm_h256_l2_bi --world-size 1 --cases fp32:64,256 --devices 1
    ddp_train.py --device-type cpu --world-size 2 --cases fp32:8 ...   (no GPU: gloo, debugging)

Exit status: 0 when every case ran; 1 when one failed; 2 on bad arguments.
"""

import argparse
import datetime
import inspect
import json
import math
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from forecastd_torch import Spec, build_module, randomize  # noqa: E402
from run_cpu import (  # noqa: E402
    CONFIGS, available_workloads, summarize_us, train_step_fn, workload_seed)
from run_gpu import module_on  # noqa: E402

LEARNING_RATE = 1e-5  # as gpu_bench --train: keeps the loss finite whatever the weights


class NormalizedForecast(torch.nn.Module):
    """The module's forecast in normalised units (forward_normalized): what forecastd's
    training loss is computed on. A module of its own so DDP's forward hooks run around it."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module.forward_normalized(x)


def parse_cases(items, world_size, ap):
    """["bf16:32,64", "fp32:64"] -> [("bf16", 32), ("bf16", 64), ("fp32", 64)]."""
    cases = []
    for item in items:
        math_mode, sep, batches = item.partition(":")
        if math_mode not in ("fp32", "bf16") or not sep:
            ap.error(f"{item!r}: expected MATH:B[,B...] with MATH fp32 or bf16, e.g. bf16:32")
        try:
            bs = [int(b) for b in batches.split(",")]
        except ValueError:
            ap.error(f"{item!r}: batch sizes must be integers")
        for b in bs:
            if b < world_size or b % world_size:
                ap.error(f"{item!r}: global batch {b} does not split evenly over "
                         f"{world_size} ranks")
        cases += [(math_mode, b) for b in bs]
    return cases


def parse_devices(text, device_type):
    """"cuda:0,cuda:1" or "0,1" -> [0, 1] (CPU: ranks all on the CPU, indices unused)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if item.startswith(device_type + ":"):
            item = item[len(device_type) + 1:]
        out.append(int(item))
    return out


def build_model(workload, seed):
    """forecastd_torch's module for the workload, with run_cpu.Workload's seeded weights."""
    with open(os.path.join(CONFIGS, workload + ".json"), encoding="utf-8") as f:
        spec = Spec(json.load(f))
    module = build_module(spec)
    randomize(module, workload_seed(workload, seed))
    return spec, module


def time_case(args, spec, base, device, rank, world_size, math_mode, batch):
    """This rank's step times (ns) and last loss for one case."""
    bf16 = math_mode == "bf16"
    m = module_on(base, device)  # a fresh copy: each case starts from the same weights
    m.train()
    model = NormalizedForecast(m)
    if world_size > 1:
        ddp = torch.nn.parallel.DistributedDataParallel
        # No buffer broadcast before each forward (the normaliser's statistics never change);
        # newer torch names that forward_sync_buffers and deprecates broadcast_buffers.
        sync = ("forward_sync_buffers"
                if "forward_sync_buffers" in inspect.signature(ddp.__init__).parameters
                else "broadcast_buffers")
        model = ddp(model, device_ids=[device] if device.type == "cuda" else None,
                    **{sync: False})
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    rows = batch // world_size
    # Each rank its own shard of random standardised windows and targets.
    gen = torch.Generator().manual_seed(workload_seed(args.workload, args.seed) + 1000 * (rank + 1))
    pin = device.type == "cuda"
    x_host = torch.randn(rows, spec.T, spec.F, generator=gen)
    y_host = torch.randn(*spec.output_shape(rows), generator=gen)
    if pin:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
    step = train_step_fn(model, opt, x_host, y_host, device, bf16)

    last = 0.0
    for _ in range(args.warmup):
        last = step()
    samples_ns = []
    for _ in range(args.iters):
        t0 = time.perf_counter_ns()
        last = step()
        samples_ns.append(time.perf_counter_ns() - t0)
    if not math.isfinite(last):
        raise RuntimeError(f"{math_mode} B={batch}: the training loss is not finite")
    del model, opt, m
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return samples_ns, last


def run_rank(rank, args, cases, devices, rendezvous):
    """Every case on one rank; rank 0 prints each case's JSON line. With world size 1, called
    in this process (no process group)."""
    world_size = args.world_size
    if args.device_type == "cuda":
        device = torch.device("cuda", devices[rank])
        torch.cuda.set_device(device)
        # fp32 on both sides: forecastd's PRECISION_FP32 runs TF32 off.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        device = torch.device("cpu")
    if world_size > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method=rendezvous, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        spec, base = build_model(args.workload, args.seed)
        for math_mode, batch in cases:
            samples_ns, last = time_case(args, spec, base, device, rank, world_size, math_mode,
                                         batch)
            if world_size > 1:
                gathered = [None] * world_size
                dist.all_gather_object(gathered, samples_ns)
                # A step's time is its slowest rank's.
                samples_ns = [max(step) for step in zip(*gathered)]
            if rank != 0:
                continue
            summary = summarize_us(samples_ns)
            line = dict(peer="pytorch", workload=args.workload, world_size=world_size,
                        ddp=world_size > 1, devices=devices[:world_size], batch=batch,
                        rank_batch=batch // world_size, math=math_mode, warmup=args.warmup,
                        iters=args.iters, **summary,
                        samples_per_s=batch * 1e6 / summary["median_us"], last_loss=last,
                        torch=torch.__version__)
            print(json.dumps(line, separators=(",", ":")), flush=True)
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--workload", required=True, choices=available_workloads(),
                    help="bench/configs/<workload>.json")
    ap.add_argument("--cases", nargs="+", required=True, metavar="MATH:B[,B...]",
                    help="precision (fp32, bf16) and global batch sizes")
    ap.add_argument("--world-size", type=int, default=1,
                    help="ranks, one per device (default: 1, plain PyTorch without DDP)")
    ap.add_argument("--devices", default="",
                    help="the ranks' GPUs, e.g. cuda:0,cuda:1 or 0,1 (default: 0..W-1)")
    ap.add_argument("--device-type", default="cuda", choices=["cuda", "cpu"],
                    help="cuda (default), or cpu (gloo) to debug the script without a GPU")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default: 5)")
    ap.add_argument("--iters", type=int, default=20, help="timed steps (default: 20)")
    ap.add_argument("--seed", type=int, default=20240601,
                    help="base seed of the weights, as run_gpu.py's (default: %(default)s)")
    ap.add_argument("--timeout-s", type=int, default=300,
                    help="how long a collective may wait for the other ranks (default: 300)")
    args = ap.parse_args(argv)

    if args.world_size < 1 or args.warmup < 0 or args.iters < 1:
        ap.error("--world-size and --iters must be >= 1, --warmup >= 0")
    cases = parse_cases(args.cases, args.world_size, ap)
    try:
        devices = (parse_devices(args.devices, args.device_type) if args.devices
                   else list(range(args.world_size)))
    except ValueError:
        ap.error(f"--devices {args.devices!r}: expected cuda:N[,cuda:N...]")
    if len(devices) < args.world_size:
        ap.error(f"--world-size {args.world_size} but --devices lists {len(devices)}")
    if args.device_type == "cuda":
        if not torch.cuda.is_available():
            print(f"error: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
            return 2
        if len(set(devices[:args.world_size])) < args.world_size:
            ap.error("one rank per GPU: --devices lists a GPU twice")
        if max(devices[:args.world_size]) >= torch.cuda.device_count():
            print(f"error: --devices {devices[:args.world_size]} but torch sees "
                  f"{torch.cuda.device_count()} GPUs", file=sys.stderr)
            return 2

    if args.world_size == 1:
        try:
            run_rank(0, args, cases, devices, None)
        except Exception as e:  # noqa: BLE001  (report any failure as the exit status)
            print(f"ddp_train.py: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        return 0
    root = tempfile.mkdtemp(prefix="forecastd-ddp-")
    try:
        rendezvous = "file://" + os.path.join(root, "rendezvous")
        mp.spawn(run_rank, args=(args, cases, devices, rendezvous), nprocs=args.world_size,
                 join=True)
    except Exception as e:  # noqa: BLE001  (a rank's failure, with its traceback above)
        print(f"ddp_train.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
