#!/usr/bin/env python3
"""Where a forward pass (or, with --train, a training step) spends its GPU time: forecastd's
(gpu_bench, eager) and PyTorch's, on the same model and batch, each under Nsight Compute (ncu)
with one metric, the kernel's duration, and summarised per kernel name: calls per pass and
microseconds per pass. Needs ncu (CUDA toolkit) and PyTorch on the GPU host; for diagnosis, not
for the record (ncu serialises kernels, so the sum is not the pass's latency).

    python3 bench/gpu_profile.py --bin-dir /tmp/bundle/bin --case lstm_h128_l2:32
    python3 bench/gpu_profile.py --bin-dir /tmp/bundle/bin --case lstm_h128_l2:32 --train
"""

import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, HERE)

from run_cpu import Workload  # noqa: E402

# Forward passes each side runs under ncu; the first warms up (plans, cuDNN's lazy state).
CALLS = 3

# The model and its input on the GPU, fp32 with TF32 off, as run_gpu.py sets PyTorch up.
TORCH_PREAMBLE = """
import sys, torch
sys.path[:0] = {paths!r}
from run_cpu import Workload
from run_gpu import module_on
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
w = Workload({name!r}, {batch}, {root!r}, {seed})
m = module_on(w.module, torch.device("cuda"))
x = w.x[:{batch}].cuda()
"""

TORCH_SIDE = TORCH_PREAMBLE + """
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled={bf16}):
    m(x)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("fwd")
    for _ in range({calls} - 1):
        m(x)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
"""

# A training step as run_gpu.py times it (Adam, MSE, train mode), fp32 or under autocast bf16,
# its kernels listed from torch.profiler (device time in ns) rather than ncu.
TORCH_TRAIN_SIDE = TORCH_PREAMBLE + """
m.train()
with torch.no_grad():
    y = torch.randn_like(m(x))
opt = torch.optim.Adam(m.parameters(), lr=1e-5)
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled={bf16}):
        loss = torch.nn.functional.mse_loss(m(x).float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()
step()
torch.cuda.synchronize()
# The backward pass runs on autograd's own thread, which an NVTX range of this one would not
# cover: CUPTI's activity records (torch.profiler) see every thread's kernels.
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range({calls} - 1):
        step()
    torch.cuda.synchronize()
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
        print("KERNEL\t%s\t%.0f" % (e.name.replace("\t", " "), e.device_time * 1000.0))
"""


def ncu(cmd, ncu_args=()):
    """Per-kernel durations (ns) in launch order, from ncu's CSV."""
    out = subprocess.run(["ncu", "--csv", "--metrics", "gpu__time_duration.sum", *ncu_args, *cmd],
                         capture_output=True, text=True, timeout=500)
    if out.returncode != 0:
        raise RuntimeError(f"ncu {' '.join(cmd[:2])}...: {out.stderr[-2000:]}")
    lines = out.stdout[out.stdout.index('"ID"'):]
    kernels = []
    for row in csv.DictReader(io.StringIO(lines)):
        if row["Metric Name"] == "gpu__time_duration.sum":
            ns = float(row["Metric Value"].replace(",", ""))
            if row["Metric Unit"] == "usecond":
                ns *= 1e3
            elif row["Metric Unit"] == "msecond":
                ns *= 1e6
            kernels.append((row["Kernel Name"], ns))
    return kernels


def summary(title, kernels, calls, warm_up_included=True):
    """Per kernel name over the last calls - 1 forwards; `kernels` holds all `calls` forwards
    (the first a warm-up) or, without warm_up_included, only the last calls - 1."""
    n = len(kernels)
    per_call = n // calls if warm_up_included else n // (calls - 1)
    tail = kernels[n - per_call * (calls - 1):]
    by_name = {}
    for name, ns in tail:
        c, t = by_name.get(name, (0, 0.0))
        by_name[name] = (c + 1, t + ns)
    total = sum(t for _, t in by_name.values()) / (calls - 1) / 1e3
    print(f"\n{title}: {per_call} kernels per forward, {total:.1f} us of kernel time per forward")
    for name, (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"  {t / (calls - 1) / 1e3:8.1f} us  {c // (calls - 1):4d}x  {name[:110]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default="/tmp/bundle/bin")
    ap.add_argument("--case", default="lstm_h128_l2:32", help="WORKLOAD:B")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--train", action="store_true", help="a training step instead of a forward")
    ap.add_argument("--math", choices=("fp32", "bf16"), default="fp32",
                    help="forecastd's precision; bf16 runs PyTorch under autocast")
    args = ap.parse_args()
    name, batch = args.case.split(":")
    batch = int(batch)
    with tempfile.TemporaryDirectory() as root:
        w = Workload(name, batch, root, args.seed)
        what = f"{name} B={batch} {'training step' if args.train else 'forward'} {args.math}"
        cmd = [os.path.join(args.bin_dir, "gpu_bench"), "--model", w.model_dir, "--version", "1",
               "--batch", str(batch), "--warmup", "1", "--iters", str(CALLS - 1), "--math",
               args.math]
        cmd += ["--train", "--seed", str(args.seed)] if args.train else [
            "--io", w.io_path, "--no-graph"]
        fd = ncu(cmd)
        summary(f"forecastd {what}", fd, CALLS)
        side = TORCH_TRAIN_SIDE if args.train else TORCH_SIDE
        script = side.format(paths=[os.path.join(REPO, "scripts"), HERE], name=name,
                             batch=batch, root=root, seed=args.seed, calls=CALLS,
                             bf16=args.math == "bf16")
        if args.train:
            out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                 timeout=500)
            if out.returncode != 0:
                raise RuntimeError(f"PyTorch training side: {out.stderr[-2000:]}")
            pt = [(name, float(ns)) for _, name, ns in
                  (line.split("\t") for line in out.stdout.splitlines()
                   if line.startswith("KERNEL\t"))]
        else:
            # Only the kernels inside the NVTX range around the timed forwards.
            pt = ncu([sys.executable, "-c", script], ["--nvtx", "--nvtx-include", "fwd/"])
        summary(f"PyTorch {what}", pt, CALLS, warm_up_included=False)


if __name__ == "__main__":
    main()
