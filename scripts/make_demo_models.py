#!/usr/bin/env python3
"""The demo models `make run` serves: two small forecasters trained on a synthetic series.

Builds a seeded hourly series with 3 features (a daily- and weekly-seasonal `load`, a
`temperature` that drives part of it, a `price` driven by both, each with autocorrelated noise),
trains an LSTM and a transformer to forecast price and load 12 hours ahead from the last 48, and
writes them in forecastd's model-repository layout:

    models/demo_lstm/config.json, models/demo_lstm/1/model.safetensors
    models/demo_transformer/config.json, models/demo_transformer/1/model.safetensors
    models/sample_input.csv    header load,temperature,price; the held-out part's last 48 rows

The normaliser's mean and std are fitted on the training split (the first 80% of the series);
validation is the held-out rest. Prints train / validation loss per epoch (MSE in normalised
units over both targets and all 12 steps) and, at the end, each model's validation MSE next to
the naive forecast that repeats the last observed value.

Deterministic: one seed, one thread, fixed epoch counts; running it twice writes the same bytes
(with the same torch build). Debian's python3-torch 1.13 is enough; about a minute on 2 cores.

Usage:
    scripts/make_demo_models.py               write under models/
    scripts/make_demo_models.py --out DIR     write under DIR instead
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from forecastd_torch import (  # noqa: E402  (needs the sys.path entry above)
    Spec, build_module, read_safetensors, write_model)

SEED = 20240917
FEATURES = ["load", "temperature", "price"]
TARGETS = ["price", "load"]
T = 48  # lookback, hours
P = 12  # horizon, hours
HOURS = 24 * 420
TRAIN_FRACTION = 0.8
BATCH = 128


def demo_configs():
    common = {"lookback": T, "horizon": P, "featureNames": FEATURES, "targetNames": TARGETS}
    lstm = {
        "name": "demo_lstm",
        "description": "Demo: 2-layer LSTM forecasting price and load 12 h ahead from 48 h of "
                       "load, temperature and price (synthetic data, "
                       "scripts/make_demo_models.py)",
        **common,
        "lstm": {"hiddenSize": 32, "numLayers": 2, "bidirectional": False, "dropout": 0.0},
        "normalization": "NORMALIZATION_STANDARD",
    }
    transformer = {
        "name": "demo_transformer",
        "description": "Demo: 2-layer pre-LN transformer forecasting price and load 12 h ahead "
                       "from 48 h of load, temperature and price (synthetic data, "
                       "scripts/make_demo_models.py)",
        **common,
        "transformer": {"dModel": 32, "numHeads": 4, "numLayers": 2, "dimFeedforward": 64,
                        "activation": "ACTIVATION_GELU", "normFirst": True, "dropout": 0.0,
                        "causal": False},
        "normalization": "NORMALIZATION_STANDARD",
    }
    # (config, epochs, peak learning rate)
    return [(lstm, 14, 4e-3), (transformer, 14, 2e-3)]


# ----------------------------------------------------------------------------------------------
# The series.
# ----------------------------------------------------------------------------------------------


def ar1(rng, n, phi, sigma):
    """Stationary AR(1) noise with marginal standard deviation sigma."""
    e = rng.standard_normal(n) * sigma * math.sqrt(1.0 - phi * phi)
    out = np.empty(n)
    out[0] = rng.standard_normal() * sigma
    for i in range(1, n):
        out[i] = phi * out[i - 1] + e[i]
    return out


def make_series(seed):
    """(HOURS, 3) float64: load, temperature, price, hourly."""
    rng = np.random.default_rng(seed)
    t = np.arange(HOURS, dtype=np.float64)
    hour = t % 24
    day = t / 24.0
    # Temperature: yearly swing, daily swing peaking mid-afternoon, weather noise.
    temperature = (12.0 + 9.0 * np.sin(2 * math.pi * (day - 110) / 365.0)
                   + 5.0 * np.sin(2 * math.pi * (hour - 9) / 24.0)
                   + ar1(rng, HOURS, 0.97, 2.5))
    # Load: morning and evening peaks, lower at weekends, heating and cooling demand.
    daily = (np.exp(-0.5 * ((hour - 8.5) / 2.0) ** 2) + 1.3 * np.exp(-0.5 * ((hour - 19) / 2.5) ** 2)
             - 0.6 * np.exp(-0.5 * ((hour - 3.5) / 2.5) ** 2))
    weekend = ((day.astype(np.int64) % 7) >= 5).astype(np.float64)
    load = (100.0 + 30.0 * daily - 12.0 * weekend
            + 1.8 * np.maximum(15.0 - temperature, 0.0) + 2.5 * np.maximum(temperature - 22.0, 0.0)
            + ar1(rng, HOURS, 0.9, 4.0))
    # Price: follows load (with an hour's lag as well) and hot afternoons, plus its own noise.
    load_prev = np.concatenate([load[:1], load[:-1]])
    price = (40.0 + 0.45 * (load - 100.0) + 0.25 * (load_prev - 100.0)
             + 0.6 * np.maximum(temperature - 25.0, 0.0) + ar1(rng, HOURS, 0.8, 3.0))
    return np.stack([load, temperature, price], axis=1)


def windows(series):
    """X (N, T, F) float32 raw inputs; Y (N, P, targets) float32 raw future targets."""
    idx = [FEATURES.index(name) for name in TARGETS]
    n = len(series) - T - P + 1
    x = np.stack([series[i:i + T] for i in range(n)])
    y = np.stack([series[i + T:i + T + P, idx] for i in range(n)])
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))


# ----------------------------------------------------------------------------------------------
# Training.
# ----------------------------------------------------------------------------------------------


def normalised_mse(pred, y, target_std):
    return (((pred - y) / target_std) ** 2).mean()


def evaluate(module, x, y, target_std):
    module.eval()
    with torch.no_grad():
        total = 0.0
        for i in range(0, len(x), 1024):
            pred = module(x[i:i + 1024])
            total += float(((pred - y[i:i + 1024]) / target_std).pow(2).sum())
    return total / y.numel()


def train(cfg, epochs, lr, data, mean, std, seed):
    spec = Spec(cfg)
    torch.manual_seed(seed)
    module = build_module(spec)
    with torch.no_grad():
        module.normalizer.mean.copy_(torch.from_numpy(mean))
        module.normalizer.std.copy_(torch.from_numpy(std))
    x_train, y_train, x_val, y_val = data
    target_std = module.normalizer.std[spec.target_index]
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    steps = epochs * math.ceil(len(x_train) / BATCH)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.15)
    g = torch.Generator().manual_seed(seed)
    nparams = sum(p.numel() for p in module.parameters())
    print(f"{cfg['name']}: {spec.describe()}, {nparams} parameters, {epochs} epochs")
    for epoch in range(1, epochs + 1):
        t0 = time.time()
        module.train()
        order = torch.randperm(len(x_train), generator=g)
        total, count = 0.0, 0
        for i in range(0, len(order), BATCH):
            b = order[i:i + BATCH]
            loss = normalised_mse(module(x_train[b]), y_train[b], target_std)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            opt.step()
            sched.step()
            total += float(loss) * len(b)
            count += len(b)
        val = evaluate(module, x_val, y_val, target_std)
        print(f"  epoch {epoch:2d}  train {total / count:.4f}  validation {val:.4f}  "
              f"({time.time() - t0:.1f} s)", flush=True)
    module.eval()
    return spec, module


def naive_mse(spec, x_val, y_val, target_std):
    """The last observed value of each target, repeated for every step."""
    last = x_val[:, -1, spec.target_index].unsqueeze(1).expand_as(y_val)
    return float(normalised_mse(last, y_val, target_std))


def raw_mse_per_target(pred, y):
    return [float(((pred[..., k] - y[..., k]) ** 2).mean()) for k in range(y.shape[-1])]


def write_sample_csv(path, rows):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(",".join(FEATURES) + "\n")
        for r in rows:
            f.write(",".join(f"{v:.3f}" for v in r) + "\n")
    os.replace(path + ".tmp", path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", default=os.path.join(HERE, os.pardir, "models"),
                    help="the model repository to write (default: models/)")
    args = ap.parse_args(argv)
    out = os.path.normpath(args.out)

    torch.set_num_threads(1)  # the same bytes on any machine with the same torch build
    if hasattr(torch, "use_deterministic_algorithms"):
        torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    t_start = time.time()

    series = make_series(SEED)
    n_train = int(len(series) * TRAIN_FRACTION)
    train_part, held_out = series[:n_train], series[n_train:]
    mean = train_part.mean(axis=0).astype(np.float32)
    std = train_part.std(axis=0).astype(np.float32)
    x_train, y_train = windows(train_part)
    x_val, y_val = windows(held_out)
    print(f"series: {len(series)} hours; train {len(train_part)} h ({len(x_train)} windows), "
          f"validation {len(held_out)} h ({len(x_val)} windows); normaliser fitted on train: "
          f"mean {np.round(mean, 2).tolist()}, std {np.round(std, 2).tolist()}")

    summary = []
    for i, (cfg, epochs, lr) in enumerate(demo_configs()):
        spec, module = train(cfg, epochs, lr, (x_train, y_train, x_val, y_val), mean, std,
                             SEED + 1 + i)
        target_std = module.normalizer.std[spec.target_index]
        val = evaluate(module, x_val, y_val, target_std)
        naive = naive_mse(spec, x_val, y_val, target_std)

        model_dir = os.path.join(out, cfg["name"])
        meta = {"format": "pt", "generator": "scripts/make_demo_models.py", "seed": SEED}
        write_model(model_dir, cfg, module, version=1, metadata=meta)
        # Round trip: the written weights, loaded strictly, give the same forecasts.
        weights, _ = read_safetensors(os.path.join(model_dir, "1", "model.safetensors"))
        check = build_module(spec)
        check.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32))
                               for k, v in weights.items()}, strict=True)
        if evaluate(check, x_val, y_val, target_std) != val:
            raise AssertionError(f"{model_dir}: the written weights do not reproduce the model")
        with torch.no_grad():
            pred = module(x_val)
        last = x_val[:, -1, spec.target_index].unsqueeze(1).expand_as(y_val)
        size = os.path.getsize(os.path.join(model_dir, "1", "model.safetensors"))
        summary.append((cfg["name"], val, naive, raw_mse_per_target(pred, y_val),
                        raw_mse_per_target(last, y_val), size))

    write_sample_csv(os.path.join(out, "sample_input.csv"), held_out[-T:])

    print("\nvalidation MSE (normalised units, both targets, all 12 steps; raw units per target "
          f"{'/'.join(TARGETS)})")
    failed = False
    for name, val, naive, raw, raw_naive, size in summary:
        print(f"  {name:<17} model {val:.4f} ({raw[0]:.2f} / {raw[1]:.2f})   naive last value "
              f"{naive:.4f} ({raw_naive[0]:.2f} / {raw_naive[1]:.2f})   "
              f"{val / naive:.0%} of naive; model.safetensors {size / 1024:.0f} KB")
        failed |= not val < naive
    print(f"wrote {out}/demo_lstm, {out}/demo_transformer, {out}/sample_input.csv "
          f"in {time.time() - t_start:.0f} s")
    if failed:
        print("a model does not beat the naive forecast", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
