"""forecastd serving on the GPU host, end to end. Starts the bundle's forecastd twice over the
repository's demo models: once with --devices cuda:0,cpu (the models then serve on the GPU,
as CUDA instances replaying a graph per batch size) and once with --devices cpu. Checks:
  - the GPU daemon reports each model loaded on cuda:0 (forecastctl models list);
  - forecastctl predict on the same random windows, at several batch sizes, gives forecasts
    on the GPU within 1e-4 (relative) of the CPU daemon's;
  - a short fine-tune of each demo model through forecastctl train runs on cuda:0 (the
    daemon's log says where its steps ran), publishes a version and its loss is finite;
  - its /metrics has the per-GPU series NVML feeds (forecastd_gpu_memory_used_bytes,
    forecastd_gpu_memory_total_bytes, forecastd_gpu_utilization_ratio for gpu="0"), the total
    memory within 1% of what PyTorch reports for the same GPU.
Prints one line per check and exits 0 when all hold. Run by bench/gpu_session.sh:
  python3 bench/gpu_daemon_check.py /tmp/bundle/bin
"""

import json
import math
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, timeout_s=120):
    end = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.2)


class Daemon:
    """forecastd on free ports, its log in a temp file; stopped with SIGTERM."""

    def __init__(self, bin_dir, devices, repository=os.path.join(REPO, "models")):
        self.grpc_port, self.metrics_port = free_port(), free_port()
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "forecastd"), "--model-repository", repository,
             "--devices", devices, "--grpc-address", f"127.0.0.1:{self.grpc_port}",
             "--metrics-address", f"127.0.0.1:{self.metrics_port}", "--http-address", ""],
            stdout=self.log, stderr=self.log)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


def ctl(bin_dir, daemon, *args, stdin=None, wait_s=0):
    """forecastctl's JSON answer; with wait_s, retries while the daemon is still starting."""
    end = time.time() + wait_s
    while True:
        out = subprocess.run([os.path.join(bin_dir, "forecastctl"), "--address",
                              f"127.0.0.1:{daemon.grpc_port}", "--timeout", "60", *args],
                             input=stdin, capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            return json.loads(out.stdout)
        if time.time() > end or daemon.proc.poll() is not None:
            raise RuntimeError(f"forecastctl {' '.join(args)}: {out.stderr.strip()}")
        time.sleep(0.5)


def numbers(value):
    """The numbers of a nested list, flattened in order."""
    if isinstance(value, list):
        for v in value:
            yield from numbers(v)
    else:
        yield float(value)


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/bundle/bin"
    ok = True

    def check(cond, what):
        nonlocal ok
        ok &= bool(cond)
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")

    # The GPU daemon trains into a copy of the demo repository.
    scratch = tempfile.mkdtemp(prefix="forecastd-gpu-check-")
    repository = os.path.join(scratch, "models")
    shutil.copytree(os.path.join(REPO, "models"), repository)
    gpu, cpu = Daemon(bin_dir, "cuda:0,cpu", repository), Daemon(bin_dir, "cpu")
    logs = {}
    text = ""
    listed = []
    try:
        # The gRPC port opens once the models are loaded (and their CUDA graphs captured).
        listed = ctl(bin_dir, gpu, "models", "list", "--json", wait_s=180)["models"]
        ctl(bin_dir, cpu, "models", "list", "--json", wait_s=180)
        text = scrape(gpu.metrics_port)
        rng = random.Random(5)
        for model in listed:
            name = model["name"]
            devices = [v.get("device") for v in model.get("loaded", [])]
            check(devices == ["cuda:0"], f"{name}: loaded on {devices}")
            config = model["config"]
            T, F = config["lookback"], len(config["featureNames"])
            for batch in (1, 3, 8):
                # Around the features' scale in the demo data; the models standardise inputs.
                windows = [[[rng.gauss(50.0, 20.0) for _ in range(F)] for _ in range(T)]
                           for _ in range(batch)]
                payload = json.dumps(windows)
                got = list(numbers(ctl(bin_dir, gpu, "predict", name, "--json-input", "-",
                                       "-o", "json", stdin=payload)["forecasts"]))
                want = list(numbers(ctl(bin_dir, cpu, "predict", name, "--json-input", "-",
                                        "-o", "json", stdin=payload)["forecasts"]))
                worst = max((abs(g - w) / (1e-4 + abs(w)) for g, w in zip(got, want)),
                            default=float("inf"))
                check(len(got) == len(want) and worst < 1e-4,
                      f"{name} B={batch}: GPU forecast vs CPU daemon's, max rel err {worst:.1e}"
                      f" over {len(got)} numbers")
        for model in listed:
            name = model["name"]
            features = model["config"]["featureNames"]
            csv = os.path.join(scratch, f"{name}.csv")
            with open(csv, "w", encoding="utf-8") as f:
                f.write(",".join(features) + "\n")
                for i in range(400):
                    f.write(",".join(f"{50 + 20 * math.sin(0.1 * i + k) + rng.gauss(0, 1):.4f}"
                                     for k in range(len(features))) + "\n")
            out = subprocess.run(
                [os.path.join(bin_dir, "forecastctl"), "--address",
                 f"127.0.0.1:{gpu.grpc_port}", "--timeout", "300", "train", name,
                 "--inline-csv", csv, "--epochs", "2", "--batch-size", "16", "--base-version",
                 str(model["loaded"][0]["version"])],
                capture_output=True, text=True, timeout=400)
            check(out.returncode == 0, f"{name}: forecastctl train exit {out.returncode} "
                                       f"{out.stderr.strip()[-300:]}")
            print("    " + "\n    ".join(out.stdout.strip().splitlines()[-3:]))
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        check(False, f"{type(e).__name__}: {e}")
    finally:
        logs["gpu"] = gpu.stop()
        logs["cpu"] = cpu.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    check("training runs on cuda:0" in logs["gpu"], "the GPU daemon trains on cuda:0")
    for model in listed:
        name = model["name"]
        check(f"training '{name}' on cuda:0" in logs["gpu"], f"{name}: training steps ran on cuda:0")
        check(re.search(rf"training '{name}': published version \d+", logs["gpu"]) is not None,
              f"{name}: a version published")
        losses = re.findall(rf"training '{name}': epoch \d+/\d+ train loss (\S+)", logs["gpu"])
        check(len(losses) == 2 and all(math.isfinite(float(v)) for v in losses),
              f"{name}: epoch train losses {losses}")

    series = {}
    for name, gpu_index, value in re.findall(r'^(forecastd_gpu_\w+)\{gpu="(\d+)"\} (\S+)$', text,
                                             re.M):
        series[(name, gpu_index)] = float(value)
    for name in ("forecastd_gpu_memory_used_bytes", "forecastd_gpu_memory_total_bytes",
                 "forecastd_gpu_utilization_ratio"):
        check((name, "0") in series, f'{name}{{gpu="0"}} = {series.get((name, "0"))}')
    total = series.get(("forecastd_gpu_memory_total_bytes", "0"), 0)
    used = series.get(("forecastd_gpu_memory_used_bytes", "0"), -1)
    check(0 < used <= total, "0 < used <= total")
    check(0 <= series.get(("forecastd_gpu_utilization_ratio", "0"), -1) <= 1,
          "utilization ratio in [0, 1]")
    try:
        import torch
        torch_total = torch.cuda.get_device_properties(0).total_memory
        check(abs(total - torch_total) <= 0.01 * torch_total,
              f"total {total:.0f} B vs PyTorch's {torch_total} B")
    except ImportError:
        print("  (no PyTorch here: total memory not cross-checked)")
    if not ok:
        for which, log in logs.items():
            print(f"--- {which} daemon's log (tail)\n{log[-3000:]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
