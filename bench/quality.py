#!/usr/bin/env python3
"""Forecast quality on the shipped series: forecastd, a PyTorch loop, NeuralForecast, baselines.

Every method forecasts the same evaluation windows of data/eu_stock_markets.csv and
data/taylor.csv (bench/quality_scoring.py: the first floor(0.8 rows) rows train; every origin o
with n_train <= o <= rows - P is forecast from rows [o - T, o)) and is scored in the series'
units. Methods:

  forecastd     one daemon (--devices cpu), `forecastctl train` per (config, seed), forecasts
                of the published version over KServe v2 REST;
  torch         the same ModelConfig built with scripts/forecastd_torch.py and trained by a
                plain PyTorch loop with forecastd's settings (bench/README.md lists them);
  neuralforecast  its LSTM and NHITS (defaults, h=P, input_size=T), one global model per
                series, NeuralForecast.cross_validation(refit=False), in a child process;
  naive, seasonal_naive  the last value; the value one season before the target row.

bench/quality.sh finds the interpreter, installs NeuralForecast when missing and runs this.
Prints the run's context, progress, then a markdown table per series; writes every figure to
OUT/quality.json (rewritten after each method, so an interrupted run keeps what it finished).
"""

import argparse
import copy
import json
import math
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "bench"))

import quality_scoring as qs  # noqa: E402

ARCHS = ("lstm", "gru", "transformer", "mlp")
QUANTILES = [0.1, 0.5, 0.9]
# Training settings of every forecastd and PyTorch-loop run; --batch-size, --lr and --patience
# change them for a whole run.
TRAIN = {"batch": 32, "lr": 1e-3, "patience": 5}


def log(msg):
    print(msg, flush=True)


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def arch_block(arch):
    if arch == "transformer":
        return {"dModel": 32, "numHeads": 4, "numLayers": 2, "dimFeedforward": 64,
                "activation": "ACTIVATION_GELU", "normFirst": True}
    if arch == "mlp":  # NHITS's default block width
        return {"hiddenSize": 512, "numLayers": 2, "activation": "ACTIVATION_RELU"}
    return {"hiddenSize": 32, "numLayers": 2}


SERIES_CSV = "eu_stock_markets_series.csv"  # the long CSV of the "+series" configurations


class Config:
    """One model configuration: architecture, window scaling on or off, quantiles,
    covariates: None, "cal" (the series' calendar features from its timestamps) or "series"
    (one global model over the wide CSV's columns as series of one feature), and the training
    loss: None (MSE, or the pinball loss with quantiles) or "mae" (NeuralForecast's default)."""

    def __init__(self, arch, ws, quantiles=(), cov=None, loss=None):
        self.arch, self.ws, self.quantiles, self.cov = arch, ws, list(quantiles), cov
        self.loss = loss

    @property
    def key(self):
        return (self.arch + ("+ws" if self.ws else "") + ("+q" if self.quantiles else "") +
                (f"+{self.cov}" if self.cov else "") + (f"+{self.loss}" if self.loss else ""))

    def model_name(self, series, seed):
        return (f"q_{series}_{self.arch}{'_ws' if self.ws else ''}"
                f"{'_q' if self.quantiles else ''}{'_' + self.cov if self.cov else ''}"
                f"{'_' + self.loss if self.loss else ''}_s{seed}")

    def csv_name(self, ev):
        return SERIES_CSV if self.cov == "series" else ev.csv_name

    def model_config(self, ev, name):
        features, targets = ev.features, ev.targets
        if self.cov == "series":
            features = targets = ["close"]
        cfg = {"name": name,
               "description": f"bench/quality.sh: {self.key} on {self.csv_name(ev)}",
               "lookback": ev.T, "horizon": ev.P,
               "featureNames": features, "targetNames": targets,
               self.arch: arch_block(self.arch),
               "normalization": "NORMALIZATION_STANDARD"}
        if self.quantiles:
            cfg["quantiles"] = self.quantiles
        if self.ws:
            cfg["windowScaling"] = dict(ev.quantile_window_scaling if self.quantiles
                                        else ev.window_scaling)
        if self.cov == "cal":
            cfg["covariates"] = {"calendar": list(ev.calendar)}
        return cfg


def configs_for(ev, archs, quantile, covariates=True, keys=()):
    out = _configs(ev, archs, quantile, covariates)
    return [c for c in out if not keys or c.key in keys]


def _configs(ev, archs, quantile, covariates):
    out = []
    for a in archs:
        out += [Config(a, False), Config(a, True)]
    if quantile and "lstm" in archs:
        out.append(Config("lstm", True, QUANTILES))
    if covariates and ev.calendar and ev.times is not None:
        out += [Config(a, ws, cov="cal") for a in archs for ws in (False, True)]
    if covariates and ev.many_series:
        out += [Config(a, True, cov="series") for a in archs]
    out += [Config(a, True, loss="mae") for a in archs]
    return out


def write_series_csv(ev, path):
    """The wide CSV's columns stacked as series: time, series, close (one series after the
    other, each in time order)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("time,series,close\n")
        for k, name in enumerate(ev.features):
            for r in range(ev.rows):
                f.write(f"{ev.stamps[r]},{name},{float(ev.data[r, k])!r}\n")


def request_extras(ev, cfg):
    """The extra KServe inputs of a covariate configuration's forecasts over ev.X: a list of
    (name, datatype, array) for one request of all origins."""
    if cfg.cov == "cal":
        idx = np.arange(-ev.T, ev.P)[None, :] + ev.origins[:, None]
        return [("TIMESTAMPS", "INT64", ev.times[idx])]
    return []


# ----------------------------------------------------------------------------------------------
# forecastd: one daemon, forecastctl train, KServe REST.
# ----------------------------------------------------------------------------------------------


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http_json(url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as reply:
        return json.loads(reply.read())


class Daemon:
    """A forecastd on a temporary repository with --data-dir data, on free loopback ports."""

    def __init__(self, build_dir, data_dir, work):
        self.forecastd = os.path.join(build_dir, "server", "forecastd")
        self.forecastctl = os.path.join(build_dir, "client", "forecastctl")
        for b in (self.forecastd, self.forecastctl):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"{b} is missing: run 'make build' first")
        self.work = work
        self.repo_dir = os.path.join(work, "models")
        os.makedirs(self.repo_dir, exist_ok=True)
        grpc, http, metrics = free_ports(3)
        self.grpc, self.http = f"127.0.0.1:{grpc}", f"127.0.0.1:{http}"
        self.log_path = os.path.join(work, "forecastd.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [self.forecastd, "--model-repository", self.repo_dir, "--data-dir", data_dir,
             "--devices", "cpu", "--grpc-address", self.grpc, "--http-address", self.http,
             "--metrics-address", f"127.0.0.1:{metrics}"],
            stdout=self.log_file, stderr=subprocess.STDOUT)
        for _ in range(150):
            if self.ctl("status").returncode == 0:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"forecastd exited: {self.tail()}")
            time.sleep(0.2)
        raise RuntimeError(f"forecastd did not become ready: {self.tail()}")

    def tail(self, n=3000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-n:]

    def ctl(self, *args):
        return subprocess.run([self.forecastctl, "--address", self.grpc, *args],
                              capture_output=True, text=True)

    def version(self):
        r = self.ctl("status")
        return r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else "?"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()

    def train(self, name, cfg_path, csv_name, epochs, seed, extra=()):
        """Runs forecastctl train; returns (job dict from `jobs show --json`, command wall s)."""
        cmd = ["train", name, "--config", cfg_path, "--csv", csv_name, "--timestamp-column",
               "time", "--epochs", str(epochs), "--batch-size", str(TRAIN["batch"]), "--lr",
               str(TRAIN["lr"]), "--patience", str(TRAIN["patience"]), "--validation-fraction",
               str(qs.VALIDATION_FRACTION), "--seed", str(seed), "--promote", *extra]
        t0 = time.perf_counter()
        r = self.ctl(*cmd)
        wall = time.perf_counter() - t0
        m = re.search(r"job (train-\S+)", r.stdout + r.stderr)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"forecastctl {' '.join(cmd)}: exit {r.returncode}: "
                               f"{(r.stdout + r.stderr)[-1500:]}")
        show = self.ctl("--json", "jobs", "show", m.group(1))
        if show.returncode != 0:
            raise RuntimeError(f"jobs show {m.group(1)}: {show.stderr[-500:]}")
        return json.loads(show.stdout), wall

    def forecast(self, name, X, max_batch, extras=()):
        """X (N, T, F) raw -> the served forecast, (N, P, K) or (N, P, K, Q). extras: more
        inputs, (name, datatype, array with N rows)."""
        base = f"http://{self.http}/v2/models/{name}"
        meta = http_json(base)
        input_name = meta["inputs"][0]["name"]
        parts = []
        for i in range(0, len(X), max_batch):
            chunk = np.asarray(X[i:i + max_batch], dtype=np.float32)
            inputs = [{"name": input_name, "shape": list(chunk.shape), "datatype": "FP32",
                       "data": chunk.reshape(-1).tolist()}]
            for extra_name, datatype, array in extras:
                part = np.asarray(array[i:i + max_batch])
                data = part.reshape(-1).tolist()
                inputs.append({"name": extra_name, "shape": list(part.shape),
                               "datatype": datatype, "data": data})
            reply = http_json(base + "/infer", {"inputs": inputs})
            out = reply["outputs"][0]
            parts.append(np.asarray(out["data"], dtype=np.float64).reshape(out["shape"]))
        return np.concatenate(parts)


def run_forecastd(daemon, ev, cfg, seed, epochs, work):
    name = cfg.model_name(ev.name, seed)
    model_cfg = cfg.model_config(ev, name)
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(model_cfg, f, indent=2)
    extra = ["--series-column", "series"] if cfg.cov == "series" else []
    if cfg.loss:
        extra += ["--loss", cfg.loss]
    job, ctl_s = daemon.train(name, path, cfg.csv_name(ev), epochs, seed, extra)
    if job.get("state") != "TRAIN_JOB_SUCCEEDED":
        raise RuntimeError(f"job {job.get('jobId')}: {job.get('state')}: {job.get('error')}")
    train_s = (int(job["finishedUnixMs"]) - int(job["createdUnixMs"])) / 1000.0
    max_batch = int(model_cfg.get("batching", {}).get("maxBatchSize", 32) or 32)
    if cfg.cov == "series":
        # Each index as its own series: its column alone, named.
        fc = np.concatenate([
            daemon.forecast(name, ev.X[:, :, k:k + 1], max_batch,
                            [("SERIES", "BYTES", np.array([f] * len(ev.X), dtype=object))])
            for k, f in enumerate(ev.features)], axis=2)
    else:
        fc = daemon.forecast(name, ev.X, max_batch, request_extras(ev, cfg))
    return {"seed": seed, "model": name, "job": job.get("jobId"), "train_s": train_s,
            "forecastctl_s": ctl_s, "best_epoch": int(job.get("bestEpoch", 0)),
            "epochs_run": int(job.get("epochsRun", 0)),
            "best_validation_loss": job.get("bestValidationLoss"),
            "score": qs.score(fc, ev.Y, ev.targets, cfg.quantiles)}


# ----------------------------------------------------------------------------------------------
# The PyTorch loop: forecastd's settings on the same windows.
# ----------------------------------------------------------------------------------------------


def windows(data, starts, T, P, target_index):
    X = np.stack([data[s:s + T] for s in starts])
    Y = np.stack([data[s + T:s + T + P][:, target_index] for s in starts])
    return X, Y


def run_torch(ev, cfg, seed, epochs):
    import torch
    import forecastd_torch as ft

    model_cfg = cfg.model_config(ev, cfg.model_name(ev.name, seed))
    t0 = time.perf_counter()
    if cfg.cov == "series":
        model_cfg["series"] = list(ev.features)
    spec = ft.Spec(model_cfg)
    torch.manual_seed(seed)
    module = ft.build_module(spec)  # PyTorch's default initialisation
    T, P = ev.T, ev.P
    # Each series' rows (rows, F) with the calendar columns, and its target columns; the
    # wide CSV is one series, or one per column with "+series".
    if cfg.cov == "series":
        parts = [(ev.data[:, k:k + 1], [0]) for k in range(len(ev.features))]
    elif cfg.cov == "cal":
        parts = [(np.concatenate([ev.data, qs.calendar_columns(ev.calendar, ev.times)], axis=1),
                  ev.target_index)]
    else:
        parts = [(ev.data, ev.target_index)]
    means, stds = [], []
    for data, _ in parts:
        mean = data[:ev.n_train].mean(axis=0)
        std = data[:ev.n_train].std(axis=0)  # population (ddof 0)
        std[std < 1e-12] = 1.0
        means.append(mean)
        stds.append(std)
    with torch.no_grad():
        shape = module.normalizer.mean.shape
        module.normalizer.mean.copy_(torch.from_numpy(np.stack(means)).reshape(shape))
        module.normalizer.std.copy_(torch.from_numpy(np.stack(stds)).reshape(shape))

    def inputs(s, starts):
        """Windows of series s starting at `starts`: (N, T, F), or records for a model that
        reads them (future-known calendar values, the series index)."""
        data = parts[s][0]
        X = np.stack([data[o:o + T] for o in starts])
        if not spec.records:
            return X
        recs = [X.reshape(len(X), -1)]
        if spec.Fk:
            recs.append(np.stack([data[o + T:o + T + P][:, spec.future_index]
                                  for o in starts]).reshape(len(X), -1))
        if spec.S:
            recs.append(np.full((len(X), 1), float(s)))
        return np.concatenate(recs, axis=1)

    def targets(s, starts):
        data, ti = parts[s]
        return np.stack([data[o + T:o + T + P][:, ti] for o in starts])

    def split(lo, hi):
        X = np.concatenate([inputs(s, range(lo, hi)) for s in range(len(parts))])
        Y = np.concatenate([targets(s, range(lo, hi)) for s in range(len(parts))])
        X = torch.from_numpy(X).float()
        if spec.records:  # each window's target statistics (its series')
            c, d = (v.detach().double().numpy()[:, None, :] for v in module.target_stats(X))
        else:
            c, d = means[0][parts[0][1]], stds[0][parts[0][1]]
        return X, torch.from_numpy((Y - c) / d).float()

    Xtr, Ytr = split(0, ev.n_train - T - P + 1)
    Xva, Yva = split(ev.n_train, ev.rows - T - P + 1)
    taus = torch.tensor(spec.quantiles, dtype=torch.float32) if spec.Q else None

    def loss_fn(pred, y):
        if taus is None and cfg.loss == "mae":
            return torch.mean(torch.abs(pred - y))
        if taus is None:
            return torch.mean((pred - y) ** 2)
        d = y[..., None] - pred  # pinball, mean over (n, q), as kernels/ref/loss.h
        return torch.mean(torch.maximum(taus * d, (taus - 1.0) * d))

    opt = torch.optim.Adam(module.parameters(), lr=TRAIN["lr"])
    gen = torch.Generator().manual_seed(seed)
    best, best_state, best_epoch, bad, epochs_run = math.inf, None, 0, 0, 0
    for epoch in range(1, epochs + 1):
        module.train()
        perm = torch.randperm(len(Xtr), generator=gen)
        for i in range(0, len(perm), TRAIN["batch"]):
            idx = perm[i:i + TRAIN["batch"]]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(module.forward_normalized(Xtr[idx]), Ytr[idx])
            loss.backward()
            opt.step()
        module.eval()
        with torch.no_grad():
            val = float(loss_fn(module.forward_normalized(Xva), Yva))
        epochs_run = epoch
        if val < best:
            best, best_epoch, bad = val, epoch, 0
            best_state = copy.deepcopy(module.state_dict())
        else:
            bad += 1
            if TRAIN["patience"] and bad >= TRAIN["patience"]:
                break
    module.load_state_dict(best_state)
    train_s = time.perf_counter() - t0
    module.eval()
    with torch.no_grad():
        if cfg.cov == "series":
            fc = np.concatenate([module(torch.from_numpy(inputs(s, ev.origins - T)).float())
                                 .double().numpy() for s in range(len(parts))], axis=2)
        else:
            fc = module(torch.from_numpy(inputs(0, ev.origins - T)).float()).double().numpy()
    return {"seed": seed, "train_s": train_s, "best_epoch": best_epoch,
            "epochs_run": epochs_run, "best_validation_loss": best,
            "score": qs.score(fc, ev.Y, ev.targets, cfg.quantiles)}


# ----------------------------------------------------------------------------------------------
# NeuralForecast, in a child process (its imports and Lightning stay out of this one).
# ----------------------------------------------------------------------------------------------


def neuralforecast_worker(spec_path):
    """Child process: trains each model of the spec, writes forecasts (.npy) and a result
    JSON. Cutoff c (ds = row + 1) is origin o = c."""
    with open(spec_path) as f:
        spec = json.load(f)
    import pandas as pd
    import torch
    import neuralforecast
    from neuralforecast import NeuralForecast
    from neuralforecast.models import LSTM, NHITS

    torch.set_num_threads(spec["threads"])
    ev = qs.EvalSet(spec["series"], spec["data_dir"])
    df = pd.concat([pd.DataFrame({"unique_id": t, "ds": np.arange(1, ev.rows + 1),
                                  "y": ev.data[:, ev.target_index[k]]})
                    for k, t in enumerate(ev.targets)], ignore_index=True)
    n_windows = ev.rows - ev.P - ev.n_train + 1
    trainer = dict(accelerator="cpu", devices=1, enable_progress_bar=False, logger=False,
                   enable_model_summary=False)
    result = {"neuralforecast": neuralforecast.__version__, "n_windows": n_windows,
              "models": {}}
    for model_name in spec["models"]:
        kw = dict(h=ev.P, input_size=ev.T, random_seed=spec["seed"], **trainer)
        if spec.get("max_steps"):
            kw["max_steps"] = spec["max_steps"]
        model = {"LSTM": LSTM, "NHITS": NHITS}[model_name](**kw)
        nf = NeuralForecast(models=[model], freq=1)
        t0 = time.perf_counter()
        cv = nf.cross_validation(df=df, n_windows=n_windows, step_size=1, refit=False)
        wall = time.perf_counter() - t0
        cv = cv.reset_index() if "unique_id" not in cv.columns else cv
        cutoffs = np.sort(cv["cutoff"].unique()).astype(np.int64)
        if not np.array_equal(cutoffs, ev.origins):
            raise RuntimeError(f"{model_name}: cutoffs {cutoffs[:3]}..{cutoffs[-3:]} are not "
                               f"the origins {ev.origins[0]}..{ev.origins[-1]}")
        fc = np.full(ev.Y.shape, np.nan)
        truth = np.full(ev.Y.shape, np.nan)
        col = {t: k for k, t in enumerate(ev.targets)}
        i = (cv["cutoff"].to_numpy(np.int64) - ev.origins[0])
        h = cv["ds"].to_numpy(np.int64) - cv["cutoff"].to_numpy(np.int64) - 1
        k = cv["unique_id"].map(col).to_numpy(np.int64)
        fc[i, h, k] = cv[model_name].to_numpy(np.float64)
        truth[i, h, k] = cv["y"].to_numpy(np.float64)
        if not np.allclose(truth, ev.Y):
            raise RuntimeError(f"{model_name}: cross_validation's y is not the evaluation set")
        path = os.path.join(spec["out_dir"], f"nf_{ev.name}_{model_name}.npy")
        np.save(path, fc)
        result["models"][model_name] = {
            "forecast": path, "wall_s": wall, "max_steps": model.hparams.get("max_steps"),
            "scaler_type": model.hparams.get("scaler_type"),
            "loss": type(model.loss).__name__, "rows": len(cv)}
    with open(spec["result"], "w") as f:
        json.dump(result, f, indent=2)


def run_neuralforecast(ev, args, out_dir):
    """Returns ({model: {runs, config}}, error or None)."""
    spec_path = os.path.join(out_dir, f"nf_{ev.name}_spec.json")
    result_path = os.path.join(out_dir, f"nf_{ev.name}_result.json")
    log_path = os.path.join(out_dir, f"nf_{ev.name}.log")
    spec = {"series": ev.name, "data_dir": args.data_dir, "models": ["LSTM", "NHITS"],
            "seed": 1, "max_steps": args.nf_max_steps, "threads": cpu_count(),
            "out_dir": out_dir, "result": result_path}
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    if os.path.exists(result_path):
        os.remove(result_path)
    with open(log_path, "w") as lf:
        r = subprocess.run([sys.executable, os.path.abspath(__file__),
                            "--neuralforecast-worker", spec_path],
                           stdout=lf, stderr=subprocess.STDOUT)
    if r.returncode != 0 or not os.path.exists(result_path):
        with open(log_path, errors="replace") as f:
            tail = f.read()[-1500:]
        return None, f"worker exited {r.returncode} (log {log_path}): {tail}"
    with open(result_path) as f:
        res = json.load(f)
    out = {}
    for name, m in res["models"].items():
        fc = np.load(m["forecast"])
        out[name] = {"info": {k: v for k, v in m.items() if k != "forecast"},
                     "runs": [{"seed": 1, "train_s": m["wall_s"],
                               "score": qs.score(fc, ev.Y, ev.targets)}]}
    return out, None


# ----------------------------------------------------------------------------------------------
# Context, tables, main.
# ----------------------------------------------------------------------------------------------


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {"cpu": model, "cores_usable": cpu_count(), "cores_online": os.cpu_count(),
            "affinity": affinity, "platform": platform.platform(),
            "python": sys.version.split()[0]}


def git_commit():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def fmt(m, s, digits):
    if m is None:
        return "n/a"
    return f"{m:.{digits}f} ± {s:.{digits}f}" if s else f"{m:.{digits}f}"


def table(series_result):
    """Markdown: one row per method / configuration."""
    rows = series_result["methods"]
    naive = next((m["summary"]["mae_mean"] for m in rows if m["method"] == "naive"), None)
    digits = 1
    lines = [f"### {series_result['series']} ({series_result['describe']})", "",
             "| method | config | seeds | MAE | RMSE | train s | MAE / naive |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    quantile_lines = []
    for m in rows:
        s = m["summary"]
        if m.get("error"):
            lines.append(f"| {m['method']} | {m['config']} | 0 | not run: "
                         f"{m['error'][:80]} | | | |")
            continue
        if not s.get("seeds"):
            continue
        ratio = f"{s['mae_mean'] / naive:.3f}" if naive else "n/a"
        train = fmt(s.get("train_s_mean"), s.get("train_s_std"), 1)
        if m["method"] in ("naive", "seasonal_naive"):
            train = "-"
        lines.append(f"| {m['method']} | {m['config']} | {s['seeds']} | "
                     f"{fmt(s['mae_mean'], s['mae_std'], digits)} | "
                     f"{fmt(s['rmse_mean'], s['rmse_std'], digits)} | {train} | {ratio} |")
        for q in s.get("quantiles", []):
            quantile_lines.append(
                f"| {m['method']} | {m['config']} | {q['q']:.2f} | "
                f"{fmt(q['pinball_mean'], q['pinball_std'], 2)} | "
                f"{fmt(q['coverage_mean'], q['coverage_std'], 3)} |")
    if quantile_lines:
        lines += ["", "Quantiles (MAE/RMSE above score the 0.5 quantile): mean pinball loss in "
                  "the series' units; coverage = fraction of truths <= the forecast.", "",
                  "| method | config | q | pinball | coverage |",
                  "| --- | --- | ---: | ---: | ---: |"] + quantile_lines
    return "\n".join(lines)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", default=",".join(qs.SERIES),
                    help="comma-separated, of " + ", ".join(qs.SERIES))
    ap.add_argument("--archs", default=",".join(ARCHS),
                    help="comma-separated, of " + ", ".join(ARCHS))
    ap.add_argument("--seeds", default="1,2,3", help="forecastd and PyTorch seeds (default 1,2,3)")
    ap.add_argument("--epochs", type=int, default=40, help="at most this many epochs (default 40)")
    ap.add_argument("--batch-size", type=int, default=TRAIN["batch"],
                    help=f"windows per training step (default {TRAIN['batch']})")
    ap.add_argument("--lr", type=float, default=TRAIN["lr"],
                    help=f"Adam's learning rate (default {TRAIN['lr']:g})")
    ap.add_argument("--patience", type=int, default=TRAIN["patience"],
                    help="early stopping: epochs without a better validation loss (default "
                    f"{TRAIN['patience']}; 0: every epoch)")
    ap.add_argument("--skip-forecastd", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-neuralforecast", action="store_true")
    ap.add_argument("--no-quantile", action="store_true",
                    help="leave out the lstm+ws+q configuration (quantiles 0.1, 0.5, 0.9)")
    ap.add_argument("--no-covariates", action="store_true",
                    help="leave out the +cal (calendar features) and +series configurations")
    ap.add_argument("--configs", default="",
                    help="comma-separated configuration keys to run (e.g. transformer+cal); "
                    "default: all")
    ap.add_argument("--nf-max-steps", type=int, default=0,
                    help="NeuralForecast max_steps (default 0: the models' own default, 1000)")
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--data-dir", default=os.path.join(REPO, "data"))
    ap.add_argument("--out", default="/tmp/quality", help="directory for quality.json and logs")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: seed 1, 3 epochs, NeuralForecast max_steps 20")
    ap.add_argument("--neuralforecast-unavailable", default="",
                    help=argparse.SUPPRESS)  # set by quality.sh when the install failed
    ap.add_argument("--neuralforecast-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs = "1", 3
        args.nf_max_steps = args.nf_max_steps or 20
    args.series = [s for s in args.series.split(",") if s]
    args.archs = [a for a in args.archs.split(",") if a]
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    for s in args.series:
        if s not in qs.SERIES:
            ap.error(f"unknown series {s}")
    for a in args.archs:
        if a not in ARCHS:
            ap.error(f"unknown arch {a}")
    if not args.seeds or args.epochs < 1:
        ap.error("need at least one seed and one epoch")
    if args.batch_size < 1 or not args.lr > 0 or args.patience < 0:
        ap.error("--batch-size must be >= 1, --lr > 0 and --patience >= 0")
    TRAIN.update(batch=args.batch_size, lr=args.lr, patience=args.patience)
    args.build_dir = os.path.abspath(os.path.join(REPO, args.build_dir))
    args.data_dir = os.path.abspath(args.data_dir)
    return args


def main(argv):
    t_start = time.perf_counter()
    args = parse_args(argv)
    if args.neuralforecast_worker:
        neuralforecast_worker(args.neuralforecast_worker)
        return 0
    os.makedirs(args.out, exist_ok=True)
    import torch

    threads = cpu_count()
    torch.set_num_threads(threads)
    nf_version, nf_problem = None, args.neuralforecast_unavailable or None
    if args.skip_neuralforecast:
        nf_problem = "skipped (--skip-neuralforecast)"
    elif not nf_problem:
        probe = subprocess.run([sys.executable, "-c",
                                "import neuralforecast; print(neuralforecast.__version__)"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            nf_version = probe.stdout.strip()
        else:
            nf_problem = "cannot import neuralforecast: " + probe.stderr.strip()[-300:]
    context = {
        "command": " ".join(shlex.quote(a) for a in
                            [os.environ.get("QUALITY_COMMAND", sys.argv[0])] + list(argv)),
        "machine": machine(), "commit": git_commit(),
        "python": sys.executable, "torch": torch.__version__, "torch_file": torch.__file__,
        "torch_threads": torch.get_num_threads(), "neuralforecast": nf_version,
        "settings": {"seeds": args.seeds, "epochs": args.epochs, "batch_size": TRAIN["batch"],
                     "lr": TRAIN["lr"], "patience": TRAIN["patience"],
                     "validation_fraction": qs.VALIDATION_FRACTION,
                     "nf_max_steps": args.nf_max_steps or "default",
                     "archs": args.archs, "quantile_config": not args.no_quantile},
    }
    log(f"command: {context['command']}")
    log(f"machine: {context['machine']['cpu']}, {threads} usable cores (affinity "
        f"{context['machine']['affinity']}, {context['machine']['cores_online']} online), "
        f"{context['machine']['platform']}")
    log(f"forecastd commit: {context['commit']}")
    log(f"torch {torch.__version__} ({torch.__file__}), torch.set_num_threads({threads}) -> "
        f"{torch.get_num_threads()}")
    log(f"neuralforecast: {nf_version or 'NOT RUN: ' + nf_problem}")
    log(f"settings: {json.dumps(context['settings'])}")

    evs = [qs.EvalSet(s, args.data_dir) for s in args.series]
    results = {ev.name: {"series": ev.name, "describe": ev.describe(), "rows": ev.rows,
                         "n_train": ev.n_train, "origins": len(ev.origins),
                         "first_origin": int(ev.origins[0]), "last_origin": int(ev.origins[-1]),
                         "methods": []} for ev in evs}
    out_json = os.path.join(args.out, "quality.json")

    def save():
        with open(out_json + ".tmp", "w") as f:
            json.dump({"context": context, "series": results,
                       "wall_s": time.perf_counter() - t_start}, f, indent=2)
        os.replace(out_json + ".tmp", out_json)

    def add(ev, method, config, runs, error=None, extra=None):
        entry = {"method": method, "config": config, "runs": runs,
                 "summary": qs.summarize(runs), "error": error}
        entry.update(extra or {})
        results[ev.name]["methods"].append(entry)
        save()
        s = entry["summary"]
        if error:
            log(f"  {ev.name} {method} {config}: NOT RUN: {error}")
        elif s.get("seeds"):
            log(f"  {ev.name} {method} {config}: MAE {fmt(s['mae_mean'], s['mae_std'], 2)} "
                f"RMSE {fmt(s['rmse_mean'], s['rmse_std'], 2)} train s "
                f"{fmt(s.get('train_s_mean'), s.get('train_s_std'), 1)}")

    for ev in evs:
        log(ev.describe())
        add(ev, "naive", "last value", [{"seed": None, "train_s": None,
                                         "score": qs.score(qs.naive_last_value(ev), ev.Y,
                                                           ev.targets)}])
        add(ev, "seasonal_naive", f"m={ev.season}",
            [{"seed": None, "train_s": None,
              "score": qs.score(qs.seasonal_naive(ev), ev.Y, ev.targets)}])

    configs = {ev.name: configs_for(ev, args.archs, not args.no_quantile, not args.no_covariates,
                                    [k for k in args.configs.split(",") if k]) for ev in evs}
    if not args.skip_forecastd:
        work = tempfile.mkdtemp(prefix="forecastd-quality-")
        daemon = None
        try:
            # The daemon's data directory: the shipped CSVs and the stacked series.
            data_dir = os.path.join(work, "data")
            os.makedirs(data_dir)
            for ev in evs:
                shutil.copy(ev.csv_path, data_dir)
                if ev.many_series:
                    write_series_csv(ev, os.path.join(data_dir, SERIES_CSV))
            daemon = Daemon(args.build_dir, data_dir, work)
            context["forecastd"] = daemon.version()
            log(f"forecastd: {context['forecastd']} (daemon log {daemon.log_path})")
            for ev in evs:
                for cfg in configs[ev.name]:
                    runs, err = [], None
                    for seed in args.seeds:
                        log(f"  forecastd {ev.name} {cfg.key} seed {seed} ...")
                        try:
                            runs.append(run_forecastd(daemon, ev, cfg, seed, args.epochs, work))
                        except Exception as e:  # noqa: BLE001 (a failed run is reported)
                            err = f"{type(e).__name__}: {e}"
                            log(f"  FAILED: {err}")
                    add(ev, "forecastd", cfg.key, runs, err if not runs else None,
                        {"failed": err} if err and runs else None)
        except Exception as e:  # noqa: BLE001
            log(f"forecastd could not run: {e}")
            for ev in evs:
                add(ev, "forecastd", "all", [], f"{type(e).__name__}: {e}")
        finally:
            if daemon:
                daemon.stop()
                if os.path.exists(daemon.log_path):
                    os.replace(daemon.log_path, os.path.join(args.out, "forecastd.log"))
            subprocess.run(["rm", "-rf", work])

    if not args.skip_torch:
        for ev in evs:
            for cfg in configs[ev.name]:
                runs = []
                for seed in args.seeds:
                    log(f"  torch {ev.name} {cfg.key} seed {seed} ...")
                    runs.append(run_torch(ev, cfg, seed, args.epochs))
                add(ev, "torch", cfg.key, runs)

    for ev in evs:
        if nf_problem:
            add(ev, "neuralforecast", "LSTM, NHITS", [], nf_problem)
            continue
        log(f"  neuralforecast {ev.name} LSTM, NHITS ...")
        res, err = run_neuralforecast(ev, args, args.out)
        if err:
            add(ev, "neuralforecast", "LSTM, NHITS", [], err)
            continue
        for name, r in res.items():
            info = r["info"]
            add(ev, "neuralforecast", f"{name} (max_steps {info['max_steps']}, "
                f"scaler {info['scaler_type']}, loss {info['loss']})", r["runs"],
                extra={"info": info})

    wall = time.perf_counter() - t_start
    save()
    log("")
    log(f"command: {context['command']}")
    log(f"machine: {context['machine']['cpu']}, {threads} cores; forecastd {context['commit']}; "
        f"torch {torch.__version__} ({threads} threads); neuralforecast "
        f"{nf_version or 'not run: ' + nf_problem}")
    log(f"seeds {args.seeds}, at most {args.epochs} epochs, batch {TRAIN['batch']}, lr "
        f"{TRAIN['lr']}, patience {TRAIN['patience']}; train s: forecastd = the job's own "
        f"duration (created -> finished), torch = the loop, neuralforecast = cross_validation (fit + forecasts); ± = std over seeds")
    for ev in evs:
        log("")
        log(table(results[ev.name]))
    log("")
    log(f"wrote {out_json}; whole run {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
