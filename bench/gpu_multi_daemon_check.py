"""forecastd training on two GPUs while it serves, end to end. Starts the bundle's forecastd with
--devices cuda:0,cuda:1 over a copy of the repository's demo models (one model placed on each
GPU through its config.json `instances.devices`), keeps a Predict load on every model through
forecastctl predict (a few calls in flight, each call's latency and error recorded), and while
it runs trains one demo model data-parallel on every GPU (forecastctl train --devices all) on a
synthetic CSV series in the daemon's --data-dir. One line per check, exit 0 when all hold:
  1. the daemon serves the demo models, each loaded on its GPU (forecastctl models list);
  2. the job succeeds, publishes a version, the daemon's log says it trained on cuda:0,cuda:1,
     and every epoch's train loss is finite;
  3. Predict answered every call before, during and after the job (no errors, finite
     forecasts), at least --min-overlap calls while the job ran; p50 / p99 of the calls in each
     phase are printed (client wall time of one forecastctl call, and the server's total_us);
  4. --devices cuda:0,cuda:7 is refused with INVALID_ARGUMENT, and --devices all with a batch
     size that two GPUs cannot share with INVALID_ARGUMENT "does not split evenly";
  5. the published version, promoted, answers forecastctl predict with finite forecasts.
Sized to finish within three minutes on two H100s, daemon start included (an estimate from
the step count, not yet timed); --quick runs a quarter of the steps. Run by bench/gpu_session.sh
on hosts with two GPUs or more:
  python3 bench/gpu_multi_daemon_check.py --bin-dir /tmp/bundle/bin [--quick]
  python3 bench/gpu_multi_daemon_check.py --dry-run          the commands, nothing run
  python3 bench/gpu_multi_daemon_check.py --self-test --bin-dir DIR   the same steps on a CPU
      daemon (--devices cpu, DIR holding a build's forecastd and forecastctl): exercises this
      script, not the GPUs; check 4's second refusal then only asks for INVALID_ARGUMENT (a
      CPU daemon has no GPU for "all")
The client latency includes starting forecastctl (a new process and gRPC channel per call),
so compare the phases with each other, not with load_gen's figures.
"""

import argparse
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench_report import text_table
from gpu_daemon_check import (REPO, Checks, Daemon, ctl, ctl_command, daemon_command, epoch_losses,
                              numbers, published_versions, write_series_csv)

# Workload sizes: rows of the training series, epochs, global batch, seconds of load before and
# after the job. Full: ~400 steps an epoch (80% of ~16,000 windows, 32 a step, 16 per GPU), ~2,000
# in all; quick: ~150 an epoch, ~450 in all.
SIZES = {
    "full": {"rows": 16000, "epochs": 5, "batch_size": 32, "phase_s": 8.0},
    "quick": {"rows": 6000, "epochs": 3, "batch_size": 32, "phase_s": 4.0},
    "self-test": {"rows": 1500, "epochs": 2, "batch_size": 32, "phase_s": 3.0},
}
PHASES = ("before", "during", "after")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="The checks and sizes are described at the top of this file.")
    ap.add_argument("--bin-dir", default="/tmp/bundle/bin", help="forecastd and forecastctl")
    ap.add_argument("--devices", default="cuda:0,cuda:1",
                    help="the daemon's GPUs (--devices of forecastd), two or more")
    ap.add_argument("--model", default="demo_lstm", help="the demo model to train")
    ap.add_argument("--quick", action="store_true", help="a shorter series, fewer epochs")
    ap.add_argument("--self-test", action="store_true",
                    help="the same steps against a CPU daemon (--devices cpu), to test this script")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the commands it would run; start nothing")
    ap.add_argument("--rows", type=int, help="rows of the training series")
    ap.add_argument("--epochs", type=int, help="epochs of the job")
    ap.add_argument("--batch-size", type=int,
                    help="global batch (windows per step, split over the GPUs)")
    ap.add_argument("--phase-s", type=float, help="seconds of load before and after the job")
    ap.add_argument("--load-workers", type=int, default=2,
                    help="forecastctl predict calls in flight at once (default 2)")
    ap.add_argument("--min-overlap", type=int, default=5,
                    help="predict calls that must fall within the job (default 5)")
    ap.add_argument("--train-timeout-s", type=float, default=150,
                    help="longest the job may take (default 150 s)")
    args = ap.parse_args(argv)
    sizes = SIZES["self-test" if args.self_test else "quick" if args.quick else "full"]
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.self_test:
        args.devices = "cpu"
        args.gpus = []
        args.serve_on = ["cpu"]
    else:
        args.gpus = [d.strip() for d in args.devices.split(",") if d.strip()]
        if len(args.gpus) < 2 or not all(re.fullmatch(r"cuda:\d+", d) for d in args.gpus):
            ap.error(f"--devices {args.devices}: two or more cuda:<i>, comma-separated")
        if args.batch_size % len(args.gpus) != 0:
            ap.error(f"--batch-size {args.batch_size}: a multiple of {len(args.gpus)} (the GPUs)")
        args.serve_on = args.gpus
    if args.rows < 200 or args.epochs < 1 or args.batch_size < 2 or args.phase_s <= 0:
        ap.error("--rows >= 200, --epochs >= 1, --batch-size >= 2, --phase-s > 0")
    if args.load_workers < 1 or args.min_overlap < 0:
        ap.error("--load-workers >= 1, --min-overlap >= 0")
    return args


def demo_models(repository):
    """{name: config} of the model directories under `repository`, by name."""
    models = {}
    for name in sorted(os.listdir(repository)):
        path = os.path.join(repository, name, "config.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                models[name] = json.load(f)
    return models


def place_models(repository, models, devices):
    """Puts model i on devices[i % len(devices)] (config.json `instances.devices`), so every
    GPU serves while the job trains on all of them; returns {name: device}."""
    placed = {}
    for i, (name, config) in enumerate(models.items()):
        device = devices[i % len(devices)]
        config.setdefault("instances", {})["devices"] = [device]
        with open(os.path.join(repository, name, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        placed[name] = device
    return placed


def windows_json(config, batch, rng):
    """`batch` random windows for the model, around the demo data's scale, as forecastctl's JSON."""
    T, F = config["lookback"], len(config["featureNames"])
    return json.dumps([[[rng.gauss(50.0, 20.0) for _ in range(F)] for _ in range(T)]
                       for _ in range(batch)])


def nccl_env(bin_dir):
    """The environment for forecastd: when its libnccl is not found on this host, the one
    PyTorch's NCCL wheel ships is added to LD_LIBRARY_PATH. Returns (env, the directory added)."""
    env = dict(os.environ)
    try:
        ldd = subprocess.run(["ldd", os.path.join(bin_dir, "forecastd")], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return env, None
    if not re.search(r"libnccl\S*\s+=>\s+not found", ldd):
        return env, None
    try:
        import nvidia.nccl  # the nvidia-nccl wheel that PyTorch's CUDA builds depend on
        lib = os.path.join(list(nvidia.nccl.__path__)[0], "lib")
    except (ImportError, IndexError):
        return env, None
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (env.get("LD_LIBRARY_PATH"), lib) if p)
    return env, lib


class Plan:
    """Every command line of one run, so that --dry-run prints what a run executes."""

    def __init__(self, args, scratch, grpc_port=None):
        self.args = args
        self.repository = os.path.join(scratch, "models")
        self.data_dir = os.path.join(scratch, "data")
        self.csv_name = f"{args.model}.csv"
        self.daemon_args = ("--data-dir", self.data_dir)
        self.grpc_port = grpc_port  # the daemon's, once it runs
        self.train_devices = "cpu" if args.self_test else "all"
        # The device string the job reports: its ranks' GPUs, in the daemon's order.
        self.trained_on = "cpu" if args.self_test else ",".join(args.gpus)
        self.odd_batch = args.batch_size + 1

    def daemon(self, grpc_port, metrics_port):
        return daemon_command(self.args.bin_dir, self.args.devices, self.repository, grpc_port,
                              metrics_port, self.daemon_args)

    def ctl(self, *args, timeout_s=60):
        return ctl_command(self.args.bin_dir, self.grpc_port, *args, timeout_s=timeout_s)

    def train(self, devices, batch_size, epochs, base_version=1):
        return self.ctl("train", self.args.model, "--csv", self.csv_name, "--epochs", str(epochs),
                        "--batch-size", str(batch_size), "--devices", devices, "--base-version",
                        str(base_version), "--seed", "7", "--json",
                        timeout_s=int(self.args.train_timeout_s))

    def main_train(self):
        return self.train(self.train_devices, self.args.batch_size, self.args.epochs)

    def refusals(self):
        """(what, command, the phrase its error must hold besides INVALID_ARGUMENT)."""
        split = "" if self.args.self_test else "does not split evenly"
        return [("--devices cuda:0,cuda:7", self.train("cuda:0,cuda:7", self.args.batch_size, 1),
                 ""),
                (f"--devices all --batch-size {self.odd_batch}",
                 self.train("all", self.odd_batch, 1), split)]

    def predict(self, model, version=0):
        extra = ("--version", str(version)) if version else ()
        return self.ctl("predict", model, "--json-input", "-", "-o", "json", *extra)

    def promote_args(self, version):
        return ("models", "promote", self.args.model, str(version), "--json")


class PredictLoad:
    """`workers` threads, each running forecastctl predict calls back to back, round-robin
    over the targets ((model, windows JSON)); every call's start and end (time.time()), model,
    error (None when it answered with finite forecasts) and the server's total_us go in
    `calls`."""

    def __init__(self, plan, targets, workers):
        self.plan = plan
        self.targets = targets
        self.calls = []
        self.mu = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(w,), daemon=True)
                        for w in range(workers)]

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=120)

    def run(self, worker):
        i = worker
        while not self.stopping.is_set():
            model, payload = self.targets[i % len(self.targets)]
            i += 1
            start = time.time()
            error, server_us = None, None
            try:
                out = subprocess.run(self.plan.predict(model), input=payload, capture_output=True,
                                     text=True, timeout=60)
                if out.returncode != 0:
                    error = f"exit {out.returncode}: {out.stderr.strip()[-200:]}"
                else:
                    answer = json.loads(out.stdout)
                    values = list(numbers(answer["forecasts"]))
                    server_us = float(answer["timing"]["totalUs"])
                    if not values or not all(math.isfinite(v) for v in values):
                        error = f"forecasts not all finite: {values[:6]}"
            except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
                error = f"{type(e).__name__}: {e}"
            with self.mu:
                self.calls.append({"start": start, "end": time.time(), "model": model,
                                   "error": error, "server_us": server_us})


def finite(value):
    """A number (or protobuf JSON's "NaN" / "Infinity" text) that is finite; None is not."""
    return value is not None and math.isfinite(float(value))


def phase_of(call, job_start, job_end):
    """before: ended before the job started; after: started after it ended; else during."""
    if call["end"] < job_start:
        return "before"
    if call["start"] > job_end:
        return "after"
    return "during"


def nearest_rank(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def latency_table(calls, models, job_start, job_end):
    """Rows per phase: every model together, then each model; the latencies are those of the
    calls answered."""
    head = ["phase", "model", "calls", "errors", "p50 ms", "p99 ms", "server p50 us",
            "server p99 us"]
    body = []

    def fmt(v, scale):
        return "-" if v is None else f"{v * scale:,.1f}"

    for phase in PHASES:
        in_phase = [c for c in calls if phase_of(c, job_start, job_end) == phase]
        for model in ("all", *models):
            subset = [c for c in in_phase if model == "all" or c["model"] == model]
            answered = [c for c in subset if c["error"] is None]
            client_s = [c["end"] - c["start"] for c in answered]
            server_us = [c["server_us"] for c in answered]
            body.append([phase, model, str(len(subset)),
                         str(sum(c["error"] is not None for c in subset)),
                         fmt(nearest_rank(client_s, 0.5), 1e3),
                         fmt(nearest_rank(client_s, 0.99), 1e3),
                         fmt(nearest_rank(server_us, 0.5), 1),
                         fmt(nearest_rank(server_us, 0.99), 1)])
    return text_table(head, body)


def last_json_line(text, key):
    """The last line of forecastctl's JSON-lines output that is an object holding `key`."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if key in item:
                found = item[key]
    return found


def dry_run(args):
    scratch = "<scratch>"
    plan = Plan(args, scratch, "GRPC_PORT")
    models = demo_models(os.path.join(REPO, "models"))
    if args.model not in models:
        print(f"--model {args.model}: not one of {', '.join(models)}", file=sys.stderr)
        return 2
    placed = {name: args.serve_on[i % len(args.serve_on)] for i, name in enumerate(models)}
    q = shlex.join
    print(f"# sizes: {args.rows} rows, {args.epochs} epochs, batch {args.batch_size}, "
          f"{args.phase_s:g} s of load before and after, {args.load_workers} calls in flight")
    print(f"# {scratch}/models: a copy of {os.path.join(REPO, 'models')}, instances.devices: "
          + ", ".join(f"{n} {d}" for n, d in placed.items()))
    print(f"# {scratch}/data/{plan.csv_name}: {args.rows} rows of "
          f"{','.join(models[args.model]['featureNames'])}")
    print(q(plan.daemon("GRPC_PORT", "METRICS_PORT")))
    print(q(plan.ctl("models", "list", "--json")))
    for name in models:
        print(q(plan.predict(name)) + "   # in a loop, a (1, T, F) window JSON on stdin")
    print(q(plan.main_train()))
    for _, command, _ in plan.refusals():
        print(q(command) + "   # refused")
    print(q(plan.ctl(*plan.promote_args("<published version>"))))
    print(q(plan.predict(args.model, "<published version>")) + "   # (4, T, F) windows on stdin")
    return 0


def check_served(check, listed, placed):
    """Check 1: every demo model READY, loaded where place_models put it."""
    by_name = {m["name"]: m for m in listed}
    where = []
    good = set(placed) <= set(by_name)
    for name, device in placed.items():
        model = by_name.get(name, {})
        devices = [v.get("device") for v in model.get("loaded", [])]
        versions = [str(v.get("version")) for v in model.get("loaded", [])]
        good &= model.get("state") == "MODEL_READY" and devices == [device]
        where.append(f"{name} v{','.join(versions) or '-'} on {','.join(devices) or 'nothing'}")
    return check(good, f"1 served: {'; '.join(where)} (expected {placed})")


def run(args):
    rng = random.Random(11)
    check = Checks()
    scratch = tempfile.mkdtemp(prefix="forecastd-gpu-multi-check-")
    plan = Plan(args, scratch)
    shutil.copytree(os.path.join(REPO, "models"), plan.repository)
    os.makedirs(plan.data_dir)
    models = demo_models(plan.repository)
    if args.model not in models:
        print(f"--model {args.model}: not one of {', '.join(models)}", file=sys.stderr)
        shutil.rmtree(scratch, ignore_errors=True)
        return 2
    placed = place_models(plan.repository, models, args.serve_on)
    write_series_csv(os.path.join(plan.data_dir, plan.csv_name),
                     models[args.model]["featureNames"], args.rows, rng)
    env, nccl_lib = nccl_env(args.bin_dir)
    if nccl_lib:
        print(f"  (forecastd finds no libnccl here; using PyTorch's, {nccl_lib})")
    print(f"  {args.devices}: {args.rows} rows, {args.epochs} epochs, batch {args.batch_size}, "
          f"{args.phase_s:g} s of load before and after the job, {args.load_workers} calls in "
          f"flight")

    daemon = Daemon(args.bin_dir, args.devices, plan.repository, plan.daemon_args, env=env)
    assert daemon.command == plan.daemon(daemon.grpc_port, daemon.metrics_port)
    plan.grpc_port = daemon.grpc_port
    load = None
    log = ""
    try:
        listed = ctl(args.bin_dir, daemon, "models", "list", "--json", wait_s=180)["models"]
        if not check_served(check, listed, placed):
            raise RuntimeError("the models do not serve as expected; nothing else to check")

        # --- 2: train under load.
        targets = [(name, windows_json(config, 1, rng)) for name, config in models.items()]
        load = PredictLoad(plan, targets, args.load_workers)
        load.start()
        time.sleep(args.phase_s)
        train_start = time.time()
        out = subprocess.run(plan.main_train(), capture_output=True, text=True,
                             timeout=args.train_timeout_s)
        train_end = time.time()
        finished = last_json_line(out.stdout, "finished") or {}
        job_start = float(finished.get("createdUnixMs", 0)) / 1e3 or train_start
        job_end = float(finished.get("finishedUnixMs", 0)) / 1e3 or train_end
        time.sleep(args.phase_s)
        load.stop()
        calls = list(load.calls)

        log = daemon.log_so_far()
        version = int(finished.get("publishedVersion", 0))
        losses = epoch_losses(log, args.model)
        final = finished.get("latest", {}).get("trainLoss")
        on = re.findall(rf"training '{re.escape(args.model)}' on (\S+)", log)
        epochs_run = int(finished.get("epochsRun", 0))
        check(out.returncode == 0 and finished.get("state") == "TRAIN_JOB_SUCCEEDED"
              and version > 1 and version in published_versions(log, args.model)
              and on == [plan.trained_on] and epochs_run == args.epochs
              and len(losses) == args.epochs and all(finite(v) for v in losses) and finite(final),
              f"2 train {args.model} --devices {plan.train_devices} --batch-size {args.batch_size}"
              f": exit {out.returncode}, {finished.get('state', 'no final state')} in "
              f"{job_end - job_start:.1f} s, version {version or '-'} published, log: trained on "
              f"{','.join(on) or '?'} (expected {plan.trained_on}), epoch losses "
              f"{losses} ({epochs_run} of {args.epochs} epochs), final {final}"
              + (f"; {out.stderr.strip()[-300:]}" if out.returncode != 0 else ""))

        # --- 3: every call answered; latency per phase.
        count = {p: sum(phase_of(c, job_start, job_end) == p for c in calls) for p in PHASES}
        errors = [c for c in calls if c["error"] is not None]
        check(not errors and count["before"] > 0 and count["after"] > 0
              and count["during"] >= args.min_overlap,
              f"3 predict under load: {len(calls)} calls (before {count['before']}, during the "
              f"job {count['during']}, after {count['after']}; at least {args.min_overlap} "
              f"during), {len(errors)} errors")
        for c in errors[:5]:
            print(f"    error, {phase_of(c, job_start, job_end)} the job, {c['model']}: "
                  f"{c['error']}")
        print("    " + latency_table(calls, list(models), job_start, job_end)
              .replace("\n", "\n    "))

        # --- 4: refusals (no job of the model runs now, so placement is what answers).
        answers = []
        good = True
        for what, command, phrase in plan.refusals():
            r = subprocess.run(command, capture_output=True, text=True, timeout=120)
            said = r.stderr.strip().splitlines()[-1:] or [""]
            good &= (r.returncode == 1 and "INVALID_ARGUMENT" in said[0]
                     and phrase in said[0])
            answers.append(f"{what}: exit {r.returncode}, {said[0][:160]!r}")
        check(good, "4 refused: " + "; ".join(answers))

        # --- 5: the new version serves.
        if version > 0:
            promoted = ctl(args.bin_dir, daemon, *plan.promote_args(version))
            served_on = [v.get("device") for v in promoted.get("loaded", [])
                         if str(v.get("version")) == str(version)]
            r = subprocess.run(plan.predict(args.model, version),
                               input=windows_json(models[args.model], 4, rng),
                               capture_output=True, text=True, timeout=120)
            answer = json.loads(r.stdout) if r.returncode == 0 else {}
            values = list(numbers(answer.get("forecasts", [])))
            all_finite = bool(values) and all(math.isfinite(v) for v in values)
            check(r.returncode == 0 and int(answer.get("version", 0)) == version and all_finite
                  and promoted.get("servingVersion") in (version, str(version))
                  and served_on == [placed[args.model]],
                  f"5 version {version} promoted (serving {promoted.get('servingVersion')}, on "
                  f"{','.join(served_on) or '?'}): predict B=4 answered by version "
                  f"{answer.get('version', '-')}, {len(values)} numbers, "
                  f"{'all finite' if all_finite else 'NOT all finite'}"
                  + (f"; {r.stderr.strip()[-200:]}" if r.returncode != 0 else ""))
        else:
            check(False, "5 no version was published, none to promote")
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        check(False, f"{type(e).__name__}: {e}")
    finally:
        if load is not None:
            load.stop()
        log = daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if not check.ok:
        print(f"--- daemon's log (tail)\n{log[-4000:]}")
    return 0 if check.ok else 1


def _exit_on_signal(signum, frame):
    # Unwinds through run()'s finally, which stops the load and the daemon and removes the
    # scratch directory.
    raise SystemExit(128 + signum)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        return dry_run(args)
    for name in ("forecastd", "forecastctl"):
        if not os.access(os.path.join(args.bin_dir, name), os.X_OK):
            print(f"gpu_multi_daemon_check.py: no {name} in {args.bin_dir}", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, _exit_on_signal)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
