#!/usr/bin/env python3
"""PyTorch's side of bench/step_gpu.sh: one tick-stream step (state mode) of the same stacked
LSTM / GRU on the same GPU, from the inputs step_gpu_bench wrote into --dir.

A step, as a PyTorch server would run it: gather the B streams' states from the slab with
index_select, one nn.LSTMCell / nn.GRUCell per layer (fp32, TF32 off), write the new states
back with index_copy_. It runs once eagerly from the slab step_gpu_bench started from, and its
result is compared with forecastd's fused step (the top h and the slab after one step: max abs
error). Then --steps-per-graph steps are captured into one CUDA graph and replayed
--replays times, each replay timed between two CUDA events, a step's time being a replay's
divided by its steps, as step_gpu_bench times its own.

Reads step_gpu_bench's JSON lines on stdin (--ours) and prints one table row per B with both
times and the error; with $OUT set, writes the table there too (step_table.txt).
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch


def load(path, dtype, shape):
    return torch.from_numpy(np.fromfile(path, dtype=dtype).reshape(shape))


def build_cells(manifest, params, device):
    lstm = manifest["cell"] == "lstm"
    H, L, F = manifest["H"], manifest["L"], manifest["F"]
    G = 4 if lstm else 3
    cells, at = [], 0
    for layer in range(L):
        inp = F if layer == 0 else H
        cell = (torch.nn.LSTMCell if lstm else torch.nn.GRUCell)(inp, H).to(device)
        with torch.no_grad():
            for p, n in ((cell.weight_ih, G * H * inp), (cell.weight_hh, G * H * H),
                         (cell.bias_ih, G * H), (cell.bias_hh, G * H)):
                p.copy_(params[at:at + n].view_as(p))
                at += n
        cells.append(cell)
    return cells


def make_step(manifest, cells, slab, slots, xn):
    lstm = manifest["cell"] == "lstm"
    H = manifest["H"]
    SL = (2 if lstm else 1) * H

    def step():
        states = slab.index_select(0, slots)  # (B, S)
        inp, new = xn, []
        for layer, cell in enumerate(cells):
            h = states[:, layer * SL:layer * SL + H]
            if lstm:
                c = states[:, layer * SL + H:(layer + 1) * SL]
                h, c = cell(inp, (h, c))
                new += [h, c]
            else:
                h = cell(inp, h)
                new.append(h)
            inp = h
        slab.index_copy_(0, slots, torch.cat(new, dim=1))
        return inp

    return step


def time_graph(step, steps, replays):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up before capture, as PyTorch asks
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            step()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    us = []
    for r in range(replays + 3):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        if r >= 3:
            us.append(1000.0 * start.elapsed_time(stop) / steps)
    return statistics.median(us), min(us)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/step_bench")
    ap.add_argument("--steps-per-graph", type=int, default=20)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--ours", default="-", help="step_gpu_bench's output ('-': stdin)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    ours_lines = (sys.stdin if args.ours == "-" else open(args.ours)).read().splitlines()
    ours = {}
    for line in ours_lines:
        if line.startswith("{"):
            row = json.loads(line)
            ours[row["B"]] = row
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    H, S, F = manifest["H"], manifest["S"], manifest["F"]
    params = load(os.path.join(args.dir, "params.f32"), np.float32, (-1,)).to(device)
    cells = build_cells(manifest, params, device)
    name = f"{manifest['cell']}_h{H}_l{manifest['L']}"
    header = (f"{'case':<14} {'B':>5} {'fused_us':>9} {'cluster_us':>10} {'warp_us':>8} "
              f"{'tiled_us':>9} {'cudnn_us':>9} {'torch_us':>9} {'torch/fused':>11} "
              f"{'err_vs_torch':>12}")
    lines = [f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; GPU time per "
             f"step (median of {args.replays} graph replays of {args.steps_per_graph} steps)",
             header]
    print("\n".join(lines), flush=True)
    for case in manifest["cases"]:
        B, rows = case["B"], case["rows"]
        prefix = os.path.join(args.dir, f"b{B}_")
        slots = load(prefix + "slots.i32", np.int32, (B,)).to(device).long()
        slab = load(prefix + "slab0.f32", np.float32, (rows, S)).to(device)
        xn = load(prefix + "xn.f32", np.float32, (B, F)).to(device)
        step = make_step(manifest, cells, slab, slots, xn)
        with torch.no_grad():
            top = step()
            torch.cuda.synchronize()
            our_slab = load(prefix + "slab1.f32", np.float32, (rows, S)).to(device)
            our_top = load(prefix + "out1.f32", np.float32, (B, H)).to(device)
            err = max((top - our_top).abs().max().item(), (slab - our_slab).abs().max().item())
            torch_us, _ = time_graph(step, args.steps_per_graph, args.replays)
        row = ours.get(B, {})

        def us(path):
            return row[path]["median_us"] if path in row else float("nan")

        line = (f"{name:<14} {B:>5} {us('fused'):>9.2f} {us('cluster'):>10.2f} "
                f"{us('warp'):>8.2f} {us('tiled'):>9.2f} {us('cudnn'):>9.2f} {torch_us:>9.2f} "
                f"{torch_us / us('fused'):>11.2f} {err:>12.2e}")
        lines.append(line)
        print(line, flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "step_table.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
