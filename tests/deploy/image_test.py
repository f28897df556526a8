#!/usr/bin/env python3
"""A container image of forecastd, run with podman as an operator runs it.

Starts the image (default localhost/forecastd:cpu, from scripts/container/build-images.sh; the
CUDA image, localhost/forecastd:cuda, runs the same checks on a host without a GPU, where its
`--devices=all` is the CPU alone) with its own command line, a fresh named volume on /models
(seeded from the image's demo models) and its gRPC and metrics ports published on free loopback
ports, then checks:
  0. `forecastd --version` in the image names the GPU libraries of its variant (the image's
     io.forecastd.variant label): CUDA, cuDNN and NCCL for cuda, "CPU only" for cpu;
  1. the container's process runs as the image's non-root user (uid 10001);
  2. its HEALTHCHECK (forecastd-health against 127.0.0.1:8001) reports healthy;
  3. forecastctl on the host predicts demo_lstm through the published port, and the forecast is
     the one a forecastd on the host gives for the same window (the host build's binaries);
  4. /metrics answers on the published metrics port with forecastd's series;
  5. a Train (the series sent inline) publishes a new version of demo_lstm into the volume, and
     after `podman restart` the model serves that version;
  6. `podman stop` drains the daemon and the container exits 0 within the grace period.
Exits 0 when every check holds, 1 otherwise, 2 when the image or podman is missing.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_util import free_port, wait_for  # noqa: E402

FAILURES = []


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what, flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd, timeout=120, check_rc=False):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return p


def forecasts(forecastctl, address, csv, version=None):
    cmd = [forecastctl, "--address", address, "--json", "predict", "demo_lstm", "--csv", csv]
    if version is not None:
        cmd += ["--version", str(version)]
    p = run(cmd, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"predict via {address}: exit {p.returncode}: {p.stderr.strip()}")
    reply = json.loads(p.stdout)

    def flat(x):
        return [v for item in x for v in flat(item)] if isinstance(x, list) else [float(x)]
    return flat(reply["forecasts"]), int(reply["version"])


def training_csv(path, rows=600):
    """Closes of the demo models' four indices: smooth swings around their 1998 levels."""
    with open(path, "w") as f:
        f.write("DAX,SMI,CAC,FTSE\n")
        for t in range(rows):
            f.write(f"{5000 + 300 * math.sin(t / 9):.2f},{7000 + 250 * math.cos(t / 23):.2f},"
                    f"{3800 + 150 * math.sin(t / 5 + 1):.2f},{5800 + 200 * math.cos(t / 7):.2f}\n")


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", default="localhost/forecastd:cpu")
    ap.add_argument("--bin-dir", default=os.path.join(repo, "build"),
                    help="the host build, for forecastctl and the reference forecastd")
    ap.add_argument("--forecastctl", help="default: BIN_DIR/client/forecastctl")
    ap.add_argument("--forecastd", help="default: BIN_DIR/server/forecastd")
    ap.add_argument("--podman", default="podman")
    args = ap.parse_args(argv)

    if "CONTAINERS_CONF" not in os.environ:
        # As scripts/container/build-images.sh: no raised resource limits, which some sandboxes
        # refuse.
        conf_dir = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                "forecastd")
        os.makedirs(conf_dir, exist_ok=True)
        conf = os.path.join(conf_dir, "containers.conf")
        with open(conf, "w") as f:
            f.write("[containers]\ndefault_ulimits = []\n")
        os.environ["CONTAINERS_CONF"] = conf
    podman = shutil.which(args.podman)
    forecastctl = args.forecastctl or os.path.join(args.bin_dir, "client", "forecastctl")
    forecastd = args.forecastd or os.path.join(args.bin_dir, "server", "forecastd")
    if podman is None or run([podman, "image", "exists", args.image]).returncode != 0:
        print(f"image_test: no podman, or no image {args.image} "
              "(make images builds it)", file=sys.stderr)
        return 2
    for binary in (forecastctl, forecastd):
        if not os.access(binary, os.X_OK):
            print(f"image_test: {binary} missing (make build)", file=sys.stderr)
            return 2
    # 0. The variant's build.
    variant = run([podman, "image", "inspect", args.image, "--format",
                   '{{index .Config.Labels "io.forecastd.variant"}}']).stdout.strip()
    version = run([podman, "run", "--rm", "--runtime", "runc", args.image, "--version"])
    line = version.stdout.strip()
    wanted = {"cuda": ", CUDA ", "cpu": ", CPU only"}.get(variant)
    check(version.returncode == 0 and wanted is not None and wanted in line
          and (variant != "cuda" or (", cuDNN " in line and ", NCCL " in line)),
          f"0 forecastd --version in the {variant or '(unlabelled)'} image: {line!r}")
    if variant == "cuda":
        # Every library it loads is in the image, except the driver's, which the NVIDIA
        # container toolkit mounts from the host.
        ldd = run([podman, "run", "--rm", "--runtime", "runc", "--entrypoint", "ldd", args.image,
                   "/usr/local/bin/forecastd"])
        missing = sorted({ln.split()[0] for ln in ldd.stdout.splitlines() if "not found" in ln})
        gpu_libs = sorted({ln.split()[0] for ln in ldd.stdout.splitlines()
                           if re.match(r"\s*lib(cudart|cublas|cublasLt|cudnn|nccl)\.so", ln)
                           and "=> /" in ln})
        check(ldd.returncode == 0 and len(gpu_libs) == 5
              and set(missing) <= {"libcuda.so.1", "libnvidia-ml.so.1"},
              f"0 in the image forecastd loads {', '.join(gpu_libs)}; not there: "
              f"{', '.join(missing) or 'nothing'} (the driver's, mounted at run time)")
    name = f"forecastd-image-test-{os.getpid()}"
    volume = f"{name}-models"
    grpc_port, metrics_port = free_port(), free_port()
    address = f"127.0.0.1:{grpc_port}"
    sample = os.path.join(repo, "models", "sample_input.csv")
    work = tempfile.mkdtemp(prefix="forecastd-image-test-")
    host = None
    try:
        run([podman, "volume", "create", volume], check_rc=True)
        start = time.monotonic()
        run([podman, "run", "-d", "--name", name, "--runtime", "runc",
             "-p", f"127.0.0.1:{grpc_port}:8001", "-p", f"127.0.0.1:{metrics_port}:8002",
             "-v", f"{volume}:/models", args.image], check_rc=True)
        print(f"image_test: {args.image} as {name}, gRPC on {address}, metrics on "
              f"127.0.0.1:{metrics_port}", flush=True)

        # 1. The user.
        uid = run([podman, "exec", name, "id", "-u"]).stdout.strip()
        check(uid == "10001", f"1 the daemon runs as uid {uid} (expected 10001, not root)")

        # 2. The image's own health check, once the daemon serves.
        def healthy():
            return run([podman, "healthcheck", "run", name]).returncode == 0
        try:
            wait_for("healthcheck", healthy, 90)
            check(True, f"2 HEALTHCHECK (forecastd-health) healthy after "
                        f"{time.monotonic() - start:.1f} s")
        except RuntimeError as e:
            check(False, f"2 HEALTHCHECK: {e}")

        # 3. A forecast through the published port, against the host build's.
        got, version = forecasts(forecastctl, address, sample)
        host_port, host_metrics = free_port(), free_port()
        models = os.path.join(work, "models")
        shutil.copytree(os.path.join(repo, "models"), models)
        host = subprocess.Popen(
            [forecastd, "--model-repository", models, "--devices", "cpu",
             "--grpc-address", f"127.0.0.1:{host_port}", "--http-address", "",
             "--metrics-address", f"127.0.0.1:{host_metrics}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        want = wait_for("the host forecastd", lambda: _try(
            lambda: forecasts(forecastctl, f"127.0.0.1:{host_port}", sample)), 30)[0]
        diff = max((abs(a - b) / max(1.0, abs(b)) for a, b in zip(got, want)), default=math.inf)
        check(len(got) == len(want) and len(got) > 0 and diff <= 1e-5,
              f"3 predict demo_lstm v{version} through the published port: {len(got)} numbers, "
              f"max relative difference from the host build's {diff:.2e}")

        # 4. Metrics.
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                      timeout=10).read().decode()
        check("forecastd_requests_total" in text and 'model="demo_lstm"' in text,
              f"4 /metrics on the published port: {len(text.splitlines())} lines, "
              "forecastd_requests_total for demo_lstm")

        # 5. Train into the volume; the version survives a restart.
        csv = os.path.join(work, "series.csv")
        training_csv(csv)
        train = run([forecastctl, "--address", address, "train", "demo_lstm", "--inline-csv",
                     csv, "--epochs", "2", "--promote"], timeout=300)
        check(train.returncode == 0, f"5 train demo_lstm (2 epochs, inline CSV, --promote): exit "
                                     f"{train.returncode} {train.stderr.strip()[-300:]}")
        after_train = forecasts(forecastctl, address, sample)[1]
        run([podman, "restart", "--time", "45", name], timeout=120, check_rc=True)
        wait_for("healthcheck after the restart", healthy, 90)
        after_restart = forecasts(forecastctl, address, sample)[1]
        check(after_train > version and after_restart == after_train,
              f"5 the trained version {after_train} (was {version}) serves after `podman "
              f"restart` ({after_restart})")

        # 6. Stop: the daemon drains and exits 0 within the grace period.
        t0 = time.monotonic()
        run([podman, "stop", "--time", "45", name], timeout=120, check_rc=True)
        stopped_s = time.monotonic() - t0
        code = run([podman, "inspect", name, "--format", "{{.State.ExitCode}}"]).stdout.strip()
        check(code == "0" and stopped_s < 45,
              f"6 podman stop: exit code {code} after {stopped_s:.1f} s (grace 45 s)")
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        check(False, f"image_test: {e}")
    finally:
        if host is not None:
            host.terminate()
            host.wait(timeout=30)
        logs = run([podman, "logs", "--tail", "5", name]).stdout if FAILURES else ""
        if logs:
            print("image_test: the container's last log lines:\n" + logs)
        run([podman, "rm", "-f", name])
        run([podman, "volume", "rm", "-f", volume])
        shutil.rmtree(work, ignore_errors=True)
    print("image_test: " + ("all checks hold" if not FAILURES else f"{len(FAILURES)} failed"))
    return 0 if not FAILURES else 1


def _try(fn):
    try:
        return fn()
    except (RuntimeError, subprocess.TimeoutExpired):
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
