"""forecastd's model format in PyTorch: the reference forecasters and their files.

One module for every Python tool that reads or writes a forecastd model (the golden-file
generator tests/golden/make_golden.py, the CPU and GPU benchmarks under bench/). It owns:

  * Spec: a ModelConfig (proto/forecastd/v1/model_config.proto) parsed from protobuf JSON;
  * the nn.Module forecasters whose state_dict() names are the proto's weight names
    (build_module), and run_module / run_inference to run them; forecasts are (B, P, K), or
    (B, P, K, Q) for a model with `quantiles`, and forward_normalized gives them in normalised
    units (what training losses see); per-window scaling (`window_scaling`, RevIN) is the
    WindowScaler module;
  * safetensors read / write (no `safetensors` package needed);
  * seeded random weights (randomize) and inputs (make_input), and the error metric
    max_rel_err used everywhere: max |got - want| / max(|want|, 1).

Import it with the repository's scripts/ directory on sys.path. Works with Debian's
python3-torch 1.13 and PyPI torch 2.x. Module-level state: none, except that run_module and
run_inference switch PyTorch's process-wide MHA fast path off and on respectively.
"""

import functools
import inspect
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


# ----------------------------------------------------------------------------------------------
# ModelConfig JSON -> Spec (accepts protobuf JSON as the C++ side prints or parses it: camelCase
# or original snake_case names, enums by name or number, int64 as strings).
# ----------------------------------------------------------------------------------------------


class ConfigError(Exception):
    pass


def _field(d, camel, snake, default=None):
    if camel in d:
        return d[camel]
    if snake in d:
        return d[snake]
    return default


def _int(v, what):
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} is {v!r}, not an integer")


def _enum(v, names, what):
    """names: {number: NAME}; returns the NAME."""
    if v is None:
        return names[0]
    if isinstance(v, str) and v in names.values():
        return v
    if isinstance(v, int) and v in names:
        return names[v]
    raise ConfigError(f"{what} is {v!r}; expected one of {sorted(names.values())}")


ACTIVATIONS = {0: "ACTIVATION_UNSPECIFIED", 1: "ACTIVATION_GELU", 2: "ACTIVATION_GELU_TANH",
               3: "ACTIVATION_RELU"}
NORMALIZATIONS = {0: "NORMALIZATION_UNSPECIFIED", 1: "NORMALIZATION_NONE",
                  2: "NORMALIZATION_STANDARD"}
PRECISIONS = {0: "PRECISION_UNSPECIFIED", 1: "PRECISION_FP32", 2: "PRECISION_BF16",
              3: "PRECISION_FP16", 4: "PRECISION_TF32"}
WINDOW_SCALINGS = {0: "WINDOW_SCALING_NONE", 1: "WINDOW_SCALING_MEAN_STD",
                   2: "WINDOW_SCALING_LAST_VALUE"}
CALENDARS = {0: "CALENDAR_UNSPECIFIED", 1: "CALENDAR_HOUR_OF_DAY", 2: "CALENDAR_DAY_OF_WEEK",
             3: "CALENDAR_HOUR_OF_WEEK", 4: "CALENDAR_DAY_OF_YEAR"}


def _proto_float(v):
    """v rounded to float32, as a proto `float` field holds it, back as a Python float."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _quantiles(v):
    """ModelConfig.quantiles (`repeated float`, JSON name `quantiles` in both spellings): a list
    of numbers (or numeric strings, as protobuf JSON allows), each in (0, 1) after rounding to
    float32, strictly increasing. None or [] -> []."""
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(f"quantiles is {v!r}, not a list")
    taus = []
    for q in v:
        if isinstance(q, bool) or not isinstance(q, (int, float, str)):
            raise ConfigError(f"quantiles: {q!r} is not a number")
        try:
            f = _proto_float(float(q))
        except (ValueError, OverflowError):
            raise ConfigError(f"quantiles: {q!r} is not a number")
        if not 0.0 < f < 1.0:  # also rejects NaN
            raise ConfigError(f"quantiles: {q!r} is not in (0, 1)")
        taus.append(f)
    if any(b <= a for a, b in zip(taus, taus[1:])):
        raise ConfigError(f"quantiles {v} are not strictly increasing")
    return taus


def _window_scaling(v):
    """ModelConfig.window_scaling (JSON `windowScaling` / `window_scaling`, every field optional)
    -> (kind NAME, affine, eps, forecast_change). eps is the proto float the C++ side reads,
    0 or absent meaning 1e-5 (as a float: 9.99999974738e-06)."""
    if v is None:
        v = {}
    if not isinstance(v, dict):
        raise ConfigError(f"windowScaling is {v!r}, not a JSON object")
    kind = _enum(v.get("kind"), WINDOW_SCALINGS, "windowScaling.kind")
    affine = bool(v.get("affine", False))
    try:
        eps = _proto_float(float(v.get("eps", 0.0)))
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"windowScaling.eps is {v.get('eps')!r}, not a number")
    if not 0.0 <= eps <= 1.0:  # also rejects NaN
        raise ConfigError(f"windowScaling.eps {eps!r} is not in [0, 1]")
    if eps == 0.0:
        eps = _proto_float(1e-5)
    change = bool(_field(v, "forecastChange", "forecast_change", False))
    if affine and kind == "WINDOW_SCALING_NONE":
        raise ConfigError("windowScaling.affine needs a windowScaling.kind "
                          "(WINDOW_SCALING_MEAN_STD or WINDOW_SCALING_LAST_VALUE)")
    return kind, affine, eps, change


class Spec:
    """What the reference modules need from a ModelConfig."""

    def __init__(self, cfg):
        if not isinstance(cfg, dict):
            raise ConfigError("config.json is not a JSON object")
        self.name = cfg.get("name", "")
        self.T = _int(_field(cfg, "lookback", "lookback", 0), "lookback")
        self.P = _int(_field(cfg, "horizon", "horizon", 0), "horizon")
        self.features = list(_field(cfg, "featureNames", "feature_names", []))
        self.targets = list(_field(cfg, "targetNames", "target_names", []))
        if self.T < 1 or self.P < 1:
            raise ConfigError(f"lookback ({self.T}) and horizon ({self.P}) must be >= 1")
        if not self.features or len(set(self.features)) != len(self.features):
            raise ConfigError(f"featureNames {self.features} must be non-empty and distinct")
        if not self.targets or len(set(self.targets)) != len(self.targets):
            raise ConfigError(f"targetNames {self.targets} must be non-empty and distinct")
        missing = [t for t in self.targets if t not in self.features]
        if missing:
            raise ConfigError(f"targets {missing} are not among featureNames {self.features}")
        # Covariates (ModelConfig.covariates) and series (ModelConfig.series). The model's
        # features are featureNames then "<calendar>_sin", "<calendar>_cos" per calendar
        # feature; the future-known ones are covariates.future then the calendar columns.
        cov = cfg.get("covariates") or {}
        self.future = list(cov.get("future", []))
        self.calendar = [_enum(c, CALENDARS, "covariates.calendar")
                         for c in cov.get("calendar", [])]
        self.static = list(_field(cov, "staticFeatures", "static_features", []))
        self.series = list(cfg.get("series", []))
        for c in self.calendar:
            base = c[len("CALENDAR_"):].lower()
            self.features += [base + "_sin", base + "_cos"]
        bad = [f for f in self.future if f not in self.features or f in self.targets]
        if bad:
            raise ConfigError(f"covariates.future {bad}: not features, or targets")
        self.F = len(self.features)
        self.K = len(self.targets)
        self.target_index = [self.features.index(t) for t in self.targets]
        self.future_index = ([self.features.index(f) for f in self.future] +
                             list(range(self.F - 2 * len(self.calendar), self.F)))
        self.Fk = len(self.future_index)
        self.S = len(self.series)
        self.Fs = len(self.static)
        if self.Fs and not self.S:
            raise ConfigError("static covariates need the model's series")
        # An input record: the window (T, F), the future-known values (P, Fk), the series index.
        self.records = self.Fk > 0 or self.S > 0
        self.R = self.T * self.F + self.P * self.Fk + (1 if self.S else 0)
        # What the body reads per window: TB rows of W columns (forecastd's body_lookback and
        # body_features).
        self.TB = self.T + (self.P if self.Fk else 0)
        self.W = self.F + self.Fs + (1 if self.Fk else 0)
        norm = _enum(cfg.get("normalization"), NORMALIZATIONS, "normalization")
        self.standardized = norm != "NORMALIZATION_NONE"
        self.precision = _enum(cfg.get("precision"), PRECISIONS, "precision")
        # Probabilistic forecasts: Q quantile levels, each in (0, 1), strictly increasing. Held
        # as the proto floats the C++ side reads (0.1 -> 0.10000000149011612). Empty: Q = 0,
        # point forecasts.
        self.quantiles = _quantiles(cfg.get("quantiles"))
        self.Q = len(self.quantiles)
        # Per-window scaling (RevIN) and forecasting the change from the last value; absent:
        # WINDOW_SCALING_NONE, no affine, no forecast change, i.e. none at all.
        (self.ws_kind, self.ws_affine, self.ws_eps,
         self.ws_forecast_change) = _window_scaling(
             _field(cfg, "windowScaling", "window_scaling"))

        archs = [a for a in ("lstm", "gru", "transformer", "mlp") if a in cfg]
        if len(archs) != 1:
            raise ConfigError(f"exactly one of lstm, gru, transformer, mlp must be set; got {archs}")
        self.arch = archs[0]
        a = cfg[self.arch] or {}
        if self.arch in ("lstm", "gru"):
            self.H = _int(_field(a, "hiddenSize", "hidden_size", 0), "hiddenSize")
            self.L = _int(_field(a, "numLayers", "num_layers", 0), "numLayers")
            self.bidirectional = bool(a.get("bidirectional", False))
            self.dropout = float(a.get("dropout", 0.0))
            if self.H < 1 or self.L < 1:
                raise ConfigError(f"{self.arch}: hiddenSize ({self.H}), numLayers ({self.L}) < 1")
        elif self.arch == "mlp":
            self.H = _int(_field(a, "hiddenSize", "hidden_size", 0), "hiddenSize")
            self.L = _int(_field(a, "numLayers", "num_layers", 0), "numLayers")
            self.activation = _enum(a.get("activation"), ACTIVATIONS, "mlp.activation")
            if self.activation == "ACTIVATION_UNSPECIFIED":
                self.activation = "ACTIVATION_GELU"
            self.dropout = float(a.get("dropout", 0.0))
            if self.L < 0 or (self.L > 0 and self.H < 1) or (self.L == 0 and self.H != 0):
                raise ConfigError(f"mlp: hiddenSize ({self.H}) and numLayers ({self.L}): at "
                                  "least one layer of at least one unit, or neither")
        else:
            self.D = _int(_field(a, "dModel", "d_model", 0), "dModel")
            self.NH = _int(_field(a, "numHeads", "num_heads", 0), "numHeads")
            self.L = _int(_field(a, "numLayers", "num_layers", 0), "numLayers")
            self.FF = _int(_field(a, "dimFeedforward", "dim_feedforward", 0), "dimFeedforward")
            self.activation = _enum(a.get("activation"), ACTIVATIONS, "transformer.activation")
            if self.activation == "ACTIVATION_UNSPECIFIED":
                self.activation = "ACTIVATION_GELU"
            self.norm_first = bool(_field(a, "normFirst", "norm_first", False))
            self.dropout = float(a.get("dropout", 0.0))
            eps = float(_field(a, "layerNormEps", "layer_norm_eps", 0.0))
            # The C++ side holds eps as a proto float; use exactly that value.
            eps = _proto_float(eps)
            self.eps = eps if eps > 0.0 else 1e-5
            self.causal = bool(a.get("causal", False))
            if min(self.D, self.NH, self.L, self.FF) < 1 or self.D % self.NH:
                raise ConfigError(f"transformer: bad dims D={self.D} NH={self.NH} L={self.L} "
                                  f"FF={self.FF}")

    @property
    def window_scaling(self):
        """Whether the model has a WindowScaler (a kind, or forecastChange alone)."""
        return self.ws_kind != "WINDOW_SCALING_NONE" or self.ws_forecast_change

    @property
    def head_size(self):
        """The head's outputs: P * K, or P * K * Q with quantiles."""
        return self.P * self.K * max(self.Q, 1)

    def output_shape(self, batch):
        """A forecast's shape: (B, P, K), or (B, P, K, Q) with quantiles (quantile fastest)."""
        return (batch, self.P, self.K) + ((self.Q,) if self.Q else ())

    def describe(self):
        if self.arch == "transformer":
            body = (f"transformer D={self.D} NH={self.NH} L={self.L} FF={self.FF} "
                    f"{'pre' if self.norm_first else 'post'}-LN {self.activation[11:].lower()}"
                    f"{' causal' if self.causal else ''}"
                    f"{f' eps={self.eps:g}' if self.eps != 1e-5 else ''}")
        elif self.arch == "mlp":
            body = f"mlp H={self.H} L={self.L} {self.activation[11:].lower()}"
        else:
            body = (f"{self.arch} H={self.H} L={self.L} "
                    f"{'bi' if self.bidirectional else 'uni'}")
        q = f" Q={self.Q}" if self.Q else ""
        ws = ""
        if self.window_scaling:
            parts = [self.ws_kind[15:].lower()]  # WINDOW_SCALING_ stripped: none, mean_std, ...
            if self.ws_affine:
                parts.append("affine")
            if self.ws_forecast_change:
                parts.append("change")
            if self.ws_eps != _proto_float(1e-5) and self.ws_kind == "WINDOW_SCALING_MEAN_STD":
                parts.append(f"eps={self.ws_eps:g}")
            ws = " window=" + ",".join(parts)
        return f"{body}  F={self.F} T={self.T} P={self.P} K={self.K}{q}{ws}"


# ----------------------------------------------------------------------------------------------
# The PyTorch reference modules. state_dict() names are the proto's weight names.
# ----------------------------------------------------------------------------------------------


class Normalizer(nn.Module):
    """mean and std (F), or (S, F) for a model with series (row s: series s's)."""

    def __init__(self, num_features, num_series=0):
        super().__init__()
        shape = (num_series, num_features) if num_series else (num_features,)
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("std", torch.ones(shape))

    def forward(self, x):
        return (x - self.mean) / self.std

    def denormalize(self, y, target_index):
        """y: (B, P, K), or (B, P, K, Q): each target's std / mean applies to all its
        quantiles."""
        idx = torch.tensor(target_index, dtype=torch.long)
        std, mean = self.std[idx], self.mean[idx]
        if y.dim() == 4:
            std, mean = std[:, None], mean[:, None]
        return y * std + mean


class WindowScaler(nn.Module):
    """ModelConfig.window_scaling (RevIN, Kim et al., ICLR 2022), on the window u (B, T, F)
    after the global normaliser. Per window b and feature f, detached (no gradient):
      MEAN_STD:   c = mean_t u, s = sqrt(mean_t (u - c)^2 + eps)  (population variance)
      LAST_VALUE: c = u[:, T-1], s = 1
      NONE:       c = 0, s = 1  (forecastChange alone)
    scale(u): z = (u - c) / s, xw = z * weight + bias with `affine`, else z; the body reads xw.
    unscale(a, ...): for target k (feature f_k), a += xw[:, T-1, f_k] with forecastChange
    (xw not detached), a = (a - bias[f_k]) / (weight[f_k] + eps^2) with `affine`, then
    a * s[f_k] + c[f_k]. Parameters `weight` (F, init 1) and `bias` (F, init 0) only with
    `affine`."""

    def __init__(self, spec):
        super().__init__()
        self.kind = spec.ws_kind
        self.affine = spec.ws_affine
        self.eps = spec.ws_eps
        self.forecast_change = spec.ws_forecast_change
        if self.affine:
            self.weight = nn.Parameter(torch.ones(spec.F))
            self.bias = nn.Parameter(torch.zeros(spec.F))

    def statistics(self, u):
        """(c, s), each (B, 1, F) and detached, or None for NONE (c = 0, s = 1)."""
        if self.kind == "WINDOW_SCALING_NONE":
            return None
        u = u.detach()
        if self.kind == "WINDOW_SCALING_MEAN_STD":
            c = u.mean(dim=1, keepdim=True)
            s = torch.sqrt(((u - c) ** 2).mean(dim=1, keepdim=True) + self.eps)
        else:  # WINDOW_SCALING_LAST_VALUE
            c = u[:, -1:, :]
            s = torch.ones_like(c)
        return c, s

    def scale(self, u):
        """Returns (xw, stats): the window the body reads, and statistics() for unscale."""
        stats = self.statistics(u)
        z = u if stats is None else (u - stats[0]) / stats[1]
        xw = z * self.weight + self.bias if self.affine else z
        return xw, stats

    def unscale(self, a, xw, stats, target_index):
        """a: (B, P, K) or (B, P, K, Q) from the head; back to the global normaliser's units."""
        idx = torch.tensor(target_index, dtype=torch.long)
        quantiles = a.dim() == 4

        def per_target(v):  # (B, K) -> broadcastable over P (and Q)
            v = v[:, None, :]
            return v[..., None] if quantiles else v

        if self.forecast_change:
            a = a + per_target(xw[:, -1, :][:, idx])
        if self.affine:
            w, b = self.weight[idx], self.bias[idx]
            if quantiles:
                w, b = w[:, None], b[:, None]
            a = (a - b) / (w + self.eps * self.eps)
        if stats is not None:
            c, s = stats
            a = a * per_target(s[:, 0, idx]) + per_target(c[:, 0, idx])
        return a


class Forecaster(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        # Registered first so the normaliser leads the state_dict (and model.safetensors).
        # With NORMALIZATION_NONE there is no normaliser and no normalizer.* tensors.
        self.normalizer = Normalizer(spec.F, spec.S) if spec.standardized else None
        # Then series.static (S, Fs) with static covariates.
        if spec.Fs:
            self.series = nn.Module()
            self.series.register_buffer("static", torch.zeros(spec.S, spec.Fs))
        # Then window_scaling.{weight,bias} (affine only), before the architecture's parameters.
        # Without window scaling there is no such module and the model is exactly as before.
        self.window_scaling = WindowScaler(spec) if spec.window_scaling else None

    def body(self, xn):
        raise NotImplementedError

    # --- Input records (a model with future-known features or series; see
    # engine/models/forecaster_records.cc for the maths).

    def split_record(self, r):
        """r (B, R) -> window (B, T, F), future values (B, P, Fk) or None, series (B,) long or
        None."""
        sp = self.spec
        B, TF = r.shape[0], sp.T * sp.F
        x = r[:, :TF].reshape(B, sp.T, sp.F)
        f = r[:, TF:TF + sp.P * sp.Fk].reshape(B, sp.P, sp.Fk) if sp.Fk else None
        idx = r[:, -1].long() if sp.S else None
        return x, f, idx

    def record_stats(self, idx, batch, dtype):
        """Per-window normaliser statistics (B, F): the window's series' row, or the one row."""
        if self.normalizer is None:
            return (torch.zeros(batch, self.spec.F, dtype=dtype),
                    torch.ones(batch, self.spec.F, dtype=dtype))
        mean, std = self.normalizer.mean, self.normalizer.std
        if idx is not None:
            return mean[idx], std[idx]
        return mean.expand(batch, -1), std.expand(batch, -1)

    def standardize_record(self, r):
        """Raw records -> standardised records (what training reads)."""
        x, f, idx = self.split_record(r)
        c, d = self.record_stats(idx, r.shape[0], r.dtype)
        parts = [((x - c[:, None, :]) / d[:, None, :]).reshape(r.shape[0], -1)]
        if f is not None:
            j = self.spec.future_index
            parts.append(((f - c[:, None, j]) / d[:, None, j]).reshape(r.shape[0], -1))
        if idx is not None:
            parts.append(r[:, -1:])
        return torch.cat(parts, dim=1)

    def assemble(self, xw, fn, idx):
        """The body's input u (B, TB, W): the window's rows then the forecast steps' (future
        values at their feature columns, 0 elsewhere, 1 in the last column), static values
        appended to every row."""
        sp = self.spec
        B = xw.shape[0]
        rows = [xw]
        if fn is not None:
            fut = xw.new_zeros(B, sp.P, sp.F)
            fut[:, :, sp.future_index] = fn
            rows.append(fut)
        u = torch.cat(rows, dim=1)
        cols = [u]
        if sp.Fs:
            cols.append(self.series.static[idx][:, None, :].expand(B, sp.TB, sp.Fs))
        if fn is not None:
            flag = xw.new_zeros(B, sp.TB, 1)
            flag[:, sp.T:, :] = 1.0
            cols.append(flag)
        return torch.cat(cols, dim=2)

    def forward_normalized_records(self, rn):
        sp = self.spec
        xn, fn, idx = self.split_record(rn)
        stats = None
        xw = xn
        if self.window_scaling is not None:
            xw, stats = self.window_scaling.scale(xn)
            if sp.Fk:  # the future-known columns keep their standardised values
                keep = torch.zeros(sp.F, dtype=torch.bool)
                keep[sp.future_index] = True
                xw = torch.where(keep, xn, xw)
        a = self.head(self.body(self.assemble(xw, fn, idx))).reshape(
            sp.output_shape(rn.shape[0]))
        if self.window_scaling is None:
            return a
        return self.window_scaling.unscale(a, xw, stats, sp.target_index)

    def target_stats(self, r):
        """Each window's target statistics (B, K): what its forecast is de-standardised by."""
        _, _, idx = self.split_record(r) if self.spec.records else (None, None, None)
        c, d = self.record_stats(idx, r.shape[0], r.dtype)
        return c[:, self.spec.target_index], d[:, self.spec.target_index]

    def forward_normalized(self, x):
        """head(body(xn)) reshaped to (B, P, K) or (B, P, K, Q): the forecast in normalised
        units, before de-normalisation. Training losses are computed on this. With window
        scaling the body reads the scaled window and the head's output is mapped back to the
        normaliser's units (WindowScaler)."""
        if self.spec.records:
            return self.forward_normalized_records(self.standardize_record(x))
        xn = self.normalizer(x) if self.normalizer is not None else x
        if self.window_scaling is None:
            last = self.body(xn)
            return self.head(last).reshape(self.spec.output_shape(x.shape[0]))
        xw, stats = self.window_scaling.scale(xn)
        a = self.head(self.body(xw)).reshape(self.spec.output_shape(x.shape[0]))
        return self.window_scaling.unscale(a, xw, stats, self.spec.target_index)

    def forward(self, x):
        y = self.forward_normalized(x)
        if self.spec.records:
            c, d = self.target_stats(x)
            if y.dim() == 4:
                c, d = c[..., None], d[..., None]
            return y * d[:, None] + c[:, None]
        if self.normalizer is not None:
            y = self.normalizer.denormalize(y, self.spec.target_index)
        return y


class RecurrentForecaster(Forecaster):
    def __init__(self, spec):
        super().__init__(spec)
        cls = nn.LSTM if spec.arch == "lstm" else nn.GRU
        # nn.LSTM's dropout only acts between layers in training; it warns when L == 1.
        self.rnn = cls(spec.W, spec.H, num_layers=spec.L, bias=True, batch_first=True,
                       dropout=spec.dropout if spec.L > 1 else 0.0,
                       bidirectional=spec.bidirectional)
        nd = 2 if spec.bidirectional else 1
        self.head = nn.Linear(nd * spec.H, spec.head_size)

    def body(self, xn):
        out, _ = self.rnn(xn)
        return out[:, -1, :]  # both directions at the last time step


def sinusoid_table(T, D):
    """pe (T, D) in float64: pe[t, 2i] = sin(t w_i), pe[t, 2i+1] = cos(t w_i),
    w_i = exp(-ln(10000) * 2i / D)."""
    pe = np.zeros((T, D), dtype=np.float64)
    t = np.arange(T, dtype=np.float64)
    for j in range(D):
        w = math.exp(-math.log(10000.0) * (j - j % 2) / D)
        pe[:, j] = np.sin(t * w) if j % 2 == 0 else np.cos(t * w)
    return pe


def causal_mask(T, dtype):
    """Float mask: 0 where key s <= query t, -inf above the diagonal."""
    return torch.triu(torch.full((T, T), float("-inf"), dtype=dtype), diagonal=1)


def _activation(name):
    if name == "ACTIVATION_RELU":
        return "relu"
    if name == "ACTIVATION_GELU":
        return "gelu"  # erf form
    # A plain callable, not nn.GELU(approximate="tanh"): PyTorch's fused encoder fast path
    # treats any nn.GELU as the erf form.
    return functools.partial(F.gelu, approximate="tanh")


class TransformerForecaster(Forecaster):
    def __init__(self, spec):
        super().__init__(spec)
        self.input_proj = nn.Linear(spec.W, spec.D)
        layer = nn.TransformerEncoderLayer(
            spec.D, spec.NH, dim_feedforward=spec.FF, dropout=spec.dropout,
            activation=_activation(spec.activation), layer_norm_eps=spec.eps, batch_first=True,
            norm_first=spec.norm_first)
        kwargs = {}
        if "enable_nested_tensor" in inspect.signature(nn.TransformerEncoder.__init__).parameters:
            kwargs["enable_nested_tensor"] = False
        norm = nn.LayerNorm(spec.D, eps=spec.eps) if spec.norm_first else None
        self.encoder = nn.TransformerEncoder(layer, spec.L, norm=norm, **kwargs)
        self.head = nn.Linear(spec.D, spec.head_size)
        # (kind, T, dtype) -> tensor. Not buffers, so state_dict() stays the proto's names;
        # cached so a timed forward does not rebuild the table in Python on every call.
        self._constants = {}

    def _constant(self, kind, T, dtype):
        key = (kind, T, dtype)
        if key not in self._constants:
            # Built outside inference mode so the tensor is usable with autograd on too.
            with torch.inference_mode(False):
                if kind == "pe":
                    # Computed in float64 and cast to the model's dtype (float32 for the
                    # goldens, exact float64 for the float64 cross-check).
                    t = torch.from_numpy(sinusoid_table(T, self.spec.D)).to(dtype)
                else:
                    t = causal_mask(T, dtype)
            self._constants[key] = t
        return self._constants[key]

    def body(self, xn):
        T = xn.shape[1]
        h = self.input_proj(xn) + self._constant("pe", T, xn.dtype)
        mask = self._constant("mask", T, xn.dtype) if self.spec.causal else None
        h = self.encoder(h, mask=mask)
        return h[:, -1, :]


class MlpForecaster(Forecaster):
    """The body input (B, TB, W) flattened to (B, TB * W), L hidden layers Linear + activation
    (+ dropout in training), then the head."""

    def __init__(self, spec):
        super().__init__(spec)
        inputs = spec.TB * spec.W
        self.layers = nn.ModuleList()
        for _ in range(spec.L):
            self.layers.append(nn.Linear(inputs, spec.H))
            inputs = spec.H
        self.head = nn.Linear(inputs, spec.head_size)
        self.drop = nn.Dropout(spec.dropout)
        act = _activation(spec.activation)
        self.act = {"relu": F.relu, "gelu": F.gelu}.get(act, act) if isinstance(act, str) else act

    def body(self, xn):
        x = xn.reshape(xn.shape[0], -1)
        for layer in self.layers:
            x = self.drop(self.act(layer(x)))
        return x


def build_module(spec):
    if spec.arch == "transformer":
        return TransformerForecaster(spec)
    if spec.arch == "mlp":
        return MlpForecaster(spec)
    return RecurrentForecaster(spec)


def run_module(module, x):
    """Forward in eval mode on PyTorch's plain math path.

    Autograd stays on (parameters require grad): that keeps nn.TransformerEncoderLayer off its
    fused inference fast path in every torch version, so the goldens are the documented
    composite semantics."""
    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        torch.backends.mha.set_fastpath_enabled(False)
    module.eval()
    with torch.enable_grad():
        return module(x).detach()


def run_inference(module, x):
    """Forward the way a PyTorch user serves the model: eval mode, torch.inference_mode(), with
    the MHA fast path (fused nn.TransformerEncoderLayer) allowed. The fast path's float32
    rounding differs from run_module's by ~1e-6, so goldens use run_module."""
    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        torch.backends.mha.set_fastpath_enabled(True)
    module.eval()
    with torch.inference_mode():
        return module(x).clone()


def write_model(model_dir, cfg, module, version=1, metadata=None):
    """Writes forecastd's repository layout: model_dir/config.json (cfg, protobuf JSON) and
    model_dir/<version>/model.safetensors (module's state_dict, float32, in its order)."""
    os.makedirs(os.path.join(model_dir, str(version)), exist_ok=True)
    tmp = os.path.join(model_dir, "config.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    os.replace(tmp, os.path.join(model_dir, "config.json"))
    write_safetensors(os.path.join(model_dir, str(version), "model.safetensors"),
                      [(k, v.detach().cpu().numpy()) for k, v in module.state_dict().items()],
                      metadata)


# ----------------------------------------------------------------------------------------------
# safetensors, read and written by hand.
# ----------------------------------------------------------------------------------------------

_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "F16": np.dtype("<f2"),
           "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}


class SafetensorsError(Exception):
    pass


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, array), written as F32 in that order, offsets contiguous."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name, arr in tensors:
        a = np.ascontiguousarray(np.asarray(arr, dtype=np.float32)).astype("<f4", copy=False)
        data = a.tobytes(order="C")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    os.replace(tmp, path)


def read_safetensors(path):
    """Returns ({name: float32/float64 ndarray}, metadata); strict about the layout."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SafetensorsError(f"{path}: cannot read: {e}")
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: {len(raw)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise SafetensorsError(f"{path}: header length {n} runs past the end of the file "
                               f"({len(raw)} bytes)")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON: {e}")
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data = raw[8 + n:]
    spans, tensors = [], {}
    for name, info in header.items():
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r}: entry {info!r} lacks dtype, shape "
                                   "or data_offsets [begin, end]")
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r}: unsupported dtype {dtype!r}")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise SafetensorsError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * _DTYPES[dtype].itemsize
        if not (0 <= b <= e <= len(data)) or e - b != nbytes:
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets [{b}, {e}] do not hold "
                                   f"{dtype}{shape} ({nbytes} bytes) within {len(data)} data bytes")
        spans.append((b, e, name))
        arr = np.frombuffer(data[b:e], dtype=_DTYPES[dtype]).reshape(shape)
        if dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F16":
            arr = arr.astype(np.float32)
        elif dtype in ("I64", "I32"):
            arr = arr.astype(np.float64)
        tensors[name] = arr.copy()
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise SafetensorsError(f"{path}: tensor {name!r} starts at data offset {b}, expected "
                                   f"{pos}: the data must be contiguous, without holes or overlap")
        pos = e
    if pos != len(data):
        raise SafetensorsError(f"{path}: {len(data) - pos} bytes after the last tensor")
    return tensors, metadata


# ----------------------------------------------------------------------------------------------
# Seeded weights and inputs, and the error metric.
# ----------------------------------------------------------------------------------------------


def max_rel_err(got, want):
    """max over elements of |got - want| / max(|want|, 1); inf on a shape mismatch or a
    non-finite value in got."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return math.inf
    if got.size == 0:
        return 0.0
    err = np.abs(got - want) / np.maximum(np.abs(want), 1.0)
    if not np.all(np.isfinite(got)):
        return math.inf
    return float(err.max())


def randomize(module, seed, gains=None):
    """Seeded weights: matrices U(-sqrt(3/fan_in), +), biases U(-0.5, 0.5), LayerNorm gains and
    window_scaling.weight U(0.6, 1.4), normaliser mean U(-4, 6) and std U(0.5, 2). Drawn in
    float64 with torch's CPU generator, in state_dict order, then rounded to float32.
    gains: {name suffix: factor} scales the matching tensors."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            u = torch.rand(t.shape, dtype=torch.float64)
            leaf = name.rsplit(".", 1)[-1]
            is_ln = name.startswith("encoder.norm.") or ".norm1." in name or ".norm2." in name
            if name == "normalizer.mean":
                v = -4.0 + 10.0 * u
            elif name == "normalizer.std":
                v = 0.5 + 1.5 * u
            elif (is_ln and leaf == "weight") or name == "window_scaling.weight":
                v = 0.6 + 0.8 * u
            elif t.dim() == 2:
                s = math.sqrt(3.0 / t.shape[1])
                v = s * (2.0 * u - 1.0)
            else:  # biases (LayerNorm's included)
                v = 0.5 * (2.0 * u - 1.0)
            for suffix, factor in (gains or {}).items():
                if name.endswith(suffix):
                    v = v * factor
            t.copy_(v.to(t.dtype))
            if t.dim() == 1 and bool((t == 0).any()):
                raise AssertionError(f"{name}: a zero bias; pick another seed")


def window_levels(spec, seed, batch, spread):
    """(batch, 1, F) float64 per-window levels in normaliser stds: U(-spread, spread), drawn
    from a generator seeded with seed + 1299709."""
    g = torch.Generator().manual_seed(seed + 1299709)
    u = torch.rand((batch, 1, spec.F), dtype=torch.float64, generator=g)
    return spread * (2.0 * u - 1.0)


def make_input(spec, module, seed, batch, level_spread=0.0):
    """(batch, T, F) float32 raw inputs around the normaliser's statistics:
    mean + 1.5 * std * N(0, 1), drawn in float64 from a generator seeded with seed + 7919.
    level_spread > 0: each window (and feature) also gets its own level, + std * o with
    o = window_levels(spec, seed, batch, level_spread) (the same for all T rows of a window), an
    offset for window scaling to remove. Without a normaliser: N(0, 1) (+ o)."""
    g = torch.Generator().manual_seed(seed + 7919)
    z = torch.randn((batch, spec.T, spec.F), dtype=torch.float64, generator=g)
    o = window_levels(spec, seed, batch, level_spread) if level_spread > 0.0 else None
    if spec.records:
        # Records: window b of series b mod S, around that series' statistics, then the
        # future-known values of its P steps around theirs, then the series index.
        idx = torch.arange(batch) % spec.S if spec.S else None
        c, d = module.record_stats(idx, batch, torch.float64)
        c, d = c.detach().double(), d.detach().double()
        x = c[:, None, :] + 1.5 * d[:, None, :] * z
        if o is not None:
            x = x + d[:, None, :] * o
        parts = [x.reshape(batch, -1)]
        if spec.Fk:
            j = spec.future_index
            zf = torch.randn((batch, spec.P, spec.Fk), dtype=torch.float64, generator=g)
            parts.append((c[:, None, j] + 1.5 * d[:, None, j] * zf).reshape(batch, -1))
        if idx is not None:
            parts.append(idx.double()[:, None])
        return torch.cat(parts, dim=1).to(torch.float32)
    if spec.standardized:
        mean = module.normalizer.mean.double()
        std = module.normalizer.std.double()
        z = mean + 1.5 * std * z
        if o is not None:
            z = z + std * o
    elif o is not None:
        z = z + o
    return z.to(torch.float32)


def state_dict_np(module, dtype=np.float64):
    """{name: ndarray} copies of module's state_dict, in its order."""
    return {k: v.detach().cpu().numpy().astype(dtype) for k, v in module.state_dict().items()}

