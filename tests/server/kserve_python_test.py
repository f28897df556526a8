#!/usr/bin/env python3
"""A Python gRPC client (grpcio, stubs generated here with protoc) against the real forecastd.

Starts the forecastd binary on free loopback ports over a model repository, waits until it is
ready, then sends the same windows through KServe v2's ModelInfer and through forecastd's own
Predict, and checks that both return the same forecasts, the shape and the metadata. Exits 0
when every check holds, 1 otherwise (printing what differed).

Usage: kserve_python_test.py --binary BUILD/server/forecastd --proto-dir proto
                             --repository models --model demo_lstm --csv models/sample_input.csv
"""

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_stubs(proto_dir, out_dir):
    protos = ["forecastd/v1/model_config.proto", "forecastd/v1/training.proto",
              "forecastd/v1/forecaster.proto", "inference/model_config.proto",
              "inference/grpc_service.proto"]
    plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
    cmd = ["protoc", f"--proto_path={proto_dir}", f"--python_out={out_dir}",
           f"--grpc_out={out_dir}", f"--plugin=protoc-gen-grpc={plugin}"] + protos
    subprocess.run(cmd, check=True)
    for package in ("forecastd", "forecastd/v1", "inference"):
        open(os.path.join(out_dir, package, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)


def read_windows(csv_path, features, T):
    with open(csv_path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        rows = [[float(x) for x in line.strip().split(",")] for line in f if line.strip()]
    idx = [header.index(name) for name in features]
    rows = rows[-T:]
    return [[row[i] for i in idx] for row in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--model", default="demo_lstm")
    ap.add_argument("--csv", required=True)
    args = ap.parse_args()

    import grpc  # noqa: E402  (Debian's python3-grpcio)

    work = tempfile.mkdtemp(prefix="forecastd_kserve_py_")
    daemon = None
    failures = []
    try:
        generate_stubs(args.proto_dir, work)
        from forecastd.v1 import forecaster_pb2, forecaster_pb2_grpc
        from inference import grpc_service_pb2, grpc_service_pb2_grpc

        grpc_port, metrics_port = free_port(), free_port()
        log = open(os.path.join(work, "forecastd.log"), "w")
        daemon = subprocess.Popen(
            [args.binary, "--grpc-address", f"127.0.0.1:{grpc_port}", "--metrics-address",
             f"127.0.0.1:{metrics_port}", "--model-repository", args.repository,
             "--load-model", args.model, "--devices", "cpu"], stdout=log, stderr=subprocess.STDOUT)
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        kserve = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        forecaster = forecaster_pb2_grpc.ForecasterStub(channel)

        give_up = time.time() + 60
        while True:
            try:
                if kserve.ServerReady(grpc_service_pb2.ServerReadyRequest(), timeout=2).ready:
                    break
            except grpc.RpcError:
                pass
            if daemon.poll() is not None or time.time() > give_up:
                raise RuntimeError("forecastd did not become ready:\n" +
                                   open(os.path.join(work, "forecastd.log")).read())
            time.sleep(0.2)

        meta = kserve.ModelMetadata(grpc_service_pb2.ModelMetadataRequest(name=args.model))
        shape = list(meta.inputs[0].shape)
        T, F = shape[1], shape[2]
        config = kserve.ModelConfig(grpc_service_pb2.ModelConfigRequest(name=args.model)).config
        features = None
        import json
        with open(os.path.join(args.repository, args.model, "config.json"), encoding="utf-8") as f:
            features = json.load(f)["featureNames"]
        window = read_windows(args.csv, features, T)
        flat = [v for row in window for v in row]
        raw = struct.pack(f"<{len(flat)}f", *flat)

        infer = grpc_service_pb2.ModelInferRequest(model_name=args.model, id="py-1")
        tensor = infer.inputs.add()
        tensor.name = meta.inputs[0].name
        tensor.datatype = "FP32"
        tensor.shape.extend([1, T, F])
        infer.raw_input_contents.append(raw)
        kserve_reply = kserve.ModelInfer(infer, timeout=30)
        out = kserve_reply.outputs[0]
        n = 1
        for d in out.shape:
            n *= d
        kserve_values = struct.unpack(f"<{n}f", kserve_reply.raw_output_contents[0])

        predict = forecaster_pb2.PredictRequest(model=args.model)
        predict.inputs.shape.extend([1, T, F])
        predict.inputs.raw = raw
        predict_reply = forecaster.Predict(predict, timeout=30)
        p = predict_reply.forecasts
        predict_values = struct.unpack(f"<{len(p.raw) // 4}f", p.raw)

        if list(out.shape) != list(p.shape):
            failures.append(f"shapes differ: ModelInfer {list(out.shape)}, Predict {list(p.shape)}")
        if kserve_reply.id != "py-1":
            failures.append(f"ModelInfer echoed id {kserve_reply.id!r}, not 'py-1'")
        if config.max_batch_size <= 0:
            failures.append(f"ModelConfig max_batch_size {config.max_batch_size}")
        worst = max((abs(a - b) / max(abs(b), 1.0) for a, b in zip(kserve_values, predict_values)),
                    default=float("inf"))
        if len(kserve_values) != len(predict_values) or worst > 1e-6:
            failures.append(f"forecasts differ: max relative error {worst}")
        if not all(v == v and abs(v) < 1e30 for v in kserve_values):
            failures.append("non-finite forecasts")
        print(f"ModelInfer and Predict on {args.model}: shape {list(out.shape)}, "
              f"max relative difference {worst:.3g}, first values {kserve_values[:3]}")

        # A bad request gets the code and message Predict would give.
        bad = grpc_service_pb2.ModelInferRequest(model_name=args.model)
        t = bad.inputs.add()
        t.name = meta.inputs[0].name
        t.datatype = "FP32"
        t.shape.extend([1, T + 1, F])
        bad.raw_input_contents.append(struct.pack(f"<{(T + 1) * F}f", *([0.0] * ((T + 1) * F))))
        try:
            kserve.ModelInfer(bad, timeout=30)
            failures.append("a window of the wrong lookback was accepted")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                failures.append(f"wrong lookback gave {e.code()}, not INVALID_ARGUMENT")
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(timeout=60)
                if code != 0:
                    failures.append(f"forecastd exited {code} on SIGTERM")
            except subprocess.TimeoutExpired:
                daemon.kill()
                failures.append("forecastd did not exit on SIGTERM")
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
