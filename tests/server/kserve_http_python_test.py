#!/usr/bin/env python3
"""tritonclient.http (from PyPI, in the tests' venv) against the real forecastd's KServe REST port.

Starts the forecastd binary on free loopback ports over a model repository, waits until the
REST port says ready, then drives it only through tritonclient.http as a Triton user would:
health, server and model metadata, model config, the repository index, inference with JSON and
with binary tensors (which must agree exactly, and match the shape the metadata gives), async
inference, statistics counting those requests, unload / load, and the errors a client sees for
an unknown model, a bad window and an unsupported call, and system shared memory (register,
status, inference with input and output in regions, unregister). Exits 0 when every check holds, 1
otherwise (printing what differed).

Usage: kserve_http_python_test.py --binary BUILD/server/forecastd --repository models
                                  --model demo_lstm --csv models/sample_input.csv
"""

import argparse
import base64
import json
import os
import shutil
import sys
import tempfile

import forecastd_process as fp


def read_windows(csv_path, features, T, count):
    """`count` windows: the file's last T rows, then copies scaled by 1.05, 1.1, ..."""
    with open(csv_path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        rows = [[float(x) for x in line.strip().split(",")] for line in f if line.strip()]
    idx = [header.index(name) for name in features]
    window = [[row[i] for i in idx] for row in rows[-T:]]
    return [[[v * (1.0 + 0.05 * k) for v in row] for row in window] for k in range(count)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--model", default="demo_lstm")
    ap.add_argument("--csv", required=True)
    args = ap.parse_args()

    try:
        import numpy as np
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException
    except ImportError as e:
        print(f"FAILED: tritonclient.http is not importable with {sys.executable} ({e}); "
              "scripts/install-deps.sh installs it into .venv-test, which the tests use once the "
              "build is configured again", file=sys.stderr)
        return 1

    work = tempfile.mkdtemp(prefix="forecastd_kserve_http_py_")
    daemon = None
    failures = []

    def check(condition, message):
        if not condition:
            failures.append(message)

    try:
        grpc_port, metrics_port, http_port = fp.free_port(), fp.free_port(), fp.free_port()
        log_path = os.path.join(work, "forecastd.log")
        daemon = fp.start(
            args.binary,
            ["--grpc-address", f"127.0.0.1:{grpc_port}", "--metrics-address",
             f"127.0.0.1:{metrics_port}", "--http-address", f"127.0.0.1:{http_port}",
             "--model-repository", args.repository, "--devices", "cpu", "--cpu-workers", "2"],
            log_path)
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{http_port}", concurrency=4)
        fp.wait_until(daemon, client.is_server_ready, log_path, "become ready")

        check(client.is_server_live(), "is_server_live is False")
        server = client.get_server_metadata()
        check(server["name"] == "forecastd", f"server metadata {server}")
        check("binary_tensor_data" in server["extensions"], f"extensions {server['extensions']}")
        check(client.is_model_ready(args.model), f"{args.model} is not ready")
        check(not client.is_model_ready("no_such_model"), "an unknown model is ready")

        meta = client.get_model_metadata(args.model)
        input_meta, output_meta = meta["inputs"][0], meta["outputs"][0]
        T, F = input_meta["shape"][1], input_meta["shape"][2]
        config = client.get_model_config(args.model)
        check(config["name"] == args.model and config["max_batch_size"] > 0, f"config {config}")
        index = client.get_model_repository_index()
        check(any(m["name"] == args.model and m["state"] == "READY" for m in index),
              f"repository index {index}")

        with open(os.path.join(args.repository, args.model, "config.json"), encoding="utf-8") as f:
            features = json.load(f)["featureNames"]
        windows = np.array(read_windows(args.csv, features, T, 3), dtype=np.float32)

        def infer(x, binary, request_id=""):
            tensor = httpclient.InferInput(input_meta["name"], list(x.shape), "FP32")
            tensor.set_data_from_numpy(x, binary_data=binary)
            output = httpclient.InferRequestedOutput(output_meta["name"], binary_data=binary)
            return client.infer(args.model, [tensor], outputs=[output], request_id=request_id)

        json_result = infer(windows, False, "py-json")
        binary_result = infer(windows, True, "py-binary")
        as_json = json_result.as_numpy(output_meta["name"])
        as_binary = binary_result.as_numpy(output_meta["name"])
        expected_shape = [3] + output_meta["shape"][1:]
        check(list(as_json.shape) == expected_shape,
              f"JSON forecast shape {list(as_json.shape)}, metadata says {expected_shape}")
        check(np.array_equal(as_json, as_binary), "JSON and binary forecasts differ")
        check(np.all(np.isfinite(as_binary)), "non-finite forecasts")
        check(json_result.get_response()["id"] == "py-json", "the request id is not echoed")
        # No outputs named: tritonclient asks for every output in binary.
        tensor = httpclient.InferInput(input_meta["name"], list(windows.shape), "FP32")
        tensor.set_data_from_numpy(windows)
        default_result = client.infer(args.model, [tensor])
        check(np.array_equal(default_result.as_numpy(output_meta["name"]), as_binary),
              "the forecast without requested outputs differs")
        # One window alone forecasts what it does in a batch of three, up to float rounding.
        single = infer(windows[1:2], True).as_numpy(output_meta["name"])
        check(np.allclose(single[0], as_binary[1], rtol=1e-5, atol=1e-5),
              "a window alone forecasts differently than in a batch")
        # Requests in flight together may share a batch, which may round differently.
        pending = [client.async_infer(args.model, [tensor]) for _ in range(4)]
        for request in pending:
            check(np.allclose(request.get_result().as_numpy(output_meta["name"]), as_binary,
                              rtol=1e-5, atol=1e-5),
                  "an async_infer forecast differs")
        print(f"tritonclient.http infer on {args.model}: shape {list(as_json.shape)}, JSON and "
              f"binary equal, first values {as_binary.flatten()[:3]}")

        stats = client.get_inference_statistics(args.model)["model_stats"][0]
        successes = stats["inference_stats"]["success"]["count"]
        check(successes == 8, f"statistics count {successes} successes, 8 were sent")

        def refused(call, status, part):
            try:
                call()
            except InferenceServerException as e:
                check(e.status() == status and part in e.message(),
                      f"refusal {e.status()} {e.message()!r}, expected {status} with {part!r}")
                return
            failures.append(f"no refusal, expected {status} with {part!r}")

        bad = httpclient.InferInput(input_meta["name"], [1, T + 1, F], "FP32")
        bad.set_data_from_numpy(np.zeros((1, T + 1, F), dtype=np.float32))
        refused(lambda: client.infer(args.model, [bad]), "400", input_meta["name"])
        refused(lambda: client.infer("no_such_model", [tensor]), "404", "no_such_model")
        # CUDA shared memory answers; a handle of no live allocation is never registered (400,
        # or 404 where the build has CUDA and the host no GPU).
        check(client.get_cuda_shared_memory_status() == [],
              "CUDA shared-memory regions before any was registered")
        refused(lambda: client.register_cuda_shared_memory(
            "py_gpu", base64.b64encode(b"\0" * 63).decode(), 0, 64), "400",
                "a CUDA IPC handle has 64 bytes; got 63")
        try:
            client.register_cuda_shared_memory("py_gpu", base64.b64encode(b"\0" * 64).decode(), 0,
                                               64)
            failures.append("a CUDA IPC handle of zeros was registered")
        except InferenceServerException as e:
            check(e.status() in ("400", "404") and "shared-memory region 'py_gpu'" in e.message(),
                  f"refusal {e.status()} {e.message()!r} of a handle of zeros")
        client.unregister_cuda_shared_memory()

        # System shared memory, as tritonclient's helpers lay it out: the windows in one region,
        # the forecast written into another; the same forecast as the binary path, bit for bit.
        import tritonclient.utils.shared_memory as shm
        in_bytes, out_bytes = windows.nbytes, as_binary.nbytes
        in_key, out_key = f"/forecastd_py_in_{os.getpid()}", f"/forecastd_py_out_{os.getpid()}"
        in_handle = shm.create_shared_memory_region("py_in", in_key, in_bytes)
        out_handle = shm.create_shared_memory_region("py_out", out_key, out_bytes)
        try:
            shm.set_shared_memory_region(in_handle, [windows])
            client.register_system_shared_memory("py_in", in_key, in_bytes)
            client.register_system_shared_memory("py_out", out_key, out_bytes)
            regions = client.get_system_shared_memory_status()
            check(sorted(r["name"] for r in regions) == ["py_in", "py_out"],
                  f"shared-memory status {regions}")
            tensor = httpclient.InferInput(input_meta["name"], list(windows.shape), "FP32")
            tensor.set_shared_memory("py_in", in_bytes)
            output = httpclient.InferRequestedOutput(output_meta["name"], binary_data=True)
            output.set_shared_memory("py_out", out_bytes)
            result = client.infer(args.model, [tensor], outputs=[output])
            meta_out = result.get_output(output_meta["name"])
            check(meta_out is not None and "data" not in meta_out,
                  f"the output in shared memory carries data: {meta_out}")
            from_shm = shm.get_contents_as_numpy(out_handle, np.float32, meta_out["shape"])
            check(np.array_equal(from_shm, as_binary),
                  "the forecast in shared memory differs from the binary one")
            outside = httpclient.InferInput(input_meta["name"], list(windows.shape), "FP32")
            outside.set_shared_memory("py_in", in_bytes, offset=4)
            refused(lambda: client.infer(args.model, [outside]), "400",
                    "shared-memory region 'py_in'")
            client.unregister_system_shared_memory()
            check(client.get_system_shared_memory_status() == [],
                  "regions remain after unregister")
            print(f"tritonclient.http system shared memory on {args.model}: forecast equal")
        finally:
            shm.destroy_shared_memory_region(in_handle)
            shm.destroy_shared_memory_region(out_handle)

        client.unload_model(args.model)
        check(not client.is_model_ready(args.model), "the model is ready after unload_model")
        client.load_model(args.model)
        check(client.is_model_ready(args.model), "the model is not ready after load_model")
        check(np.array_equal(infer(windows, True).as_numpy(output_meta["name"]), as_binary),
              "the forecast after load_model differs")
        client.close()
    finally:
        fp.stop(daemon, failures)
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
