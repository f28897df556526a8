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
bench/gpu_multi_daemon_check.py (training on two GPUs under load) imports its helpers from here.
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


def daemon_command(bin_dir, devices, repository, grpc_port, metrics_port, extra_args=()):
    """forecastd's command line on the given loopback ports (no REST)."""
    return [os.path.join(bin_dir, "forecastd"), "--model-repository", repository,
            "--devices", devices, "--grpc-address", f"127.0.0.1:{grpc_port}",
            "--metrics-address", f"127.0.0.1:{metrics_port}", "--http-address", "",
            *extra_args]


class Daemon:
    """forecastd on free ports, its log in a temp file; stopped with SIGTERM. extra_args go
    after the standard flags; env, when given, replaces the environment."""

    def __init__(self, bin_dir, devices, repository=os.path.join(REPO, "models"), extra_args=(),
                 env=None):
        self.grpc_port, self.metrics_port = free_port(), free_port()
        self.log = tempfile.TemporaryFile()
        self.command = daemon_command(bin_dir, devices, repository, self.grpc_port,
                                      self.metrics_port, extra_args)
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=self.log, env=env)

    def log_so_far(self):
        """The log written so far, read without moving the offset the daemon writes at."""
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


def ctl_command(bin_dir, grpc_port, *args, timeout_s=60):
    """forecastctl's command line against the daemon on grpc_port; timeout_s per unary call."""
    return [os.path.join(bin_dir, "forecastctl"), "--address", f"127.0.0.1:{grpc_port}",
            "--timeout", str(timeout_s), *args]


def ctl(bin_dir, daemon, *args, stdin=None, wait_s=0):
    """forecastctl's JSON answer; with wait_s, retries while the daemon is still starting."""
    end = time.time() + wait_s
    while True:
        out = subprocess.run(ctl_command(bin_dir, daemon.grpc_port, *args),
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


def write_series_csv(path, features, rows, rng):
    """A synthetic series for training: a header of the feature names, then `rows` rows of
    phase-shifted sines around 50 (the demo data's scale) with N(0, 1) noise."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(features) + "\n")
        for i in range(rows):
            f.write(",".join(f"{50 + 20 * math.sin(0.1 * i + k) + rng.gauss(0, 1):.4f}"
                             for k in range(len(features))) + "\n")


def epoch_losses(log, name):
    """The train loss of each epoch of model `name` that the daemon's log reports, as text."""
    return re.findall(rf"training '{name}': epoch \d+/\d+ train loss (\S+)", log)


def published_versions(log, name):
    """The versions of model `name` that training published, by the daemon's log."""
    return [int(v) for v in re.findall(rf"training '{name}': published version (\d+)", log)]


class Checks:
    """Prints one line per check; ok stays True while every check holds."""

    def __init__(self):
        self.ok = True

    def __call__(self, cond, what):
        self.ok &= bool(cond)
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")
        return bool(cond)


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/bundle/bin"
    check = Checks()

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
            write_series_csv(csv, features, 400, rng)
            out = subprocess.run(
                ctl_command(bin_dir, gpu.grpc_port, "train", name, "--inline-csv", csv,
                            "--epochs", "2", "--batch-size", "16", "--base-version",
                            str(model["loaded"][0]["version"]), timeout_s=300),
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
        check(len(published_versions(logs["gpu"], name)) > 0, f"{name}: a version published")
        losses = epoch_losses(logs["gpu"], name)
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
    if not check.ok:
        for which, log in logs.items():
            print(f"--- {which} daemon's log (tail)\n{log[-3000:]}")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
