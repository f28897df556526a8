#!/usr/bin/env python3
"""PyTorch golden files for forecastd's numerical parity tests.

forecastd's C++ forecasters (LSTM, GRU, transformer) must reproduce PyTorch to 1e-5 relative
error in float32. This script takes the PyTorch reference modules of scripts/forecastd_torch.py,
whose state_dict() names are exactly the weight names of proto/forecastd/v1/model_config.proto,
fills them with seeded random weights, runs them, and writes one directory per case:

    <out>/<case>/config.json        ModelConfig in protobuf's JSON mapping
    <out>/<case>/model.safetensors  float32 weights (plus normalizer.mean / normalizer.std)
    <out>/<case>/io.safetensors     `input` (B, T, F) raw and `output` (B, P, targets) from PyTorch

Usage:
    make_golden.py                    regenerate every case under tests/golden/ (deterministic)
    make_golden.py --out DIR          write the cases under DIR instead
    make_golden.py --case NAME ...    only these cases
    make_golden.py --verify DIR ...   load DIR/config.json (or DIR/../config.json, the
                                      models/<name>/<version>/ layout) and DIR/model.safetensors,
                                      build the PyTorch module, load_state_dict(strict=True), run
                                      it on DIR/io.safetensors' `input` (or --io FILE) and compare
                                      with its `output`; exits 1 on any mismatch.

Error metric, everywhere: max over elements of |got - want| / max(|want|, 1), which must be
<= 1e-5 (relative for |want| >= 1, absolute below, so outputs near zero do not blow it up).

Runs with Debian's python3-torch 1.13 and with PyPI's torch 2.x. No safetensors package needed:
scripts/forecastd_torch.py reads and writes the format itself.
"""

import argparse
import copy
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "scripts")))
from forecastd_torch import (  # noqa: E402  (needs the sys.path entry above)
    ConfigError, SafetensorsError, Spec, build_module, make_input, max_rel_err, randomize,
    read_safetensors, run_module, sinusoid_table, state_dict_np, write_safetensors)

RTOL = 1e-5

# ----------------------------------------------------------------------------------------------
# The cases. Shared dims: F=3 features, T=7, P=4, 2 targets, B=3.
# ----------------------------------------------------------------------------------------------

FEATURES = ["load", "temperature", "price"]
LOOKBACK = 7
HORIZON = 4
BATCH = 3


def _recurrent(name, seed, arch, hidden, layers, bidirectional, targets, dropout=0.0):
    return dict(name=name, seed=seed, arch=arch, hidden=hidden, layers=layers,
                bidirectional=bidirectional, targets=targets, dropout=dropout)


def _transformer(name, seed, norm_first, activation, causal, targets, eps=None, gains=None):
    return dict(name=name, seed=seed, arch="transformer", d_model=8, heads=2, layers=2, d_ff=16,
                norm_first=norm_first, activation=activation, causal=causal, targets=targets,
                dropout=0.1, eps=eps, gains=gains or {})


# Targets are deliberately not always in feature order, so the de-normalisation must look
# each target's feature index up by name.
CASES = [
    _recurrent("lstm_uni_l1", 1101, "lstm", 5, 1, False, ["load", "price"]),
    _recurrent("lstm_uni_l2", 1102, "lstm", 5, 2, False, ["price", "load"], dropout=0.1),
    _recurrent("lstm_bi_l1", 1103, "lstm", 5, 1, True, ["temperature", "load"]),
    _recurrent("lstm_bi_l2", 1104, "lstm", 5, 2, True, ["price", "temperature"], dropout=0.1),
    _recurrent("gru_uni_l1", 1201, "gru", 5, 1, False, ["price", "load"]),
    _recurrent("gru_bi_l2", 1202, "gru", 5, 2, True, ["load", "price"], dropout=0.1),
    _transformer("transformer_postln_gelu", 1301, False, "ACTIVATION_GELU", False,
                 ["price", "load"]),
    # layerNormEps 1e-3 (not the 1e-5 default) here: far enough from the default that a C++
    # side ignoring the field fails this case.
    _transformer("transformer_preln_relu", 1302, True, "ACTIVATION_RELU", False,
                 ["load", "price"], eps=1e-3),
    _transformer("transformer_postln_relu_causal", 1303, False, "ACTIVATION_RELU", True,
                 ["temperature", "price"]),
    # The tanh and erf forms of GELU differ by < 5e-4 at most, so this case scales the
    # feed-forward weights up (linear1 x2, linear2 x3) and uses a seed where swapping the form
    # moves the output by ~50x the tolerance.
    _transformer("transformer_preln_gelu_tanh", 1308, True, "ACTIVATION_GELU_TANH", False,
                 ["price", "load"], gains={"linear1.weight": 2.0, "linear2.weight": 3.0}),
]


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
    if case["arch"] in ("lstm", "gru"):
        cfg[case["arch"]] = {
            "hiddenSize": case["hidden"],
            "numLayers": case["layers"],
            "bidirectional": case["bidirectional"],
            "dropout": case["dropout"],
        }
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


def numpy_forward(spec, sd, x):
    """sd: name -> float64 ndarray; x: (B, T, F) float64."""
    B, T, _ = x.shape
    xn = (x - sd["normalizer.mean"]) / sd["normalizer.std"] if spec.standardized else x
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
    y = (last @ sd["head.weight"].T + sd["head.bias"]).reshape(B, spec.P, spec.K)
    if spec.standardized:
        idx = spec.target_index
        y = y * sd["normalizer.std"][idx] + sd["normalizer.mean"][idx]
    return y


# ----------------------------------------------------------------------------------------------
# Generation.
# ----------------------------------------------------------------------------------------------


def numpy_variant(spec, sd, x, **changes):
    v = copy.copy(spec)
    for k, val in changes.items():
        setattr(v, k, val)
    return numpy_forward(v, sd, x)


def generate_case(case, out_root):
    cfg = case_config(case)
    spec = Spec(cfg)
    module = build_module(spec)
    randomize(module, case["seed"], case.get("gains"))
    x32 = make_input(spec, module, case["seed"], BATCH)

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
    if spec.arch == "transformer":
        if spec.causal:
            checks["causal"] = numpy_variant(spec, sd64, x64, causal=False)
        if spec.activation == "ACTIVATION_GELU_TANH":
            checks["gelu_tanh"] = numpy_variant(spec, sd64, x64, activation="ACTIVATION_GELU")
        if spec.eps != 1e-5:
            checks["eps"] = numpy_variant(spec, sd64, x64, eps=1e-5)
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

    # Round trip: the files just written must pass --verify.
    ok, msg = verify_dir(d, quiet=True)
    if not ok:
        raise AssertionError(f"{case['name']}: written files fail --verify: {msg}")
    nparams = sum(v.numel() for v in module.state_dict().values())
    extra = "".join(f" {k}-shift={max_rel_err(v, yref):.1e}" for k, v in checks.items())
    print(f"{case['name']:<31} {spec.describe()} B={BATCH}  {nparams} floats  "
          f"fp32-vs-fp64={err32:.1e} numpy-vs-torch64={err_np:.0e}{extra}")


# ----------------------------------------------------------------------------------------------
# Verification of a model directory (e.g. one forecastd wrote).
# ----------------------------------------------------------------------------------------------


def _find_config(d):
    for c in (os.path.join(d, "config.json"), os.path.join(os.path.dirname(os.path.abspath(d)),
                                                           "config.json")):
        if os.path.isfile(c):
            return c
    return None


def verify_dir(d, io_path=None, quiet=False):
    """Returns (ok, message)."""
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
    if x.ndim != 3 or x.shape[1:] != (spec.T, spec.F):
        return False, f"input shape {list(x.shape)} is not (B, T={spec.T}, F={spec.F})"
    if want.shape != (x.shape[0], spec.P, spec.K):
        return False, (f"output shape {list(want.shape)} is not (B={x.shape[0]}, P={spec.P}, "
                       f"targets={spec.K})")

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
        b, p, k = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(diff), diff, np.inf))),
                                   diff.shape)
        return False, (f"MISMATCH {summary}; worst at [batch {b}, step {p}, target "
                       f"{spec.targets[k]!r}]: PyTorch {float(y32[b, p, k])!r}, file "
                       f"{float(want[b, p, k])!r}")
    if not quiet:
        print(f"ok {summary}")
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

    names = [c["name"] for c in CASES]
    if args.case:
        unknown = [n for n in args.case if n not in names]
        if unknown:
            ap.error(f"unknown cases {unknown}; known: {names}")
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    for case in CASES:
        if args.case and case["name"] not in args.case:
            continue
        generate_case(case, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
