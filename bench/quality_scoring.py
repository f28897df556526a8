"""The evaluation set of bench/quality.py and how every method is scored on it.

Owns the series definitions (data/*.csv, shapes, split, seasonal period), the evaluation
windows (every forecast origin o with n_train <= o <= rows - P, inputs rows [o - T, o), truths
rows [o, o + P)), the two baselines (last value, seasonal naive) and the metrics: MAE and RMSE in
the series' units over all targets, steps and origins and per target; for a forecast with a
quantile axis, also the mean pinball loss and the empirical coverage (fraction of truths at or
below the forecast) per quantile, its 0.5 quantile being the point forecast. Used by
bench/quality.py only. Pure functions on numpy arrays; no module-level state.
"""

import csv
import datetime
import math
import os

import numpy as np

# Shapes used for every method. `window_scaling` is the ModelConfig.windowScaling of the
# "with window scaling" configurations (see proto/forecastd/v1/model_config.proto).
SERIES = {
    "eu_stock_markets": {
        "csv": "eu_stock_markets.csv",
        "features": ["DAX", "SMI", "CAC", "FTSE"],
        "targets": ["DAX", "SMI", "CAC", "FTSE"],
        "T": 40,
        "P": 5,
        "season": 5,  # business days: one week
        "window_scaling": {"kind": "WINDOW_SCALING_LAST_VALUE"},
        # The quantile model's: a window's own scale sets its intervals' width (with the last
        # value alone, 1998's wider swings fall outside the training years' intervals).
        "quantile_window_scaling": {"kind": "WINDOW_SCALING_MEAN_STD", "affine": True,
                                    "forecastChange": True},
    },
    "taylor": {
        "csv": "taylor.csv",
        "features": ["demand"],
        "targets": ["demand"],
        "T": 60,
        "P": 8,
        "season": 336,  # half-hours: one week
        "window_scaling": {"kind": "WINDOW_SCALING_MEAN_STD", "affine": True},
        # The "+cal" configurations: calendar features computed from the timestamps.
        "calendar": ["CALENDAR_HOUR_OF_DAY", "CALENDAR_DAY_OF_WEEK"],
    },
}
# eu_stock_markets' "+series" configurations: one global model over the four indices as four
# series of one feature (a long CSV with a series column), each forecast naming its series.
SERIES["eu_stock_markets"]["many_series"] = True

VALIDATION_FRACTION = 0.2


def train_rows(rows, fraction=VALIDATION_FRACTION):
    """forecastd's split (engine/train/chronological_split.cc): floor(rows * (1 - fraction))."""
    return int(math.floor(rows * (1.0 - fraction) + 1e-6))


class EvalSet:
    """One series, its split and its evaluation windows.

    data (rows, F) float64 in `features` order; origins (N,); X (N, T, F) raw inputs;
    Y (N, P, K) raw truths of the targets."""

    def __init__(self, name, data_dir):
        s = SERIES[name]
        self.name = name
        self.csv_name = s["csv"]
        self.csv_path = os.path.join(data_dir, s["csv"])
        self.features, self.targets = list(s["features"]), list(s["targets"])
        self.T, self.P, self.season = s["T"], s["P"], s["season"]
        self.window_scaling = dict(s["window_scaling"])
        self.quantile_window_scaling = dict(s.get("quantile_window_scaling",
                                                  s["window_scaling"]))
        self.calendar = list(s.get("calendar", []))
        self.many_series = bool(s.get("many_series", False))
        with open(self.csv_path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        self.data = np.array([[float(r[c]) for c in self.features] for r in rows],
                             dtype=np.float64)
        self.stamps = [r["time"] for r in rows]
        # Unix seconds (UTC) of ISO 8601 timestamps; None for other time columns.
        try:
            self.times = np.array([int(datetime.datetime.fromisoformat(t).replace(
                tzinfo=datetime.timezone.utc).timestamp()) for t in self.stamps], dtype=np.int64)
        except ValueError:
            self.times = None
        self.rows = len(self.data)
        self.n_train = train_rows(self.rows)
        self.target_index = [self.features.index(t) for t in self.targets]
        self.origins = np.arange(self.n_train, self.rows - self.P + 1)
        T, P = self.T, self.P
        self.X = np.stack([self.data[o - T:o] for o in self.origins])
        self.Y = np.stack([self.data[o:o + P][:, self.target_index] for o in self.origins])

    def describe(self):
        return (f"{self.name}: {self.rows} rows, train [0, {self.n_train}), "
                f"{len(self.origins)} origins {self.origins[0]}..{self.origins[-1]}, "
                f"T={self.T} P={self.P} F={len(self.features)} K={len(self.targets)} "
                f"season={self.season}")


def calendar_phase(name, t):
    """The phase in [0, 1) of Unix seconds t (int64 array) in a calendar feature's period, as
    ModelConfig.covariates.calendar defines it."""
    t = np.asarray(t, dtype=np.int64)
    if name == "CALENDAR_HOUR_OF_DAY":
        return (t % 86400) / 86400.0
    if name in ("CALENDAR_DAY_OF_WEEK", "CALENDAR_HOUR_OF_WEEK"):
        return ((t + 3 * 86400) % 604800) / 604800.0
    raise ValueError(f"calendar feature {name} is not used here")


def calendar_columns(names, t):
    """(len(t), 2 * len(names)): sin and cos of each calendar feature's phase."""
    cols = []
    for name in names:
        a = 2.0 * np.pi * calendar_phase(name, t)
        cols += [np.sin(a), np.cos(a)]
    return np.stack(cols, axis=1)


def naive_last_value(ev):
    """(N, P, K): every step repeats the window's last value."""
    last = ev.X[:, -1, :][:, ev.target_index]
    return np.repeat(last[:, None, :], ev.P, axis=1)


def seasonal_naive(ev):
    """(N, P, K): step h (0-based) of origin o is row o + h - k*m, m the season and k the
    smallest whole number of seasons that puts it before o (k = 1 whenever P <= m, as for both
    shipped series). Raises if a row would precede row 0 (never with the shipped series)."""
    m = ev.season
    out = np.empty_like(ev.Y)
    for i, o in enumerate(ev.origins):
        for h in range(ev.P):
            r = o + h - (h // m + 1) * m
            if r < 0:
                raise ValueError(f"{ev.name}: seasonal naive for origin {o} step {h} needs row "
                                 f"{r} < 0")
            out[i, h] = ev.data[r, ev.target_index]
    return out


def _point_index(quantiles):
    """Index of the 0.5 quantile (the point forecast), or the one nearest to it."""
    return int(np.argmin([abs(q - 0.5) for q in quantiles]))


def score(forecast, truth, targets, quantiles=()):
    """forecast (N, P, K), or (N, P, K, Q) with `quantiles` (Q levels, quantile fastest, as
    forecastd serves them); truth (N, P, K). Returns a dict:
      mae, rmse (over all N * P * K), targets: {name: {mae, rmse}};
      with quantiles also point_quantile (the level scored as the point forecast) and
      quantiles: [{q, pinball, coverage, targets: {name: {pinball, coverage}}}], pinball being
      mean max(q (y - f), (q - 1) (y - f)) and coverage the fraction of y <= f."""
    forecast = np.asarray(forecast, dtype=np.float64)
    truth = np.asarray(truth, dtype=np.float64)
    quantiles = list(quantiles or [])
    if quantiles:
        if forecast.shape != truth.shape + (len(quantiles),):
            raise ValueError(f"forecast {forecast.shape} is not truth {truth.shape} x "
                             f"{len(quantiles)} quantiles")
        point = forecast[..., _point_index(quantiles)]
    else:
        if forecast.shape != truth.shape:
            raise ValueError(f"forecast {forecast.shape} is not truth's {truth.shape}")
        point = forecast
    if not np.all(np.isfinite(forecast)):
        raise ValueError("forecast has non-finite values")

    def mae_rmse(err):
        return {"mae": float(np.mean(np.abs(err))), "rmse": float(np.sqrt(np.mean(err * err)))}

    err = point - truth
    out = mae_rmse(err)
    out["targets"] = {t: mae_rmse(err[:, :, k]) for k, t in enumerate(targets)}
    if quantiles:
        out["point_quantile"] = quantiles[_point_index(quantiles)]
        out["quantiles"] = []
        for j, q in enumerate(quantiles):
            d = truth - forecast[..., j]
            pin = np.maximum(q * d, (q - 1.0) * d)
            cov = (truth <= forecast[..., j]).astype(np.float64)
            out["quantiles"].append({
                "q": q, "pinball": float(pin.mean()), "coverage": float(cov.mean()),
                "targets": {t: {"pinball": float(pin[:, :, k].mean()),
                                "coverage": float(cov[:, :, k].mean())}
                            for k, t in enumerate(targets)}})
    return out


def mean_std(values):
    """(mean, sample std with ddof 1; 0 for a single value), or (None, None) for none."""
    v = [x for x in values if x is not None]
    if not v:
        return None, None
    a = np.asarray(v, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def summarize(runs):
    """Mean and std over seeds of a method's runs (each a dict with `score` and `train_s`):
    mae, rmse, train_s, per-target mae / rmse and, with quantiles, pinball / coverage."""
    ok = [r for r in runs if r.get("score")]
    s = {"seeds": len(ok)}
    if not ok:
        return s
    for key in ("mae", "rmse"):
        s[key + "_mean"], s[key + "_std"] = mean_std([r["score"][key] for r in ok])
    s["train_s_mean"], s["train_s_std"] = mean_std([r.get("train_s") for r in ok])
    s["targets"] = {}
    for t in ok[0]["score"]["targets"]:
        s["targets"][t] = {}
        for key in ("mae", "rmse"):
            m, d = mean_std([r["score"]["targets"][t][key] for r in ok])
            s["targets"][t][key + "_mean"], s["targets"][t][key + "_std"] = m, d
    if "quantiles" in ok[0]["score"]:
        s["quantiles"] = []
        for j, qs in enumerate(ok[0]["score"]["quantiles"]):
            entry = {"q": qs["q"]}
            for key in ("pinball", "coverage"):
                m, d = mean_std([r["score"]["quantiles"][j][key] for r in ok])
                entry[key + "_mean"], entry[key + "_std"] = m, d
            s["quantiles"].append(entry)
    return s
