#!/usr/bin/env python3
"""PyTorch golden files for forecastd's numerical parity tests.

forecastd's C++ forecasters (LSTM, GRU, transformer, MLP) must reproduce PyTorch to 1e-5 relative
error in float32. This script takes the PyTorch reference modules of scripts/forecastd_torch.py,
whose state_dict() names are exactly the weight names of proto/forecastd/v1/model_config.proto,
fills them with seeded random weights, runs them, and writes one directory per case:

    <out>/<case>/config.json        ModelConfig in protobuf's JSON mapping
    <out>/<case>/model.safetensors  float32 weights (plus normalizer.mean / normalizer.std, and
                                    window_scaling.weight / .bias with windowScaling.affine)
    <out>/<case>/io.safetensors     `input` (B, T, F) raw and `output` (B, P, targets), or
                                    (B, P, targets, Q) with quantiles, from PyTorch
    <out>/<case>/train.safetensors  a training step and ten optimiser steps on that batch in
                                    PyTorch: `target`, `loss`, `grad.<param>`, `losses`,
                                    `after.<param>`, the loss / optimiser settings as metadata

Stateful (truncated back-propagation through time) cases, TBPTT_CASES, write instead:

    <out>/<case>/config.json        as above (unidirectional LSTM / GRU)
    <out>/<case>/model.safetensors  the initial weights, with the normaliser fitted on the
                                    series' training split
    <out>/<case>/tbptt.safetensors  `series` (N, F) raw, and ten optimiser steps of stateful
                                    training on it in PyTorch: `loss`, `grad.<param>`, `losses`,
                                    `validation_loss`, `after.<param>`, settings as metadata

Usage:
    make_golden.py                    regenerate every case under tests/golden/ (deterministic)
    make_golden.py --out DIR          write the cases under DIR instead
    make_golden.py --case NAME ...    only these cases (e.g. --case lstm_tbptt gru_tbptt)
    make_golden.py --verify DIR ...   load DIR/config.json (or DIR/../config.json, the
                                      models/<name>/<version>/ layout) and DIR/model.safetensors,
                                      build the PyTorch module, load_state_dict(strict=True), run
                                      it on DIR/io.safetensors' `input` (or --io FILE) and compare
                                      with its `output`; with DIR/train.safetensors, also
                                      re-runs the training it describes and compares (1e-4);
                                      exits 1 on any mismatch.

Error metric, everywhere: max over elements of |got - want| / max(|want|, 1), which must be
<= 1e-5 for forecasts and <= 1e-4 for training results (relative for |want| >= 1, absolute below,
so values near zero do not blow it up).

Runs with Debian's python3-torch 1.13 and with PyPI's torch 2.x. No safetensors package needed:
scripts/forecastd_torch.py reads and writes the format itself.
"""

import argparse
import copy
import inspect
import json
import math
import os
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "scripts")))
from forecastd_torch import (  # noqa: E402  (needs the sys.path entry above)
    ConfigError, SafetensorsError, Spec, build_module, make_input, max_rel_err, randomize,
    read_safetensors, run_module, sinusoid_table, state_dict_np, window_levels, write_safetensors)

RTOL = 1e-5        # forecasts
TRAIN_RTOL = 1e-4  # training goldens (loss, gradients, losses, parameters after the steps)
TRAIN_STEPS = 10

# ----------------------------------------------------------------------------------------------
# The cases. Shared dims: F=3 features, T=7, P=4, 2 targets, B=3.
# ----------------------------------------------------------------------------------------------

FEATURES = ["load", "temperature", "price"]
LOOKBACK = 7
HORIZON = 4
BATCH = 3


def _train(loss="mse", optimizer="adam", lr=1e-2, huber_delta=1.0, beta1=0.9, beta2=0.999,
           eps=1e-8, weight_decay=0.0, momentum=0.0, nesterov=False, clip_grad_norm=0.0):
    """A case's training settings (TrainingConfig's loss and optimizer; defaults as there).
    Settings that do not apply (huber_delta unless huber, betas/eps for SGD, momentum/nesterov
    for Adam(W)) keep their defaults and are unused."""
    return dict(loss=loss, huber_delta=huber_delta, optimizer=optimizer, lr=lr, beta1=beta1,
                beta2=beta2, eps=eps, weight_decay=weight_decay, momentum=momentum,
                nesterov=nesterov, clip_grad_norm=clip_grad_norm)


def _window(kind, affine=False, forecast_change=False, eps=None, level_spread=6.0):
    """A case's window scaling: the config's windowScaling (kind by name; affine /
    forecastChange / eps written only when set) and `level_spread`: its inputs (and training
    targets) get a per-window level of U(-level_spread, level_spread) normaliser stds per
    feature (forecastd_torch.window_levels), so that scaling by each window's own statistics
    matters."""
    cfg = {"kind": kind}
    if affine:
        cfg["affine"] = True
    if eps is not None:
        cfg["eps"] = eps
    if forecast_change:
        cfg["forecastChange"] = True
    return dict(config=cfg, level_spread=level_spread)


def _covariates(future=(), calendar=(), static=(), series=()):
    """A case's covariates (ModelConfig.covariates: future-known features, calendar features by
    name, static covariates) and series (ModelConfig.series)."""
    return dict(future=list(future), calendar=list(calendar), static=list(static),
                series=list(series))


def _recurrent(name, seed, arch, hidden, layers, bidirectional, targets, dropout=0.0,
               quantiles=None, train=None, window=None, covariates=None):
    return dict(name=name, seed=seed, arch=arch, hidden=hidden, layers=layers,
                bidirectional=bidirectional, targets=targets, dropout=dropout,
                quantiles=quantiles, train=train or _train(), window=window,
                covariates=covariates)


def _transformer(name, seed, norm_first, activation, causal, targets, eps=None, gains=None,
                 quantiles=None, train=None, window=None, covariates=None):
    return dict(name=name, seed=seed, arch="transformer", d_model=8, heads=2, layers=2, d_ff=16,
                norm_first=norm_first, activation=activation, causal=causal, targets=targets,
                dropout=0.1, eps=eps, gains=gains or {}, quantiles=quantiles,
                train=train or _train(), window=window, covariates=covariates)


def _mlp(name, seed, hidden, layers, activation, targets, quantiles=None, train=None,
         window=None, covariates=None):
    return dict(name=name, seed=seed, arch="mlp", hidden=hidden, layers=layers,
                activation=activation, targets=targets, dropout=0.1 if layers else 0.0,
                quantiles=quantiles, train=train or _train(), window=window,
                covariates=covariates)


# Targets are deliberately not always in feature order, so the de-normalisation must look
# each target's feature index up by name.
# Training settings (`train`): Adam lr 1e-2 with MSE unless stated.
CASES = [
    _recurrent("lstm_uni_l1", 1101, "lstm", 5, 1, False, ["load", "price"]),
    _recurrent("lstm_uni_l2", 1102, "lstm", 5, 2, False, ["price", "load"], dropout=0.1),
    _recurrent("lstm_bi_l1", 1103, "lstm", 5, 1, True, ["temperature", "load"]),
    # Huber with delta 0.5 (both branches occur, asserted), AdamW, clipping that triggers.
    _recurrent("lstm_bi_l2", 1104, "lstm", 5, 2, True, ["price", "temperature"], dropout=0.1,
               train=_train(loss="huber", huber_delta=0.5, optimizer="adamw", weight_decay=0.05,
                            clip_grad_norm=0.13)),
    _recurrent("gru_uni_l1", 1201, "gru", 5, 1, False, ["price", "load"],
               train=_train(loss="mae", optimizer="sgd", lr=0.05, momentum=0.9)),
    # Adam with coupled (L2) weight decay and non-default betas / eps.
    _recurrent("gru_bi_l2", 1202, "gru", 5, 2, True, ["load", "price"], dropout=0.1,
               train=_train(beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.01)),
    _transformer("transformer_postln_gelu", 1301, False, "ACTIVATION_GELU", False,
                 ["price", "load"]),
    # layerNormEps 1e-3 (not the 1e-5 default) here: far enough from the default that a C++
    # side ignoring the field fails this case.
    _transformer("transformer_preln_relu", 1302, True, "ACTIVATION_RELU", False,
                 ["load", "price"], eps=1e-3,
                 train=_train(optimizer="adamw", weight_decay=0.05,
                              clip_grad_norm=2.0)),
    # SGD with Nesterov momentum and L2 weight decay.
    _transformer("transformer_postln_relu_causal", 1303, False, "ACTIVATION_RELU", True,
                 ["temperature", "price"],
                 train=_train(optimizer="sgd", lr=0.05, momentum=0.9, nesterov=True,
                              weight_decay=1e-3)),
    # The tanh and erf forms of GELU differ by < 5e-4 at most, so this case scales the
    # feed-forward weights up (linear1 x2, linear2 x3) and uses a seed where swapping the form
    # moves the output by ~50x the tolerance.
    _transformer("transformer_preln_gelu_tanh", 1308, True, "ACTIVATION_GELU_TANH", False,
                 ["price", "load"], gains={"linear1.weight": 2.0, "linear2.weight": 3.0}),
    # Probabilistic forecasts: quantiles [0.1, 0.5, 0.9], output (B, P, K, Q), pinball loss.
    _recurrent("lstm_quantile", 1401, "lstm", 5, 1, False, ["price", "load"],
               quantiles=[0.1, 0.5, 0.9], train=_train(loss="quantile")),
    _transformer("transformer_quantile", 1402, True, "ACTIVATION_GELU", False,
                 ["load", "temperature"], quantiles=[0.1, 0.5, 0.9],
                 train=_train(loss="quantile")),
    # Per-window scaling (windowScaling, RevIN). Inputs and targets sit at a per-window level of
    # U(-6, 6) normaliser stds per feature (_window's level_spread), which the scaling removes.
    _recurrent("lstm_window_scaling", 1601, "lstm", 5, 2, False, ["price", "temperature"],
               window=_window("WINDOW_SCALING_MEAN_STD", affine=True, forecast_change=True,
                              eps=1e-5)),
    # Huber with delta 0.5 and SGD with momentum; without affine there is nothing to learn in
    # the scaling itself. LAST_VALUE makes the scaled window's last row exactly 0.
    _recurrent("gru_last_value", 1602, "gru", 5, 1, True, ["temperature", "load"],
               window=_window("WINDOW_SCALING_LAST_VALUE"),
               train=_train(loss="huber", huber_delta=0.5, optimizer="sgd", lr=0.05,
                            momentum=0.9)),
    _transformer("transformer_window_scaling", 1603, True, "ACTIVATION_GELU", False,
                 ["load", "price"], quantiles=[0.1, 0.5, 0.9],
                 window=_window("WINDOW_SCALING_MEAN_STD", affine=True),
                 train=_train(loss="quantile")),
    # Covariates: the input is a record (window, future-known values for the P steps, series
    # index; forecastd_torch.Forecaster.split_record). Temperature is known ahead and so is the
    # hour of day (two calendar columns); the window scaling leaves the future-known columns
    # alone.
    _recurrent("lstm_covariates", 1701, "lstm", 5, 1, False, ["load", "price"],
               window=_window("WINDOW_SCALING_MEAN_STD", affine=True, forecast_change=True,
                              eps=1e-5),
               covariates=_covariates(future=["temperature"], calendar=["CALENDAR_HOUR_OF_DAY"])),
    # Three series, each standardised by its own statistics, with a static covariate per
    # series and a future-known feature.
    _transformer("transformer_series", 1702, True, "ACTIVATION_GELU", False, ["load", "price"],
                 covariates=_covariates(future=["temperature"], static=["size"],
                                        series=["north", "south", "east"])),
    # Series and static covariates without future-known features (the body reads T rows).
    _recurrent("gru_series", 1703, "gru", 5, 2, False, ["price", "load"],
               window=_window("WINDOW_SCALING_LAST_VALUE", level_spread=0.0),
               covariates=_covariates(static=["size", "age"], series=["a", "b"]),
               train=_train(optimizer="sgd", lr=0.05, momentum=0.9)),
    # The MLP: the body input flattened (T * F values per window), hidden layers, the head.
    _mlp("mlp_relu", 1801, 6, 2, "ACTIVATION_RELU", ["price", "load"]),
    # No hidden layers (a linear model of the window) under window scaling and forecastChange,
    # trained with MAE and AdamW.
    _mlp("mlp_linear_window_scaling", 1802, 0, 0, "ACTIVATION_UNSPECIFIED", ["load", "price"],
         window=_window("WINDOW_SCALING_MEAN_STD", affine=True, forecast_change=True),
         train=_train(loss="mae", optimizer="adamw", weight_decay=0.05)),
    # Records flattened: the window's rows and the forecast steps' (a future-known feature and
    # the flag column), static covariates of two series on every row; quantiles.
    _mlp("mlp_covariates", 1803, 5, 1, "ACTIVATION_GELU_TANH", ["load", "price"],
         quantiles=[0.1, 0.5, 0.9], train=_train(loss="quantile"),
         covariates=_covariates(future=["temperature"], static=["size"], series=["a", "b"])),
]


def level_spread(case):
    return case["window"]["level_spread"] if case.get("window") else 0.0


def case_config(case):
    """The case's ModelConfig as protobuf JSON (lowerCamelCase names, enums by name)."""
    cfg = {
        "name": case["name"],
        "description": "forecastd golden case, generated by tests/golden/make_golden.py",
        "lookback": LOOKBACK,
        "horizon": HORIZON,
        "featureNames": list(FEATURES),
        "targetNames": list(case["targets"]),
    }
    if case.get("quantiles"):
        cfg["quantiles"] = list(case["quantiles"])
    if case["arch"] in ("lstm", "gru"):
        cfg[case["arch"]] = {
            "hiddenSize": case["hidden"],
            "numLayers": case["layers"],
            "bidirectional": case["bidirectional"],
            "dropout": case["dropout"],
        }
    elif case["arch"] == "mlp":
        m = {"numLayers": case["layers"], "activation": case["activation"],
             "dropout": case["dropout"]}
        if case["hidden"]:
            m["hiddenSize"] = case["hidden"]
        cfg["mlp"] = m
    else:
        tf = {
            "dModel": case["d_model"],
            "numHeads": case["heads"],
            "numLayers": case["layers"],
            "dimFeedforward": case["d_ff"],
            "activation": case["activation"],
            "normFirst": case["norm_first"],
            "dropout": case["dropout"],
            "causal": case["causal"],
        }
        if case["eps"] is not None:
            tf["layerNormEps"] = case["eps"]
        cfg["transformer"] = tf
    cfg["normalization"] = "NORMALIZATION_STANDARD"
    if case.get("window"):
        cfg["windowScaling"] = dict(case["window"]["config"])
    cov = case.get("covariates")
    if cov:
        c = {}
        if cov["future"]:
            c["future"] = list(cov["future"])
        if cov["calendar"]:
            c["calendar"] = list(cov["calendar"])
        if cov["static"]:
            c["staticFeatures"] = list(cov["static"])
        cfg["covariates"] = c
        if cov["series"]:
            cfg["series"] = list(cov["series"])
    return cfg


# ----------------------------------------------------------------------------------------------
# An independent NumPy float64 implementation of the same contract, to check that the PyTorch
# modules (scripts/forecastd_torch.py) really compute what the proto says (and what the C++ side
# implements).
# ----------------------------------------------------------------------------------------------


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _layer_norm(u, w, b, eps):
    mu = u.mean(-1, keepdims=True)
    var = ((u - mu) ** 2).mean(-1, keepdims=True)
    return (u - mu) / np.sqrt(var + eps) * w + b


_erf = np.vectorize(math.erf)


def _act(u, name):
    if name == "ACTIVATION_RELU":
        return np.maximum(u, 0.0)
    if name == "ACTIVATION_GELU_TANH":
        return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))
    return 0.5 * u * (1.0 + _erf(u / math.sqrt(2.0)))


def numpy_window_stats(spec, u):
    """Per window and feature (B, F): centre c and scale s of u (B, T, F), as the proto says."""
    B, T, F = u.shape
    if spec.ws_kind == "WINDOW_SCALING_MEAN_STD":
        c = u.sum(axis=1) / T
        s = np.sqrt(((u - c[:, None, :]) ** 2).sum(axis=1) / T + spec.ws_eps)
    elif spec.ws_kind == "WINDOW_SCALING_LAST_VALUE":
        c, s = u[:, T - 1, :].copy(), np.ones((B, F))
    else:  # forecastChange alone
        c, s = np.zeros((B, F)), np.ones((B, F))
    return c, s


def numpy_split_record(spec, r):
    """r (B, R) -> window (B, T, F), future values (B, P, Fk) or None, series (B,) int or None."""
    B, TF = r.shape[0], spec.T * spec.F
    x = r[:, :TF].reshape(B, spec.T, spec.F)
    f = r[:, TF:TF + spec.P * spec.Fk].reshape(B, spec.P, spec.Fk) if spec.Fk else None
    idx = r[:, -1].astype(np.int64) if spec.S else None
    return x, f, idx


def numpy_record_stats(spec, sd, idx, B):
    """Per-window normaliser statistics (B, F)."""
    if not spec.standardized:
        return np.zeros((B, spec.F)), np.ones((B, spec.F))
    mean, std = sd["normalizer.mean"], sd["normalizer.std"]
    if idx is not None:
        return mean[idx], std[idx]
    return np.broadcast_to(mean, (B, spec.F)), np.broadcast_to(std, (B, spec.F))


def numpy_forward_records(spec, sd, r, denormalize=True):
    """The record path (engine/models/forecaster_records.cc's maths) in NumPy float64."""
    B, T, P, F = r.shape[0], spec.T, spec.P, spec.F
    x, f, idx = numpy_split_record(spec, r)
    c, d = numpy_record_stats(spec, sd, idx, B)
    xn = (x - c[:, None, :]) / d[:, None, :]
    xw = xn
    if spec.window_scaling:
        wc, ws = numpy_window_stats(spec, xn)
        xw = (xn - wc[:, None, :]) / ws[:, None, :]
        if spec.ws_affine:
            xw = xw * sd["window_scaling.weight"] + sd["window_scaling.bias"]
        xw = xw.copy()
        xw[:, :, spec.future_index] = xn[:, :, spec.future_index]
    rows = [xw]
    if spec.Fk:
        j = spec.future_index
        fut = np.zeros((B, P, F))
        fut[:, :, j] = (f - c[:, None, j]) / d[:, None, j]
        rows.append(fut)
    u = np.concatenate(rows, axis=1)
    cols = [u]
    if spec.Fs:
        cols.append(np.broadcast_to(sd["series.static"][idx][:, None, :], (B, spec.TB, spec.Fs)))
    if spec.Fk:
        flag = np.zeros((B, spec.TB, 1))
        flag[:, T:, :] = 1.0
        cols.append(flag)
    y = numpy_body_head(spec, sd, np.concatenate(cols, axis=2))
    if spec.window_scaling:
        eps2 = spec.ws_eps * spec.ws_eps
        for k, fk in enumerate(spec.target_index):
            a = y[:, :, k]
            col = (lambda v: v[:, None, None]) if spec.Q else (lambda v: v[:, None])  # noqa
            if spec.ws_forecast_change:
                a = a + col(xw[:, T - 1, fk])
            if spec.ws_affine:
                a = (a - sd["window_scaling.bias"][fk]) / (sd["window_scaling.weight"][fk] + eps2)
            y[:, :, k] = a * col(ws[:, fk]) + col(wc[:, fk])
    if denormalize:
        for k, fk in enumerate(spec.target_index):
            col = (lambda v: v[:, None, None]) if spec.Q else (lambda v: v[:, None])  # noqa
            y[:, :, k] = y[:, :, k] * col(d[:, fk]) + col(c[:, fk])
    return y


def numpy_target_stats(spec, sd, x):
    """Each window's target statistics (B, K), as numpy arrays."""
    B = x.shape[0]
    idx = numpy_split_record(spec, x)[2] if spec.records else None
    c, d = numpy_record_stats(spec, sd, idx, B)
    return c[:, spec.target_index], d[:, spec.target_index]


def numpy_forward(spec, sd, x, denormalize=True):
    """sd: name -> float64 ndarray; x: (B, T, F) float64, or (B, R) records for a model with
    covariates or series. Returns (B, P, K) or (B, P, K, Q); denormalize=False: in normalised
    units (what the training loss sees)."""
    if spec.records:
        return numpy_forward_records(spec, sd, x, denormalize)
    B, T, _ = x.shape
    xn = (x - sd["normalizer.mean"]) / sd["normalizer.std"] if spec.standardized else x
    if spec.ws_kind != "WINDOW_SCALING_NONE" or spec.ws_forecast_change:
        # Window scaling: the body reads x_w, built from the window's own statistics.
        c, s = numpy_window_stats(spec, xn)
        xn = (xn - c[:, None, :]) / s[:, None, :]
        if spec.ws_affine:
            xn = xn * sd["window_scaling.weight"] + sd["window_scaling.bias"]
    y = numpy_body_head(spec, sd, xn)
    if spec.ws_kind != "WINDOW_SCALING_NONE" or spec.ws_forecast_change:
        eps2 = spec.ws_eps * spec.ws_eps
        for k, f in enumerate(spec.target_index):  # y[:, :, k] is (B, P) or (B, P, Q)
            a = y[:, :, k]
            col = (lambda v: v[:, None, None]) if spec.Q else (lambda v: v[:, None])  # noqa
            if spec.ws_forecast_change:
                a = a + col(xn[:, T - 1, f])
            if spec.ws_affine:
                a = (a - sd["window_scaling.bias"][f]) / (sd["window_scaling.weight"][f] + eps2)
            y[:, :, k] = a * col(s[:, f]) + col(c[:, f])
    if spec.standardized and denormalize:
        idx = spec.target_index
        std, mean = sd["normalizer.std"][idx], sd["normalizer.mean"][idx]
        if spec.Q:  # each target's std / mean applies to all its quantiles
            std, mean = std[:, None], mean[:, None]
        y = y * std + mean
    return y


def numpy_body_head(spec, sd, xn):
    """The architecture and the head on the window xn (B, T, F): (B, P, K) or (B, P, K, Q)."""
    B, T, _ = xn.shape
    if spec.arch in ("lstm", "gru"):
        H = spec.H
        h_seq = xn
        for k in range(spec.L):
            outs = []
            for suffix in ([""] + (["_reverse"] if spec.bidirectional else [])):
                wi, wh = sd[f"rnn.weight_ih_l{k}{suffix}"], sd[f"rnn.weight_hh_l{k}{suffix}"]
                bi, bh = sd[f"rnn.bias_ih_l{k}{suffix}"], sd[f"rnn.bias_hh_l{k}{suffix}"]
                h = np.zeros((B, H))
                c = np.zeros((B, H))
                out = np.zeros((B, T, H))
                steps = range(T - 1, -1, -1) if suffix else range(T)
                for t in steps:
                    gi = h_seq[:, t, :] @ wi.T + bi
                    gh = h @ wh.T + bh
                    if spec.arch == "lstm":  # gate order i, f, g, o
                        g = gi + gh
                        i_, f_ = _sigmoid(g[:, :H]), _sigmoid(g[:, H:2 * H])
                        g_, o_ = np.tanh(g[:, 2 * H:3 * H]), _sigmoid(g[:, 3 * H:])
                        c = f_ * c + i_ * g_
                        h = o_ * np.tanh(c)
                    else:  # gate order r, z, n
                        r = _sigmoid(gi[:, :H] + gh[:, :H])
                        z = _sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
                        n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
                        h = (1.0 - z) * n + z * h
                    out[:, t, :] = h
                outs.append(out)
            h_seq = np.concatenate(outs, axis=-1)
        last = h_seq[:, -1, :]
    elif spec.arch == "mlp":
        last = xn.reshape(B, -1)
        for k in range(spec.L):
            last = _act(last @ sd[f"layers.{k}.weight"].T + sd[f"layers.{k}.bias"],
                        spec.activation)
    else:
        D, NH = spec.D, spec.NH
        hs = D // NH
        h = xn @ sd["input_proj.weight"].T + sd["input_proj.bias"] + sinusoid_table(T, D)
        for k in range(spec.L):
            p = lambda n: sd[f"encoder.layers.{k}.{n}"]  # noqa: E731

            def sa(u):
                qkv = u @ p("self_attn.in_proj_weight").T + p("self_attn.in_proj_bias")
                q, kk, v = (qkv[..., j * D:(j + 1) * D].reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
                            for j in range(3))
                s = q @ kk.transpose(0, 1, 3, 2) / math.sqrt(hs)
                if spec.causal:
                    s = s + np.triu(np.full((T, T), -np.inf), 1)
                s = np.exp(s - s.max(-1, keepdims=True))
                a = s / s.sum(-1, keepdims=True)
                o = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
                return o @ p("self_attn.out_proj.weight").T + p("self_attn.out_proj.bias")

            def ff(u):
                m = _act(u @ p("linear1.weight").T + p("linear1.bias"), spec.activation)
                return m @ p("linear2.weight").T + p("linear2.bias")

            ln1 = lambda u: _layer_norm(u, p("norm1.weight"), p("norm1.bias"), spec.eps)  # noqa
            ln2 = lambda u: _layer_norm(u, p("norm2.weight"), p("norm2.bias"), spec.eps)  # noqa
            if spec.norm_first:
                h = h + sa(ln1(h))
                h = h + ff(ln2(h))
            else:
                h = ln1(h + sa(h))
                h = ln2(h + ff(h))
        last = h[:, -1, :]
        if spec.norm_first:  # per position, so applying it to the last one only is the same
            last = _layer_norm(last, sd["encoder.norm.weight"], sd["encoder.norm.bias"], spec.eps)
    return (last @ sd["head.weight"].T + sd["head.bias"]).reshape(spec.output_shape(B))


# ----------------------------------------------------------------------------------------------
# Generation.
# ----------------------------------------------------------------------------------------------


def numpy_variant(spec, sd, x, **changes):
    v = copy.copy(spec)
    for k, val in changes.items():
        setattr(v, k, val)
    return numpy_forward(v, sd, x)


# ----------------------------------------------------------------------------------------------
# Training goldens: one training step and TRAIN_STEPS optimiser steps on the case's batch.
# ----------------------------------------------------------------------------------------------

LOSS_KINDS = ("mse", "mae", "huber", "quantile")
OPTIMIZER_KINDS = ("adam", "adamw", "sgd")
_FLOAT_SETTINGS = ("huber_delta", "lr", "beta1", "beta2", "eps", "weight_decay", "momentum",
                   "clip_grad_norm")
# Residuals (pred - yn) this close to a kink of the loss (0 for MAE and the pinball loss,
# +-delta for Huber) are refused: another implementation's rounding could put them on the
# other side and flip a gradient term.
KINK_MARGIN = 1e-4


def _f32(v):
    return float(np.float32(v))


def train_settings(settings):
    """The settings as the training runs them: floats rounded to float32 (what the C++ side
    holds in TrainingConfig's proto floats), so both sides use the very same values."""
    st = dict(settings)
    for k in _FLOAT_SETTINGS:
        st[k] = _f32(st[k])
    st["nesterov"] = bool(st["nesterov"])
    if st["loss"] not in LOSS_KINDS or st["optimizer"] not in OPTIMIZER_KINDS:
        raise ValueError(f"loss {st['loss']!r} / optimizer {st['optimizer']!r} unknown")
    if st["nesterov"] and (st["optimizer"] != "sgd" or st["momentum"] <= 0.0):
        raise ValueError("nesterov needs SGD with momentum > 0")
    return st


def train_metadata(st, steps, exclude):
    meta = {"loss": st["loss"], "optimizer": st["optimizer"]}
    meta.update({k: repr(float(st[k])) for k in _FLOAT_SETTINGS})
    meta["nesterov"] = "true" if st["nesterov"] else "false"
    meta["steps"] = str(steps)
    meta["dropout"] = "0.0"  # every dropout off in training goldens, whatever the config says
    meta["after_exclude"] = " ".join(f"{n}[{b}:{e}]" for n, b, e in exclude)
    return meta


def parse_exclude(text):
    """after_exclude "name[b:e] name[b:e] ..." -> [(name, b, e)] (flat element ranges)."""
    out = []
    for item in text.split():
        name, _, rng = item.partition("[")
        b, _, e = rng.rstrip("]").partition(":")
        out.append((name, int(b), int(e)))
    return out


def adam_noise_slices(spec, st):
    """Elements whose exact gradient is identically zero but whose float32 gradient is rounding
    noise, which Adam(W)'s g / (sqrt(v) + eps) blows up to updates of up to ~lr per step: the
    key third of each attention layer's in_proj_bias (a key bias adds q . b_k to every score of
    a query, which softmax cancels). Their after.* values are not reproducible, so they are
    listed in the metadata's after_exclude. [(name, begin, end)] over the flattened tensor."""
    if spec.arch != "transformer" or st["optimizer"] not in ("adam", "adamw"):
        return []
    return [(f"encoder.layers.{k}.self_attn.in_proj_bias", spec.D, 2 * spec.D)
            for k in range(spec.L)]


def _masked(arrays, exclude):
    """{name: ndarray} copies with the excluded elements set to 0."""
    out = {n: np.array(a, dtype=np.float64) for n, a in arrays.items()}
    for n, b, e in exclude:
        out[n].reshape(-1)[b:e] = 0.0
    return out


def parse_train_metadata(meta):
    """train.safetensors' __metadata__ -> (settings, steps); ValueError when incomplete."""
    missing = [k for k in ("loss", "optimizer", "nesterov", "steps") + _FLOAT_SETTINGS
               if k not in meta]
    if missing:
        raise ValueError(f"metadata lacks {missing}")
    if meta["nesterov"] not in ("true", "false"):
        raise ValueError(f"nesterov is {meta['nesterov']!r}, not true/false")
    st = {"loss": meta["loss"], "optimizer": meta["optimizer"],
          "nesterov": meta["nesterov"] == "true"}
    for k in _FLOAT_SETTINGS:
        st[k] = float(meta[k])
    steps = int(meta["steps"])
    if steps < 1:
        raise ValueError(f"steps is {steps}")
    if meta.get("dropout", "0.0") != "0.0":
        raise ValueError(f"dropout {meta['dropout']!r}: only dropout 0 is reproducible")
    return train_settings(st), steps, parse_exclude(meta.get("after_exclude", ""))


def make_target(spec, module, seed, batch, level_spread=0.0, x=None):
    """(batch, P, K) float32 raw targets around each target feature's normaliser statistics:
    mean + 1.5 * std * N(0, 1), drawn in float64 from a generator seeded with seed + 104729.
    level_spread > 0: plus std * o[b, f_k], the level window b's input has in the target's
    feature (forecastd_torch.window_levels, as make_input adds it), so the targets lie near
    their window's level like its observations do."""
    g = torch.Generator().manual_seed(seed + 104729)
    z = torch.randn((batch, spec.P, spec.K), dtype=torch.float64, generator=g)
    idx = torch.tensor(spec.target_index, dtype=torch.long)
    o = (window_levels(spec, seed, batch, level_spread)[:, :, idx] if level_spread > 0.0
         else None)
    if spec.records:
        # Around each window's own statistics (its series'), as its observations are.
        c, d = _target_stats(module, x)
        z = c[:, None, :] + 1.5 * d[:, None, :] * z
        if o is not None:
            z = z + d[:, None, :] * o
    elif spec.standardized:
        z = module.normalizer.mean.double()[idx] + 1.5 * module.normalizer.std.double()[idx] * z
        if o is not None:
            z = z + module.normalizer.std.double()[idx] * o
    elif o is not None:
        z = z + o
    return z.to(torch.float32)


def _target_stats(module, x):
    """module.target_stats(x) in float64, detached."""
    c, d = module.target_stats(x)
    return c.detach().double(), d.detach().double()


def training_module(spec, state):
    """The module training goldens use: built from spec with every dropout 0 (a separate
    instance; configs may set dropout for real training), loaded with state, in train mode."""
    s = copy.copy(spec)
    s.dropout = 0.0
    module = build_module(s)
    module.load_state_dict(state, strict=True)
    module.train()
    return module


def normalized_target(module, spec, target, x):
    """yn = (target - mean[f_k]) / std[f_k], in the module's dtype; with records, each window's
    statistics (its series')."""
    if spec.records:
        c, d = module.target_stats(x)
        return (target - c[:, None, :]) / d[:, None, :]
    if module.normalizer is None:
        return target
    idx = torch.tensor(spec.target_index, dtype=torch.long)
    return (target - module.normalizer.mean[idx]) / module.normalizer.std[idx]


def training_loss(st, spec, pred, yn):
    """pred: (B, P, K) or (B, P, K, Q) normalised forecast; yn: (B, P, K)."""
    if (st["loss"] == "quantile") != bool(spec.Q):
        raise ValueError(f"loss {st['loss']!r} with {spec.Q} quantiles: models with quantiles "
                         "are trained with the quantile loss, point forecasts without")
    if st["loss"] == "quantile":
        tau = torch.tensor(spec.quantiles, dtype=pred.dtype)
        e = yn.unsqueeze(-1) - pred
        return torch.maximum(tau * e, (tau - 1) * e).mean()
    if st["loss"] == "mse":
        return nn.MSELoss()(pred, yn)
    if st["loss"] == "mae":
        return nn.L1Loss()(pred, yn)
    return nn.HuberLoss(delta=st["huber_delta"])(pred, yn)


def make_optimizer(params, st):
    if st["optimizer"] == "sgd":
        cls = torch.optim.SGD
        kw = dict(lr=st["lr"], momentum=st["momentum"], nesterov=st["nesterov"],
                  weight_decay=st["weight_decay"])
    else:
        cls = torch.optim.Adam if st["optimizer"] == "adam" else torch.optim.AdamW
        kw = dict(lr=st["lr"], betas=(st["beta1"], st["beta2"]), eps=st["eps"],
                  weight_decay=st["weight_decay"])
    if "foreach" in inspect.signature(cls.__init__).parameters:
        kw["foreach"] = False  # the single-tensor arithmetic
    return cls(params, **kw)


def run_training(module, x, target, st, spec, steps):
    """Full-batch training on (x, target): losses[i] before step i+1, losses[steps] after the
    last; grads at the initial weights (before clipping); parameters after the steps."""
    module.train()
    names = [n for n, _ in module.named_parameters()]
    params = [p for _, p in module.named_parameters()]
    opt = make_optimizer(params, st)
    yn = normalized_target(module, spec, target, x).detach()
    losses, norms, residuals, grads = [], [], [], None
    gmax = {n: torch.zeros_like(p) for n, p in zip(names, params)}  # max |grad| over the steps
    for i in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        pred = module.forward_normalized(x)
        loss = training_loss(st, spec, pred, yn)
        losses.append(loss.detach().reshape(1).clone())
        residuals.append((pred - (yn.unsqueeze(-1) if spec.Q else yn)).detach().clone())
        if i == steps:
            break
        loss.backward()
        if any(p.grad is None for p in params):
            raise AssertionError("a parameter got no gradient")
        if grads is None:
            grads = {n: p.grad.detach().clone() for n, p in zip(names, params)}
        for n, p in zip(names, params):
            gmax[n] = torch.maximum(gmax[n], p.grad.detach().abs())
        if st["clip_grad_norm"] > 0.0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, st["clip_grad_norm"])))
        opt.step()
    return dict(losses=torch.cat(losses), grads=grads, norms=norms, residuals=residuals,
                gmax=gmax, after={n: p.detach().clone() for n, p in zip(names, params)})


def reference_training(module64, x64, target64, st, spec, steps):
    """The same training in float64 with the update rules of README.md applied by hand in
    NumPy (gradients from autograd): checks that the metadata and the README describe what
    torch.optim does. Returns (losses, {name: params after})."""
    names = [n for n, _ in module64.named_parameters()]
    params = dict(module64.named_parameters())
    w = {n: params[n].detach().numpy().copy() for n in names}
    m = {n: np.zeros_like(w[n]) for n in names}
    v = {n: np.zeros_like(w[n]) for n in names}
    buf = {}
    yn = normalized_target(module64, spec, target64, x64).detach()
    lr, wd, clip = st["lr"], st["weight_decay"], st["clip_grad_norm"]
    b1, b2, eps, mom = st["beta1"], st["beta2"], st["eps"], st["momentum"]
    losses = []
    for t in range(1, steps + 2):
        with torch.no_grad():
            for n in names:
                params[n].copy_(torch.from_numpy(w[n]))
        module64.zero_grad(set_to_none=True)
        loss = training_loss(st, spec, module64.forward_normalized(x64), yn)
        losses.append(float(loss.detach()))
        if t == steps + 1:
            break
        loss.backward()
        g = {n: params[n].grad.numpy().copy() for n in names}
        if clip > 0.0:
            norm = math.sqrt(sum(float((g[n] ** 2).sum()) for n in names))
            coef = min(1.0, clip / (norm + 1e-6))
            g = {n: g[n] * coef for n in names}
        for n in names:
            p, gn = w[n], g[n]
            if st["optimizer"] == "sgd":
                gn = gn + wd * p
                if mom > 0.0:
                    buf[n] = gn.copy() if t == 1 else mom * buf[n] + gn
                    gn = gn + mom * buf[n] if st["nesterov"] else buf[n]
                w[n] = p - lr * gn
            else:
                if st["optimizer"] == "adamw":
                    p = p * (1.0 - lr * wd)
                else:
                    gn = gn + wd * p
                m[n] = b1 * m[n] + (1.0 - b1) * gn
                v[n] = b2 * v[n] + (1.0 - b2) * gn * gn
                w[n] = p - (lr / (1.0 - b1 ** t)) * m[n] / (
                    np.sqrt(v[n]) / math.sqrt(1.0 - b2 ** t) + eps)
    return np.array(losses), w


def numpy_loss(st, spec, pred, yn):
    """The loss definitions of README.md in NumPy float64."""
    if st["loss"] == "quantile":
        tau = np.array(spec.quantiles)
        e = yn[..., None] - pred
        return float(np.maximum(tau * e, (tau - 1.0) * e).mean())
    e = pred - yn
    if st["loss"] == "mse":
        return float((e ** 2).mean())
    if st["loss"] == "mae":
        return float(np.abs(e).mean())
    d = st["huber_delta"]
    return float(np.where(np.abs(e) < d, 0.5 * e ** 2, d * (np.abs(e) - 0.5 * d)).mean())


def train_tensors(target, res):
    """train.safetensors' tensors, in file order."""
    names = list(res["grads"])
    return ([("target", target), ("loss", res["losses"][:1])]
            + [(f"grad.{n}", res["grads"][n]) for n in names]
            + [("losses", res["losses"])]
            + [(f"after.{n}", res["after"][n]) for n in names])


def _max_err(a, b):
    return max(max_rel_err(a[k].numpy(), b[k].numpy()) for k in a)


def generate_training(case, spec, module, x32, sd64):
    """Runs the case's training in float32 (the golden) and the checks; returns
    (tensors, metadata, summary)."""
    name = case["name"]
    st = train_settings(case["train"])
    target = make_target(spec, module, case["seed"], BATCH, level_spread(case), x32)
    m32 = training_module(spec, module.state_dict())
    res = run_training(m32, x32, target, st, spec, TRAIN_STEPS)

    # The golden must be trustworthy to TRAIN_RTOL: float64 agrees to a quarter of it (the worst
    # case, transformer_postln_gelu's input_proj gradient, is ~6e-6 with torch 1.13 and ~1.1e-5
    # with torch 2.11: cancellation in the post-LN backward).
    m64 = training_module(spec, module.state_dict()).double()
    x64, t64 = x32.double(), target.double()
    res64 = run_training(m64, x64, t64, st, spec, TRAIN_STEPS)
    # Elements with an exactly-zero gradient that Adam turns rounding noise into updates of: the
    # excluded ones must be exactly those (float64 gradient <= 1e-12 at every step, float32 not
    # exactly 0), and are left out of the after.* comparisons.
    exclude = adam_noise_slices(spec, st)
    if st["optimizer"] in ("adam", "adamw"):
        flagged = _masked({n: ((res64["gmax"][n] <= 1e-12) & (res["gmax"][n] > 0)).numpy()
                           for n in res["gmax"]}, exclude)
        stray = [n for n, f in flagged.items() if f.any()]
        if stray:
            raise AssertionError(f"{name}: unexpected noise-driven Adam updates in {stray}")
        for n, b, e in exclude:
            if not float(res64["gmax"][n].reshape(-1)[b:e].max()) <= 1e-12:
                raise AssertionError(f"{name}: {n}[{b}:{e}] has a float64 gradient: not a "
                                     "structural zero")
    after32 = _masked({n: t.numpy() for n, t in res["after"].items()}, exclude)
    after64 = _masked({n: t.numpy() for n, t in res64["after"].items()}, exclude)
    errs = {"loss": max_rel_err(res["losses"].numpy(), res64["losses"].numpy()),
            "grad": _max_err(res["grads"], res64["grads"]),
            "after": max(max_rel_err(after32[n], after64[n]) for n in after32)}
    for what, e in errs.items():
        if not e <= TRAIN_RTOL / 4:
            raise AssertionError(f"{name}: training {what}, float32 vs float64 PyTorch: {e:.3g} "
                                 f"> {TRAIN_RTOL / 4:g}: the golden would not be trustworthy")
    # The loss definition, independently: NumPy float64 forward and loss at the initial weights.
    yn64 = normalized_target(m64, spec, t64, x64).detach().numpy()
    tc, td = numpy_target_stats(spec, sd64, x64.numpy())
    yn_np = (t64.numpy() - tc[:, None, :]) / td[:, None, :]
    l_np = numpy_loss(st, spec, numpy_forward(spec, sd64, x64.numpy(), denormalize=False), yn_np)
    e_np = max(abs(l_np - float(res64["losses"][0])) / max(abs(l_np), 1.0),
               max_rel_err(yn64, yn_np))
    if not e_np <= 1e-10:
        raise AssertionError(f"{name}: NumPy loss {l_np!r} vs PyTorch float64 "
                             f"{float(res64['losses'][0])!r}")
    # The optimiser, independently: the README's update rules by hand, in float64.
    mref = training_module(spec, module.state_dict()).double()
    l_ref, w_ref = reference_training(mref, x64, t64, st, spec, TRAIN_STEPS)
    w_ref = _masked(w_ref, exclude)
    w_64 = _masked({n: t.numpy() for n, t in res64["after"].items()}, exclude)
    e_opt = max(max_rel_err(l_ref, res64["losses"].numpy()),
                max(max_rel_err(w_ref[k], w_64[k]) for k in w_ref))
    if not e_opt <= 1e-10:
        raise AssertionError(f"{name}: hand-written {st['optimizer']} vs torch.optim in float64: "
                             f"{e_opt:.3g}")

    # No residual near a kink of the loss, at any of the steps.
    kink = {"mae": 0.0, "quantile": 0.0, "huber": st["huber_delta"]}.get(st["loss"])
    if kink is not None:
        gap = min(float((r.abs() - kink).abs().min()) for r in res["residuals"])
        if not gap > KINK_MARGIN:
            raise AssertionError(f"{name}: a residual within {gap:.3g} of the {st['loss']} "
                                 "loss's kink; pick another seed")
    extra = ""
    if st["loss"] == "huber":
        inside = [int((r.abs() < kink).sum()) for r in res["residuals"]]
        n = res["residuals"][0].numel()
        if not all(0 < k < n for k in inside):
            raise AssertionError(f"{name}: Huber residuals inside delta per step {inside} of {n}: "
                                 "both branches must occur at every step")
        extra += f" |e|<delta {min(inside)}..{max(inside)}/{n}"
    if st["clip_grad_norm"] > 0.0:
        clipped = sum(nm > st["clip_grad_norm"] for nm in res["norms"])
        if not res["norms"][0] > st["clip_grad_norm"]:
            raise AssertionError(f"{name}: gradient norm {res['norms'][0]:.3g} at the first step "
                                 f"does not exceed clip_grad_norm {st['clip_grad_norm']:g}")
        extra += (f" norm0={res['norms'][0]:.3g} clipped {clipped}/{TRAIN_STEPS}")
    meta = {"format": "pt", "generator": "tests/golden/make_golden.py", "case": name}
    meta.update(train_metadata(st, TRAIN_STEPS, exclude))
    if exclude:
        drift = max(max_rel_err(res["after"][n].numpy().reshape(-1)[b:e],
                                res64["after"][n].numpy().reshape(-1)[b:e]) for n, b, e in exclude)
        extra += f" key-bias noise {drift:.0e} (excluded)"
    l = res["losses"]
    opt = st["optimizer"] + (" nesterov" if st["nesterov"] else "")
    summary = (f"  train {st['loss']:<8} {opt:<13} loss {float(l[0]):.5f} -> "
               f"{float(l[-1]):.5f}{extra}  fp32-vs-fp64 loss={errs['loss']:.0e} "
               f"grad={errs['grad']:.0e} after={errs['after']:.0e} numpy-loss={e_np:.0e} "
               f"hand-optimizer={e_opt:.0e}")
    return train_tensors(target, res), meta, summary


def generate_case(case, out_root):
    cfg = case_config(case)
    spec = Spec(cfg)
    module = build_module(spec)
    randomize(module, case["seed"], case.get("gains"))
    x32 = make_input(spec, module, case["seed"], BATCH, level_spread(case))

    y32 = run_module(module, x32)
    m64 = copy.deepcopy(module).double()
    y64 = run_module(m64, x32.double())
    err32 = max_rel_err(y32.numpy(), y64.numpy())
    if not err32 <= RTOL:
        raise AssertionError(f"{case['name']}: float32 vs float64 PyTorch error {err32:.3g} > "
                             f"{RTOL:g}: the golden would not be trustworthy")
    sd64 = state_dict_np(module)
    x64 = x32.double().numpy()
    yref = numpy_forward(spec, sd64, x64)
    err_np = max_rel_err(y64.numpy(), yref)
    if not err_np <= 1e-10:
        raise AssertionError(f"{case['name']}: PyTorch float64 and the NumPy reference of the "
                             f"contract differ by {err_np:.3g}")
    # The features a case is meant to exercise must move the output past 10x the tolerance.
    checks = {}
    if spec.arch == "mlp" and spec.activation == "ACTIVATION_GELU_TANH":
        checks["gelu_tanh"] = numpy_variant(spec, sd64, x64, activation="ACTIVATION_GELU")
    if spec.arch == "transformer":
        if spec.causal:
            checks["causal"] = numpy_variant(spec, sd64, x64, causal=False)
        if spec.activation == "ACTIVATION_GELU_TANH":
            checks["gelu_tanh"] = numpy_variant(spec, sd64, x64, activation="ACTIVATION_GELU")
        if spec.eps != 1e-5:
            checks["eps"] = numpy_variant(spec, sd64, x64, eps=1e-5)
    if spec.window_scaling:
        # Against the same weights without window scaling, and without each of its options.
        checks["window"] = numpy_variant(spec, sd64, x64, ws_kind="WINDOW_SCALING_NONE",
                                         ws_affine=False, ws_forecast_change=False)
        if spec.ws_affine:
            checks["affine"] = numpy_variant(spec, sd64, x64, ws_affine=False)
        if spec.ws_forecast_change:
            checks["change"] = numpy_variant(spec, sd64, x64, ws_forecast_change=False)
    if spec.Fk:
        # The future-known values (the record's middle part) move the forecast.
        x_alt = x64.copy()
        x_alt[:, spec.T * spec.F:spec.T * spec.F + spec.P * spec.Fk] += 1.0
        checks["future"] = numpy_forward(spec, sd64, x_alt)
    if spec.S:
        # Another series (its statistics and static values) moves the forecast.
        x_alt = x64.copy()
        x_alt[:, -1] = (x_alt[:, -1] + 1) % spec.S
        checks["series"] = numpy_forward(spec, sd64, x_alt)
    for what, alt in checks.items():
        d = max_rel_err(alt, yref)
        if not d > 10 * RTOL:
            raise AssertionError(f"{case['name']}: {what} changes the output by only {d:.3g}")

    d = os.path.join(out_root, case["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json.tmp"), "w", encoding="utf-8") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    os.replace(os.path.join(d, "config.json.tmp"), os.path.join(d, "config.json"))
    meta = {"format": "pt", "generator": "tests/golden/make_golden.py", "case": case["name"]}
    write_safetensors(os.path.join(d, "model.safetensors"),
                      [(k, v.detach().cpu().numpy()) for k, v in module.state_dict().items()],
                      meta)
    write_safetensors(os.path.join(d, "io.safetensors"),
                      [("input", x32.numpy()), ("output", y32.numpy())], meta)
    train, train_meta, train_summary = generate_training(case, spec, module, x32, sd64)
    write_safetensors(os.path.join(d, "train.safetensors"),
                      [(k, v.numpy()) for k, v in train], train_meta)

    # Round trip: the files just written must pass --verify, the training re-run from
    # train.safetensors' metadata reproducing it exactly.
    ok, msg = verify_dir(d, quiet=True, train_tol=0.0)
    if not ok:
        raise AssertionError(f"{case['name']}: written files fail --verify: {msg}")
    nparams = sum(v.numel() for v in module.state_dict().values())
    extra = "".join(f" {k}-shift={max_rel_err(v, yref):.1e}" for k, v in checks.items())
    print(f"{case['name']:<31} {spec.describe()} B={BATCH}  {nparams} floats  "
          f"fp32-vs-fp64={err32:.1e} numpy-vs-torch64={err_np:.0e}{extra}")
    print(train_summary)


# ----------------------------------------------------------------------------------------------
# Stateful training (TrainingConfig.stateful): truncated back-propagation through time over
# `batch` contiguous streams of one series, states carried (detached) between chunks.
# ----------------------------------------------------------------------------------------------

TBPTT_STEPS = 10


def _tbptt(name, seed, arch, layers, targets, chunk, train=None):
    case = _recurrent(name, seed, arch, 5, layers, False, targets, train=train)
    # 80 rows, the last 0.25 validate: 60 training rows, 3 streams of 20, of which the first
    # 16 steps have their 4 future rows; chunks of 5 give 5, 5, 5, 1 steps (4 optimiser steps an
    # epoch), so ten steps cross two epoch starts (states back to zero) and two short chunks.
    # Validation: 20 rows, 3 streams of 6, 2 scored steps each.
    case.update(rows=80, validation_fraction=0.25, batch=3, chunk=chunk)
    return case


TBPTT_CASES = [
    _tbptt("lstm_tbptt", 1501, "lstm", 2, ["price", "load"], 5),
    _tbptt("gru_tbptt", 1502, "gru", 2, ["load", "temperature"], 5,
           train=_train(optimizer="sgd", lr=0.05, momentum=0.9)),
]


def tbptt_series(module, seed, rows):
    """(rows, F) float32 raw series: mean + std * z per feature (the randomised normaliser's
    statistics), z an AR(1) process z_t = 0.8 z_{t-1} + 0.6 e_t, e ~ N(0, 1) drawn in float64
    from a generator seeded with seed + 7919."""
    g = torch.Generator().manual_seed(seed + 7919)
    e = torch.randn((rows, module.spec.F), dtype=torch.float64, generator=g).numpy()
    z = np.zeros_like(e)
    z[0] = e[0]
    for t in range(1, rows):
        z[t] = 0.8 * z[t - 1] + 0.6 * e[t]
    mean = module.normalizer.mean.double().numpy()
    std = module.normalizer.std.double().numpy()
    return (mean + std * z).astype(np.float32)


def tbptt_train_rows(rows, fraction):
    """WindowedDataset's split: floor(rows * (1 - fraction)) with 1e-6 rows of slack."""
    return int(math.floor(rows * (1.0 - fraction) + 1e-6))


def fit_normalizer(series, n_train):
    """Per-feature mean and population std (ddof 0) of the first n_train rows, in float64,
    rounded to float32 (a std below 1e-12 becomes 1), as forecastd's dataset fits them."""
    x = series[:n_train].astype(np.float64)
    mean = x.mean(axis=0)
    std = np.sqrt(((x - mean) ** 2).mean(axis=0))
    std = np.where(std < 1e-12, 1.0, std)
    return mean.astype(np.float32), std.astype(np.float32)


def tbptt_streams(xn, batch, P, target_index):
    """xn (N, F) standardised rows -> inp (B, S, F), tgt (B, S, P, K): `batch` contiguous
    streams of Ls = N // batch rows (the remainder dropped); step s of a stream reads row s and
    forecasts the targets of rows s+1 .. s+P, for s < S = Ls - P."""
    N, F = xn.shape
    Ls = N // batch
    xs = xn[:batch * Ls].reshape(batch, Ls, F)
    S = Ls - P
    if S < 1:
        raise ValueError(f"streams of {Ls} rows have no step with {P} rows after it")
    idx = torch.tensor(target_index, dtype=torch.long)
    tgt = torch.stack([xs[:, s + 1:s + 1 + P, :][:, :, idx] for s in range(S)], dim=1)
    return xs[:, :S, :], tgt


def tbptt_chunks(S, k):
    return [(a, min(a + k, S)) for a in range(0, S, k)]


def _detach(state):
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


def tbptt_chunk_loss(module, spec, st, inp, tgt, a, e, state):
    out, state_n = module.rnn(inp[:, a:e], state)  # out (B, e-a, H)
    pred = module.head(out).reshape(inp.shape[0], e - a, spec.P, spec.K)
    return training_loss(st, spec, pred, tgt[:, a:e]), state_n


def tbptt_evaluate(module, spec, st, inp, tgt, k):
    """The stateful loss over all steps from zero states: sum of chunk losses weighted by
    their steps, over the steps."""
    with torch.no_grad():
        state, total = None, 0.0
        S = inp.shape[1]
        for a, e in tbptt_chunks(S, k):
            loss, state = tbptt_chunk_loss(module, spec, st, inp, tgt, a, e, state)
            total += float(loss) * (e - a)
        return total / S


def tbptt_run(module, spec, st, inp, tgt, val, k, steps):
    """Stateful training: epochs over the chunks of the streams, states zero at each epoch's
    start and carried detached between chunks, one optimiser step per chunk, `steps` steps.
    losses[i]: the loss step i+1 computed (before its update)."""
    names = [n for n, _ in module.named_parameters()]
    params = [p for _, p in module.named_parameters()]
    opt = make_optimizer(params, st)
    module.train()
    val_before = tbptt_evaluate(module, spec, st, *val, k)
    losses, grads, step = [], None, 0
    chunks = tbptt_chunks(inp.shape[1], k)
    while step < steps:
        state = None  # each epoch starts from zero states
        for a, e in chunks:
            if step == steps:
                break
            opt.zero_grad(set_to_none=True)
            loss, state_n = tbptt_chunk_loss(module, spec, st, inp, tgt, a, e, state)
            losses.append(loss.detach().reshape(1).clone())
            loss.backward()
            if grads is None:
                grads = {n: p.grad.detach().clone() for n, p in zip(names, params)}
            if st["clip_grad_norm"] > 0.0:
                torch.nn.utils.clip_grad_norm_(params, st["clip_grad_norm"])
            opt.step()
            state = _detach(state_n)
            step += 1
    val_after = tbptt_evaluate(module, spec, st, *val, k)
    return dict(losses=torch.cat(losses), grads=grads,
                validation=torch.tensor([val_before, val_after], dtype=torch.float64),
                after={n: p.detach().clone() for n, p in zip(names, params)})


def tbptt_training(case, spec, state, xn, n_train, dtype):
    module = training_module(spec, state).to(dtype)
    xn = xn.to(dtype)
    B, P, k = case["batch"], spec.P, case["chunk"]
    inp, tgt = tbptt_streams(xn[:n_train], B, P, spec.target_index)
    n_val = xn.shape[0] - n_train
    B_val = min(B, n_val // (P + 1))
    val = tbptt_streams(xn[n_train:], B_val, P, spec.target_index)
    return tbptt_run(module, spec, train_settings(case["train"]), inp, tgt, val, k, TBPTT_STEPS)


def generate_tbptt_case(case, out_root):
    cfg = case_config(case)
    spec = Spec(cfg)
    if spec.arch == "transformer" or spec.bidirectional or spec.window_scaling:
        raise ValueError("stateful training needs a unidirectional LSTM or GRU without window "
                         "scaling")
    module = build_module(spec)
    randomize(module, case["seed"])
    series = tbptt_series(module, case["seed"], case["rows"])
    fraction = _f32(case["validation_fraction"])
    n_train = tbptt_train_rows(case["rows"], case["validation_fraction"])
    mean, std = fit_normalizer(series, n_train)
    with torch.no_grad():
        module.normalizer.mean.copy_(torch.from_numpy(mean))
        module.normalizer.std.copy_(torch.from_numpy(std))
    # Standardised as forecastd does: in float64 from the float32 statistics, rounded.
    xn64 = (series.astype(np.float64) - mean.astype(np.float64)) / std.astype(np.float64)
    xn = torch.from_numpy(xn64.astype(np.float32))
    state = module.state_dict()
    r32 = tbptt_training(case, spec, state, xn, n_train, torch.float32)
    r64 = tbptt_training(case, spec, state, torch.from_numpy(xn64), n_train, torch.float64)
    errs = {
        "losses": max_rel_err(r32["losses"].numpy(), r64["losses"].numpy()),
        "validation": max_rel_err(r32["validation"].numpy(), r64["validation"].numpy()),
        "grad": _max_err(r32["grads"], r64["grads"]),
        "after": _max_err(r32["after"], r64["after"]),
    }
    for what, err in errs.items():
        if not err <= TRAIN_RTOL / 4:
            raise AssertionError(f"{case['name']}: float32 vs float64 {what} differ by {err:.3g}")

    st = train_settings(case["train"])
    meta = {"format": "pt", "generator": "tests/golden/make_golden.py", "case": case["name"]}
    tmeta = dict(meta)
    tmeta.update(train_metadata(st, TBPTT_STEPS, []))
    tmeta.update(batch_size=str(case["batch"]), chunk_length=str(case["chunk"]),
                 validation_fraction=repr(fraction), train_rows=str(n_train))
    d = os.path.join(out_root, case["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json.tmp"), "w", encoding="utf-8") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    os.replace(os.path.join(d, "config.json.tmp"), os.path.join(d, "config.json"))
    write_safetensors(os.path.join(d, "model.safetensors"),
                      [(k, v.detach().cpu().numpy()) for k, v in state.items()], meta)
    names = list(r32["grads"])
    tensors = ([("series", series), ("loss", r32["losses"][:1].numpy())]
               + [(f"grad.{n}", r32["grads"][n].numpy()) for n in names]
               + [("losses", r32["losses"].numpy()),
                  ("validation_loss", r32["validation"].numpy().astype(np.float32))]
               + [(f"after.{n}", r32["after"][n].numpy()) for n in names])
    write_safetensors(os.path.join(d, "tbptt.safetensors"), tensors, tmeta)
    l = r32["losses"]
    print(f"{case['name']:<31} {spec.describe()} streams={case['batch']} chunk={case['chunk']} "
          f"rows={case['rows']} (train {n_train})")
    print(f"  tbptt {st['loss']:<8} {st['optimizer']:<13} loss {float(l[0]):.5f} -> "
          f"{float(l[-1]):.5f}  validation {float(r32['validation'][0]):.5f} -> "
          f"{float(r32['validation'][1]):.5f}  fp32-vs-fp64 "
          + " ".join(f"{k}={v:.0e}" for k, v in errs.items()))


# ----------------------------------------------------------------------------------------------
# Verification of a model directory (e.g. one forecastd wrote).
# ----------------------------------------------------------------------------------------------


def _find_config(d):
    for c in (os.path.join(d, "config.json"), os.path.join(os.path.dirname(os.path.abspath(d)),
                                                           "config.json")):
        if os.path.isfile(c):
            return c
    return None


def verify_dir(d, io_path=None, quiet=False, train_tol=TRAIN_RTOL):
    """Returns (ok, message). With d/train.safetensors, also verifies the training golden
    (verify_train, to train_tol)."""
    cfg_path = _find_config(d)
    if cfg_path is None:
        return False, f"no config.json in {d} or its parent"
    try:
        with open(cfg_path, encoding="utf-8") as f:
            spec = Spec(json.load(f))
    except (OSError, json.JSONDecodeError, ConfigError) as e:
        return False, f"{cfg_path}: {e}"
    try:
        weights, _ = read_safetensors(os.path.join(d, "model.safetensors"))
        io, _ = read_safetensors(io_path or os.path.join(d, "io.safetensors"))
    except SafetensorsError as e:
        return False, str(e)
    for name in ("input", "output"):
        if name not in io:
            return False, f"io file has no tensor {name!r} (has {sorted(io)})"
    x, want = io["input"], io["output"]
    if spec.records:
        if x.ndim != 2 or x.shape[1] != spec.R:
            return False, f"input shape {list(x.shape)} is not (B, record floats {spec.R})"
    elif x.ndim != 3 or x.shape[1:] != (spec.T, spec.F):
        return False, f"input shape {list(x.shape)} is not (B, T={spec.T}, F={spec.F})"
    if want.shape != spec.output_shape(x.shape[0]):
        q = f", Q={spec.Q}" if spec.Q else ""
        return False, (f"output shape {list(want.shape)} is not (B={x.shape[0]}, P={spec.P}, "
                       f"targets={spec.K}{q})")

    module = build_module(spec)
    expected = module.state_dict()
    problems = []
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if missing:
        problems.append(f"missing {missing}")
    if unexpected:
        problems.append(f"unexpected {unexpected}")
    for k, v in expected.items():
        if k in weights and tuple(weights[k].shape) != tuple(v.shape):
            problems.append(f"{k} has shape {list(weights[k].shape)}, expected {list(v.shape)}")
    if problems:
        return False, "model.safetensors does not match the config: " + "; ".join(problems)
    state = {k: torch.from_numpy(np.asarray(weights[k], dtype=np.float32)) for k in expected}
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        return False, f"load_state_dict(strict=True) failed: {e}"

    x32 = torch.from_numpy(np.asarray(x, dtype=np.float32))
    y32 = run_module(module, x32).numpy()
    y64 = run_module(copy.deepcopy(module).double(), x32.double()).numpy()
    err32 = max_rel_err(y32, want)
    err64 = max_rel_err(y64, want)
    summary = (f"{spec.name or d}: {spec.describe()} B={x.shape[0]}: PyTorch fp32 vs output "
               f"{err32:.2e}, PyTorch fp64 vs output {err64:.2e} (tolerance {RTOL:g})")
    if not err32 <= RTOL:
        diff = np.abs(y32.astype(np.float64) - want) / np.maximum(np.abs(want), 1.0)
        at = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(diff), diff, np.inf))),
                              diff.shape)
        q = f", quantile {spec.quantiles[at[3]]:g}" if spec.Q else ""
        return False, (f"MISMATCH {summary}; worst at [batch {at[0]}, step {at[1]}, target "
                       f"{spec.targets[at[2]]!r}{q}]: PyTorch {float(y32[at])!r}, file "
                       f"{float(want[at])!r}")
    train_path = os.path.join(d, "train.safetensors")
    if os.path.isfile(train_path):
        ok, msg = verify_train(train_path, spec, state, x32, train_tol)
        if not ok:
            return False, f"{train_path}: {msg}"
        summary += f"; {msg}"
    if not quiet:
        print(f"ok {summary}")
    return True, summary


def verify_train(path, spec, state, x32, tol):
    """Checks a train.safetensors against PyTorch: the tensor names and shapes, then re-runs
    the training its metadata describes from `state` (the initial weights) on x32 and its
    `target`, and compares loss, grad.*, losses and after.* to tol. Returns (ok, message)."""
    try:
        tr, meta = read_safetensors(path)
    except SafetensorsError as e:
        return False, str(e)
    try:
        st, steps, exclude = parse_train_metadata(meta)
    except ValueError as e:
        return False, f"metadata: {e}"
    module = training_module(spec, state)
    pnames = [n for n, _ in module.named_parameters()]
    shapes = {"target": (x32.shape[0], spec.P, spec.K), "loss": (1,), "losses": (steps + 1,)}
    for n, p in module.named_parameters():
        shapes[f"grad.{n}"] = shapes[f"after.{n}"] = tuple(p.shape)
    problems = [f"missing {[k for k in shapes if k not in tr]}"] if set(shapes) - set(tr) else []
    if set(tr) - set(shapes):
        problems.append(f"unexpected {[k for k in tr if k not in shapes]}")
    problems += [f"{k} has shape {list(tr[k].shape)}, expected {list(shp)}"
                 for k, shp in shapes.items() if k in tr and tuple(tr[k].shape) != shp]
    for n, b, e in exclude:
        if n not in pnames or not 0 <= b <= e <= int(np.prod(shapes[f"after.{n}"])):
            problems.append(f"after_exclude {n}[{b}:{e}] is not within a parameter")
    if problems:
        return False, "; ".join(problems)
    target = torch.from_numpy(np.asarray(tr["target"], dtype=np.float32))
    try:
        res = run_training(module, x32, target, st, spec, steps)
    except ValueError as e:
        return False, str(e)
    errs = [("loss", max_rel_err(res["losses"][:1].numpy(), tr["loss"])),
            ("losses", max_rel_err(res["losses"].numpy(), tr["losses"]))]
    errs += [(f"grad.{n}", max_rel_err(res["grads"][n].numpy(), tr[f"grad.{n}"]))
             for n in pnames]
    got = _masked({n: res["after"][n].numpy() for n in pnames}, exclude)
    want = _masked({n: tr[f"after.{n}"] for n in pnames}, exclude)
    errs += [(f"after.{n}", max_rel_err(got[n], want[n])) for n in pnames]
    worst, err = max(errs, key=lambda e: e[1])
    summary = (f"training ({st['loss']}, {st['optimizer']}, {steps} steps) vs PyTorch "
               f"{err:.2e} (tolerance {tol:g})")
    if not err <= tol:
        return False, f"MISMATCH {summary}, worst in {worst}"
    return True, summary


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", default=HERE, help="where to write the cases (default: %(default)s)")
    ap.add_argument("--case", nargs="+", metavar="NAME", help="only these cases")
    ap.add_argument("--verify", nargs="+", metavar="DIR",
                    help="verify model directories against PyTorch instead of generating")
    ap.add_argument("--io", metavar="FILE", help="with one --verify DIR: the io.safetensors to use")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    if args.verify:
        if args.io and len(args.verify) != 1:
            ap.error("--io needs exactly one --verify DIR")
        failed = 0
        for d in args.verify:
            ok, msg = verify_dir(d, io_path=args.io)
            if not ok:
                print(f"FAIL {d}: {msg}", file=sys.stderr)
                failed += 1
        if failed:
            print(f"{failed} of {len(args.verify)} model directories do not match PyTorch",
                  file=sys.stderr)
            return 1
        return 0

    names = [c["name"] for c in CASES + TBPTT_CASES]
    if args.case:
        unknown = [n for n in args.case if n not in names]
        if unknown:
            ap.error(f"unknown cases {unknown}; known: {names}")
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    for case in CASES:
        if args.case and case["name"] not in args.case:
            continue
        generate_case(case, args.out)
    for case in TBPTT_CASES:
        if args.case and case["name"] not in args.case:
            continue
        generate_tbptt_case(case, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
