#!/usr/bin/env python3
"""tritonclient (from PyPI, in the tests' venv) against the real forecastd serving a model with a
future-known covariate, a calendar feature and two series.

Writes a small repository (a GRU over price, volume and the future-known "event", with the
calendar feature hour of day and the series AAPL and MSFT; weights drawn from a fixed seed,
written as safetensors here), starts the forecastd binary on it, and drives it through
tritonclient.http as a Triton user would: the model metadata and config name the inputs INPUT,
FUTURE, TIMESTAMPS and SERIES; inference with every tensor as JSON, every tensor binary, and some
of each must agree exactly; one series name for every window equals that name repeated; a
missing input and an unknown series are refused naming them. Where tritonclient.grpc is
importable (its generated code needs a newer protobuf than some systems have), its infer must
agree too; otherwise that part says it was skipped. Exits 0 when every check holds, 1 otherwise
(printing what differed).

Usage: kserve_covariates_python_test.py --binary BUILD/server/forecastd
"""

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile

import forecastd_process as fp

T, P, H = 8, 3, 4
FEATURES = ["price", "volume", "event"]
SERIES = ["AAPL", "MSFT"]
F = len(FEATURES) + 2  # and hour_of_day_sin, hour_of_day_cos
START = 1772409600 + 7 * 3600  # 2026-03-02 07:00 UTC


def write_safetensors(path, tensors):
    """tensors: [(name, shape, flat float list)], in the model's parameter order."""
    header, offset, data = {"__metadata__": {"format": "pt"}}, 0, b""
    for name, shape, values in tensors:
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def write_repository(root, np):
    model_dir = os.path.join(root, "cov")
    os.makedirs(os.path.join(model_dir, "1"))
    config = {
        "name": "cov", "lookback": T, "horizon": P, "featureNames": FEATURES,
        "targetNames": ["price"], "gru": {"hiddenSize": H, "numLayers": 1},
        "normalization": "NORMALIZATION_STANDARD",
        "covariates": {"future": ["event"], "calendar": ["CALENDAR_HOUR_OF_DAY"]},
        "series": SERIES, "streaming": {"mode": "STREAM_MODE_WINDOW"},
        "batching": {"maxBatchSize": 8},
    }
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    rng = np.random.default_rng(7)
    mean = [[10.0 + 3 * s, 100.0, 0.5, 0.0, 0.0] for s in range(len(SERIES))]
    std = [[2.0, 25.0, 0.5, 0.7, 0.7] for _ in SERIES]
    inputs = F + 1  # the body reads the F features and the forecast-step flag
    tensors = [("normalizer.mean", [len(SERIES), F], sum(mean, [])),
               ("normalizer.std", [len(SERIES), F], sum(std, []))]
    for name, shape in [("rnn.weight_ih_l0", [3 * H, inputs]), ("rnn.weight_hh_l0", [3 * H, H]),
                        ("rnn.bias_ih_l0", [3 * H]), ("rnn.bias_hh_l0", [3 * H]),
                        ("head.weight", [P, H]), ("head.bias", [P])]:
        n = int(np.prod(shape))
        tensors.append((name, shape, [float(x) for x in rng.uniform(-0.8, 0.8, n)]))
    write_safetensors(os.path.join(model_dir, "1", "model.safetensors"), tensors)


def requests_data(np, B):
    rng = np.random.default_rng(11)
    windows = np.stack([rng.normal(10, 2, (B, T)), rng.normal(100, 25, (B, T)),
                        (rng.random((B, T)) < 0.3).astype(np.float64)], axis=-1).astype(np.float32)
    future = (rng.random((B, P, 1)) < 0.3).astype(np.float32)
    times = np.array([[START + (5 * b + t) * 3600 for t in range(T + P)] for b in range(B)],
                     dtype=np.int64)
    series = np.array([[SERIES[b % 2]] for b in range(B)], dtype=np.object_)
    return windows, future, times, series


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()

    try:
        import numpy as np
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException
    except ImportError as e:
        print(f"FAILED: tritonclient.http is not importable with {sys.executable} ({e}); "
              "scripts/install-deps.sh installs it into .venv-test", file=sys.stderr)
        return 1

    work = tempfile.mkdtemp(prefix="forecastd_covariates_py_")
    daemon = None
    failures = []

    def check(condition, message):
        if not condition:
            failures.append(message)

    try:
        repository = os.path.join(work, "models")
        write_repository(repository, np)
        grpc_port, metrics_port, http_port = fp.free_port(), fp.free_port(), fp.free_port()
        log_path = os.path.join(work, "forecastd.log")
        daemon = fp.start(
            args.binary,
            ["--grpc-address", f"127.0.0.1:{grpc_port}", "--metrics-address",
             f"127.0.0.1:{metrics_port}", "--http-address", f"127.0.0.1:{http_port}",
             "--model-repository", repository, "--devices", "cpu", "--cpu-workers", "2"],
            log_path)
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{http_port}")
        fp.wait_until(daemon, lambda: client.is_server_ready() and client.is_model_ready("cov"),
                      log_path, "serve the model")

        meta = client.get_model_metadata("cov")
        described = [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]]
        check(described == [("INPUT", "FP32", [-1, T, 3]), ("FUTURE", "FP32", [-1, P, 1]),
                            ("TIMESTAMPS", "INT64", [-1, T + P]), ("SERIES", "BYTES", [-1, 1])],
              f"model metadata inputs {described}")
        config = client.get_model_config("cov")
        check([i["name"] for i in config["input"]] == ["INPUT", "FUTURE", "TIMESTAMPS", "SERIES"],
              f"model config inputs {config['input']}")
        check(config["input"][3]["data_type"] == "TYPE_STRING", f"SERIES in {config['input']}")

        B = 3
        windows, future, times, series = requests_data(np, B)

        def tensors(binary, drop=(), series_value=None):
            """binary: a bool for every tensor, or a list of four."""
            flags = binary if isinstance(binary, list) else [binary] * 4
            values = [("INPUT", windows, "FP32"), ("FUTURE", future, "FP32"),
                      ("TIMESTAMPS", times, "INT64"),
                      ("SERIES", series if series_value is None else series_value, "BYTES")]
            out = []
            for (name, value, datatype), flag in zip(values, flags):
                if name in drop:
                    continue
                tensor = httpclient.InferInput(name, list(value.shape), datatype)
                tensor.set_data_from_numpy(value, binary_data=flag)
                out.append(tensor)
            return out

        def infer(inputs):
            return client.infer("cov", inputs).as_numpy("FORECAST")

        as_json = infer(tensors(False))
        as_binary = infer(tensors(True))
        mixed = infer(tensors([True, False, True, False]))
        check(list(as_json.shape) == [B, P, 1], f"forecast shape {list(as_json.shape)}")
        check(np.all(np.isfinite(as_json)), "non-finite forecasts")
        check(np.array_equal(as_json, as_binary), "JSON and binary forecasts differ")
        check(np.array_equal(as_json, mixed), "a request of JSON and binary tensors differs")
        one = infer(tensors(True, series_value=np.array([["MSFT"]], dtype=np.object_)))
        all_msft = infer(tensors(True, series_value=np.array([["MSFT"]] * B, dtype=np.object_)))
        check(np.array_equal(one, all_msft), "one series name differs from it repeated")
        check(not np.array_equal(one, as_json), "the series does not change the forecast")
        print(f"tritonclient.http infer on cov: JSON, binary and mixed tensors equal, first "
              f"values {as_json.flatten()[:3]}")

        def refused(call, status, part):
            try:
                call()
            except InferenceServerException as e:
                check(e.status() == status and part in e.message(),
                      f"refusal {e.status()} {e.message()!r}, expected {status} with {part!r}")
                return
            failures.append(f"no refusal, expected {status} with {part!r}")

        refused(lambda: infer(tensors(True, drop=("FUTURE",))), "400", "input 'FUTURE'")
        refused(lambda: infer(tensors(False, drop=("TIMESTAMPS",))), "400", "input 'TIMESTAMPS'")
        refused(lambda: infer(tensors(True, drop=("SERIES",))), "400", "input 'SERIES'")
        refused(lambda: infer(tensors(True, series_value=np.array([["GOOG"]] * B,
                                                                 dtype=np.object_))),
                "404", "knows no series 'GOOG'")
        client.close()

        try:
            import tritonclient.grpc as grpcclient
        except ImportError as e:
            print(f"tritonclient.grpc: skipped, not importable here ({e})")
        else:
            grpc = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port}")
            inputs = []
            for name, value, datatype in [("INPUT", windows, "FP32"), ("FUTURE", future, "FP32"),
                                          ("TIMESTAMPS", times, "INT64"),
                                          ("SERIES", series, "BYTES")]:
                tensor = grpcclient.InferInput(name, list(value.shape), datatype)
                tensor.set_data_from_numpy(value)
                inputs.append(tensor)
            over_grpc = grpc.infer("cov", inputs).as_numpy("FORECAST")
            check(np.array_equal(over_grpc, as_json), "tritonclient.grpc's forecast differs")
            print("tritonclient.grpc infer on cov: equal to tritonclient.http's")
            grpc.close()
    finally:
        fp.stop(daemon, failures)
        if failures and os.path.exists(os.path.join(work, "forecastd.log")):
            print(open(os.path.join(work, "forecastd.log")).read()[-4000:], file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
