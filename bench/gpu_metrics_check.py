"""Starts the bundle's forecastd on the GPU host with --devices cpu,cuda:0, scrapes its
/metrics and checks the per-GPU series NVML feeds (forecastd_gpu_memory_used_bytes,
forecastd_gpu_memory_total_bytes, forecastd_gpu_utilization_ratio for gpu="0"): present, and
the total memory within 1% of what PyTorch reports for the same GPU. Prints one line per check
and exits 0 when all hold. Run by bench/gpu_session.sh.
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, timeout_s=60):
    end = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.2)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "/tmp/bundle/bin/forecastd"
    repo = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    grpc_port, metrics_port = free_port(), free_port()
    with tempfile.TemporaryFile() as log:
        daemon = subprocess.Popen(
            [binary, "--model-repository", os.path.join(repo, "models"), "--devices", "cpu,cuda:0",
             "--grpc-address", f"127.0.0.1:{grpc_port}",
             "--metrics-address", f"127.0.0.1:{metrics_port}"], stdout=log, stderr=log)
        try:
            text = scrape(metrics_port)
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
            log.seek(0)
            daemon_log = log.read().decode(errors="replace")
    series = {}
    for name, gpu, value in re.findall(r'^(forecastd_gpu_\w+)\{gpu="(\d+)"\} (\S+)$', text, re.M):
        series[(name, gpu)] = float(value)
    ok = True

    def check(cond, what):
        nonlocal ok
        ok &= bool(cond)
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")

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
        print(daemon_log[-3000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
