#!/usr/bin/env python3
"""A Python gRPC client (grpcio, stubs generated here with protoc) against the real forecastd.

Starts the forecastd binary on free loopback ports over a model repository, waits until it is
ready, then sends the same windows through KServe v2's ModelInfer and through forecastd's own
Predict, and checks that both return the same forecasts, the shape and the metadata; then sends
several windows (and a bad one) on one ModelStreamInfer stream and checks each answer against
ModelInfer's. Where tritonclient is importable (it is not a Debian package: put it on
PYTHONPATH), its start_stream / async_stream_infer are checked against its infer too; otherwise
that part says it was skipped. Exits 0 when every check holds, 1 otherwise (printing what
differed).

Usage: kserve_python_test.py --binary BUILD/server/forecastd --proto-dir proto
                             --repository models --model demo_lstm --csv models/sample_input.csv
"""

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import forecastd_process as fp


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


def infer_request(grpc_service_pb2, model, input_name, window, T, F, request_id):
    flat = [v for row in window for v in row]
    request = grpc_service_pb2.ModelInferRequest(model_name=model, id=request_id)
    tensor = request.inputs.add()
    tensor.name = input_name
    tensor.datatype = "FP32"
    tensor.shape.extend([1, T, F])
    request.raw_input_contents.append(struct.pack(f"<{len(flat)}f", *flat))
    return request


def check_stream(kserve, grpc_service_pb2, model, input_name, window, T, F, failures):
    """Several requests and a bad one on one ModelStreamInfer stream, against ModelInfer."""
    requests = [infer_request(grpc_service_pb2, model, input_name,
                              [[v * (1.0 + 0.05 * k) for v in row] for row in window], T, F,
                              f"py-stream-{k}") for k in range(4)]
    bad = infer_request(grpc_service_pb2, model, input_name, window[:-1], T - 1, F, "py-bad")
    sent = requests[:2] + [bad] + requests[2:]
    answers = {}
    for reply in kserve.ModelStreamInfer(iter(sent), timeout=30):
        answers[reply.infer_response.id] = reply
    if sorted(answers) != sorted(r.id for r in sent):
        failures.append(f"stream answered ids {sorted(answers)}, sent {[r.id for r in sent]}")
        return
    if not answers["py-bad"].error_message:
        failures.append("a window of the wrong lookback on the stream got no error_message")
    worst = 0.0
    for request in requests:
        streamed = answers[request.id]
        unary = kserve.ModelInfer(request, timeout=30)
        if streamed.error_message:
            failures.append(f"stream request {request.id}: {streamed.error_message}")
            continue
        if list(streamed.infer_response.outputs[0].shape) != list(unary.outputs[0].shape):
            failures.append(f"stream request {request.id}: shape differs from ModelInfer's")
            continue
        # Requests in flight together may run in one batch, whose float rounding may differ
        # from a batch of one in the last bits.
        raw_s, raw_u = streamed.infer_response.raw_output_contents[0], unary.raw_output_contents[0]
        a = struct.unpack(f"<{len(raw_s) // 4}f", raw_s)
        b = struct.unpack(f"<{len(raw_u) // 4}f", raw_u)
        diff = max((abs(x - y) / max(abs(y), 1.0) for x, y in zip(a, b)), default=float("inf"))
        worst = max(worst, diff)
        if len(a) != len(b) or diff > 1e-5:
            failures.append(f"stream request {request.id} differs from ModelInfer by {diff}")
    print(f"ModelStreamInfer: {len(requests)} answers equal ModelInfer's (max relative difference "
          f"{worst:.3g}); the bad request got {answers['py-bad'].error_message!r}")


def check_tritonclient_stream(url, model, input_name, window, failures):
    """tritonclient.grpc's start_stream / async_stream_infer against its infer, in a process
    of its own: tritonclient's messages have the same names as the stubs generated here, and
    one protobuf pool cannot hold both."""
    import json
    code = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--tritonclient-url", url, "--model", model,
         "--input-name", input_name, "--window-json", json.dumps(window)]).returncode
    if code != 0:
        failures.append(f"the tritonclient stream check failed (exit {code})")


def tritonclient_stream_main(url, model, input_name, window):
    try:
        import numpy as np
        import tritonclient.grpc as triton
    except (ImportError, RuntimeError) as e:
        print(f"tritonclient stream check skipped: tritonclient.grpc is not importable ({e})")
        return 0
    failures = []
    import queue
    client = triton.InferenceServerClient(url=url)
    windows = [np.array([window], dtype=np.float32) * (1.0 + 0.1 * k) for k in range(3)]

    def inputs(x):
        tensor = triton.InferInput(input_name, list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return [tensor]

    expected = {f"tc-{k}": client.infer(model, inputs(x)).as_numpy("FORECAST")
                for k, x in enumerate(windows)}
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for k, x in enumerate(windows):
            client.async_stream_infer(model, inputs(x), request_id=f"tc-{k}")
        client.async_stream_infer(model, inputs(windows[0]), request_id="tc-seq", sequence_id=5,
                                  sequence_start=True)
        got, errors = {}, []
        for _ in range(len(windows) + 1):
            result, error = results.get(timeout=30)
            if error is not None:
                errors.append(str(error))
            else:
                got[result.get_response().id] = result.as_numpy("FORECAST")
    finally:
        client.stop_stream()
    if sorted(got) != sorted(expected):
        failures.append(f"tritonclient stream answered {sorted(got)}, expected {sorted(expected)}")
    # As in check_stream: a batch of several may round differently from a batch of one.
    for request_id, values in expected.items():
        if request_id in got and not np.allclose(got[request_id], values, rtol=1e-5, atol=1e-5):
            failures.append(f"tritonclient stream {request_id} differs from infer")
    if len(errors) != 1 or "not a sequence model" not in errors[0]:
        failures.append(f"tritonclient stream errors {errors}, expected one sequence refusal")
    print(f"tritonclient async_stream_infer: {len(got)} results equal infer's; "
          f"sequence_id refused: {errors}")
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary")
    ap.add_argument("--proto-dir")
    ap.add_argument("--repository")
    ap.add_argument("--model", default="demo_lstm")
    ap.add_argument("--csv")
    # The tritonclient check's own process (check_tritonclient_stream).
    ap.add_argument("--tritonclient-url")
    ap.add_argument("--input-name")
    ap.add_argument("--window-json")
    args = ap.parse_args()
    if args.tritonclient_url:
        import json
        return tritonclient_stream_main(args.tritonclient_url, args.model, args.input_name,
                                        json.loads(args.window_json))
    for required in ("binary", "proto_dir", "repository", "csv"):
        if getattr(args, required) is None:
            ap.error(f"--{required.replace('_', '-')} is required")

    import grpc  # noqa: E402  (Debian's python3-grpcio)

    work = tempfile.mkdtemp(prefix="forecastd_kserve_py_")
    daemon = None
    failures = []
    try:
        generate_stubs(args.proto_dir, work)
        from forecastd.v1 import forecaster_pb2, forecaster_pb2_grpc
        from inference import grpc_service_pb2, grpc_service_pb2_grpc

        grpc_port, metrics_port = fp.free_port(), fp.free_port()
        log_path = os.path.join(work, "forecastd.log")
        daemon = fp.start(
            args.binary,
            ["--grpc-address", f"127.0.0.1:{grpc_port}", "--metrics-address",
             f"127.0.0.1:{metrics_port}", "--http-address", "", "--model-repository",
             args.repository, "--load-model", args.model, "--devices", "cpu"],
            log_path)
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        kserve = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        forecaster = forecaster_pb2_grpc.ForecasterStub(channel)

        fp.wait_until(
            daemon,
            lambda: kserve.ServerReady(grpc_service_pb2.ServerReadyRequest(), timeout=2).ready,
            log_path, "become ready")

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

        check_stream(kserve, grpc_service_pb2, args.model, meta.inputs[0].name, window, T, F,
                     failures)
        check_tritonclient_stream(f"127.0.0.1:{grpc_port}", args.model, meta.inputs[0].name,
                                  window, failures)
    finally:
        fp.stop(daemon, failures)
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
