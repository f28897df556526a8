"""A training job whose ranks span two forecastd daemons, on a host with two GPUs: each daemon
is given one GPU (CUDA_VISIBLE_DEVICES), exactly as two hosts would each have theirs. Checks:
  1. a job submitted to the coordinating daemon with the other daemon as its worker
     (TrainingConfig.workers, through forecastctl train --spec) succeeds: the coordinator says
     the worker runs rank 1 of 2, the worker says it ran those ranks, the coordinator publishes
     a version with finite losses and the worker publishes nothing;
  2. a worker SIGKILLed mid-job: the coordinator's job fails within the collective timeout
     (--train-collective-timeout) plus a margin, its error names the lost worker, nothing is
     published, and Predict on the coordinator answers every call before, during and after
     (latencies printed);
  3. a job naming a worker that is gone is refused at submission with UNAVAILABLE.
Prints one line per check and exits 0 when all hold. Run by bench/gpu_session.sh on hosts with
two or more GPUs:
  python3 bench/gpu_two_daemon_check.py --bin-dir /tmp/bundle/bin
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_daemon_check import REPO, Checks, Daemon, ctl, ctl_command, write_series_csv  # noqa: E402
from gpu_multi_daemon_check import (PredictLoad, demo_models, latency_table, nccl_env,  # noqa: E402
                                    windows_json)

MODEL = "demo_lstm"


class Plan:
    """What PredictLoad needs: forecastctl predict against one daemon."""

    def __init__(self, bin_dir, grpc_port):
        self.bin_dir, self.grpc_port = bin_dir, grpc_port

    def predict(self, model, version=0):
        extra = ("--version", str(version)) if version else ()
        return ctl_command(self.bin_dir, self.grpc_port, "predict", model, "--json-input", "-",
                           "-o", "json", *extra)


def train_spec(path, csv_name, epochs, batch, worker_address):
    spec = {"model": MODEL,
            "training": {"data": {"csvPath": csv_name}, "epochs": epochs, "batchSize": batch,
                         "seed": "7",
                         "workers": [{"address": worker_address, "devices": ["cuda:0"]}]}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)


def submit(bin_dir, daemon, spec_path):
    """(exit code, job id or "", stderr) of forecastctl train --spec --detach."""
    out = subprocess.run(ctl_command(bin_dir, daemon.grpc_port, "train", "--spec", spec_path,
                                     "--detach", "--json", timeout_s=120),
                         capture_output=True, text=True, timeout=180)
    job = json.loads(out.stdout).get("jobId", "") if out.returncode == 0 else ""
    return out.returncode, job, out.stderr.strip()


def wait_job(bin_dir, daemon, job, timeout_s):
    """The job's final TrainJobInfo (JSON), or its last one when timeout_s passes."""
    end = time.time() + timeout_s
    while True:
        info = ctl(bin_dir, daemon, "jobs", "show", job, "--json")
        if info.get("state") != "TRAIN_JOB_RUNNING" or time.time() > end:
            return info
        time.sleep(0.5)


def versions(bin_dir, daemon):
    status = ctl(bin_dir, daemon, "models", "show", MODEL, "--json")
    return sorted(int(v) for v in status.get("versions", []))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default="/tmp/bundle/bin")
    ap.add_argument("--rows", type=int, default=20000, help="rows of the synthetic series")
    ap.add_argument("--collective-timeout-s", type=float, default=10.0)
    ap.add_argument("--kill-after-s", type=float, default=6.0,
                    help="how long the second job runs before its worker is killed")
    args = ap.parse_args(argv)

    check = Checks()
    scratch = tempfile.mkdtemp(prefix="forecastd-two-daemons-")
    daemons = []
    try:
        coordinator_repo = os.path.join(scratch, "models")
        shutil.copytree(os.path.join(REPO, "models"), coordinator_repo)
        worker_repo = os.path.join(scratch, "worker-models")
        os.makedirs(worker_repo)
        data_dir = os.path.join(scratch, "data")
        os.makedirs(data_dir)
        config = demo_models(coordinator_repo)[MODEL]
        csv_name = f"{MODEL}.csv"
        write_series_csv(os.path.join(data_dir, csv_name), config["featureNames"], args.rows,
                         random.Random(3))
        env, _ = nccl_env(args.bin_dir)
        common = ("--data-dir", data_dir, "--train-collective-timeout",
                  str(args.collective_timeout_s))
        worker = Daemon(args.bin_dir, "cuda:0", worker_repo, common,
                        env={**env, "CUDA_VISIBLE_DEVICES": "1"})
        daemons.append(worker)
        coordinator = Daemon(args.bin_dir, "cuda:0", coordinator_repo, common,
                             env={**env, "CUDA_VISIBLE_DEVICES": "0"})
        daemons.append(coordinator)
        for d in daemons:
            ctl(args.bin_dir, d, "models", "list", "--json", wait_s=120)
        worker_address = f"127.0.0.1:{worker.grpc_port}"
        spec = os.path.join(scratch, "job.json")

        # 1. One job, two daemons.
        before = versions(args.bin_dir, coordinator)
        train_spec(spec, csv_name, epochs=2, batch=64, worker_address=worker_address)
        code, job, err = submit(args.bin_dir, coordinator, spec)
        check(code == 0 and job, f"a job with a worker daemon is accepted ({job or err})")
        info = wait_job(args.bin_dir, coordinator, job, 300) if job else {}
        published = int(info.get("publishedVersion", 0))
        check(info.get("state") == "TRAIN_JOB_SUCCEEDED" and published > 0,
              f"it succeeds and publishes version {published} "
              f"({info.get('state')} {info.get('error', '')})")
        clog, wlog = coordinator.log_so_far(), worker.log_so_far()
        check(f"worker {worker_address} runs ranks 1..1 of 2" in clog,
              "the coordinator gave the worker rank 1 of 2")
        check("ranks 1..1 of 2 for" in wlog and "succeeded" in wlog,
              "the worker ran rank 1 of 2 to the end")
        check(not os.path.isdir(os.path.join(worker_repo, MODEL)),
              "the worker published nothing")
        check(versions(args.bin_dir, coordinator) == before + [published],
              "the coordinator published one version")

        # 2. The worker dies mid-job.
        before = versions(args.bin_dir, coordinator)
        rng = random.Random(5)
        load = PredictLoad(Plan(args.bin_dir, coordinator.grpc_port),
                           [(MODEL, windows_json(config, 1, rng))], workers=2)
        load.start()
        time.sleep(2.0)
        train_spec(spec, csv_name, epochs=1000, batch=64, worker_address=worker_address)
        code, job, err = submit(args.bin_dir, coordinator, spec)
        check(code == 0 and job, f"a long job with the worker is accepted ({job or err})")
        job_start = time.time()
        time.sleep(args.kill_after_s)
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
        killed = time.time()
        info = wait_job(args.bin_dir, coordinator, job, args.collective_timeout_s + 60)
        noticed = time.time() - killed
        job_end = time.time()
        time.sleep(3.0)
        load.stop()
        check(info.get("state") == "TRAIN_JOB_FAILED",
              f"the job fails when its worker is killed ({info.get('state')})")
        check(noticed <= args.collective_timeout_s + 15,
              f"within the collective timeout: noticed {noticed:.1f} s after the kill "
              f"(timeout {args.collective_timeout_s:.0f} s)")
        check(f"lost worker {worker_address}" in info.get("error", ""),
              f"its error names the lost worker: {info.get('error', '')[:240]}")
        check(versions(args.bin_dir, coordinator) == before, "nothing was published")
        errors = [c for c in load.calls if c["error"]]
        during = [c for c in load.calls if job_start <= c["start"] <= job_end]
        check(not errors and len(during) >= 3,
              f"Predict answered all {len(load.calls)} calls ({len(during)} during the job), "
              f"errors: {[c['error'] for c in errors[:3]]}")
        table = latency_table(load.calls, [MODEL], job_start, job_end)
        for line in (table.splitlines() if isinstance(table, str) else table):
            print("    " + line)

        # 3. A worker that is gone, at submission.
        code, job, err = submit(args.bin_dir, coordinator, spec)
        check(code != 0 and "UNAVAILABLE" in err and worker_address in err,
              f"a job naming a gone worker is refused: {err[:200]}")
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print("two-daemon training:", "all checks hold" if check.ok else "FAILED")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
