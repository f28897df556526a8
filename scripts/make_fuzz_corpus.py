#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/.

Seeds are small valid inputs (taken from models/ and tests/golden/ where possible) plus a few
near misses that reach each parser's error paths. Needs only the Python standard library: the
PredictRequest seeds are protobuf wire bytes written by the tiny encoder below, and the
safetensors seeds are written by hand in the format's layout.

Usage: scripts/make_fuzz_corpus.py [--out tests/fuzz/corpus]. Rewrites the output directory
(each target's folder is emptied first), so rerun it after changing a seed and commit the
result; the output is deterministic.
"""

import argparse
import json
import math
import pathlib
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent


# --- safetensors ---------------------------------------------------------------------------


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] laid out in order; returns the file's bytes."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset, data = 0, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


def safetensors_seeds():
    seeds = {}
    # Real files: a demo model, and golden weights that load whole into the fuzz models.
    seeds["demo_lstm.safetensors"] = (ROOT / "models/demo_lstm/1/model.safetensors").read_bytes()
    for case in ("lstm_uni_l1", "transformer_quantile"):
        seeds[f"golden_{case}.safetensors"] = (
            ROOT / f"tests/golden/{case}/model.safetensors").read_bytes()
    seeds["golden_io.safetensors"] = (ROOT / "tests/golden/lstm_uni_l1/io.safetensors").read_bytes()
    # Every dtype, a scalar, an empty tensor and metadata, with escapes in names.
    seeds["dtypes.safetensors"] = safetensors(
        [
            ("bool", "BOOL", [2], b"\x00\x01"),
            ("u8", "U8", [1, 2], b"\x01\x02"),
            ("i8", "I8", [1], b"\xff"),
            ("f8", "F8_E4M3", [1], b"\x38"),
            ("f8b", "F8_E5M2", [1], b"\x3c"),
            ("f8c", "F8_E8M0", [1], b"\x7f"),
            ("bf16", "BF16", [2], b"\x80\x3f\x00\x40"),
            ("f16", "F16", [1], b"\x00\x3c"),
            ("i16", "I16", [1], b"\x01\x00"),
            ("u16", "U16", [1], b"\x01\x00"),
            ("i32", "I32", [1], b"\x01\x00\x00\x00"),
            ("u32", "U32", [1], b"\x01\x00\x00\x00"),
            ("scalar", "F32", [], f32(1.5)),
            ("empty", "F32", [0, 3], b""),
            ("f64", "F64", [1], struct.pack("<d", 2.5)),
            ("i64", "I64", [1], struct.pack("<q", -1)),
            ("u64", "U64", [1], struct.pack("<Q", 1)),
            ("c64", "C64", [1], f32(1.0, -1.0)),
            ("name \"quoted\" \\ \u00e9\u4e2d", "F32", [2], f32(0.25, -0.5)),
        ],
        metadata={"format": "pt", "note": "tab\there \u2603"})
    seeds["f32_metadata.safetensors"] = safetensors(
        [("w", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "F32", [2], f32(5, 6))],
        metadata={"format": "pt"})
    seeds["unpadded.safetensors"] = safetensors([("x", "F32", [1], f32(7))], pad=False)
    # Near misses: each breaks one rule of the reader.
    good = safetensors([("a", "F32", [2], f32(1, 2)), ("b", "F32", [1], f32(3))])
    seeds["bad_truncated.safetensors"] = good[:-2]
    seeds["bad_trailing.safetensors"] = good + b"\x00\x00\x00\x00"
    seeds["bad_short.safetensors"] = b"\x10\x00\x00"
    seeds["bad_header_length.safetensors"] = struct.pack("<Q", 1 << 40) + b"{}"
    overlap = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' \
              b'"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    seeds["bad_overlap.safetensors"] = struct.pack("<Q", len(overlap)) + overlap + f32(1)
    dup = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' \
          b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    seeds["bad_duplicate.safetensors"] = struct.pack("<Q", len(dup)) + dup + f32(1, 2)
    wrong = b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}'
    seeds["bad_size.safetensors"] = struct.pack("<Q", len(wrong)) + wrong + f32(1, 2)
    odd = b'{"a":{"dtype":"F4","shape":[1.5,-1],"data_offsets":[0,1e300]}}'
    seeds["bad_values.safetensors"] = struct.pack("<Q", len(odd)) + odd
    deep = b"[" * 40 + b"]" * 40
    seeds["bad_deep.safetensors"] = struct.pack("<Q", len(deep)) + deep
    return seeds


# --- config.json ---------------------------------------------------------------------------


def model_config_seeds():
    seeds = {}
    for name in ("demo_lstm", "demo_transformer"):
        seeds[f"{name}.json"] = (ROOT / f"models/{name}/config.json").read_bytes()
    for path in sorted((ROOT / "tests/golden").glob("*/config.json")):
        seeds[f"golden_{path.parent.name}.json"] = path.read_bytes()
    full = {
        "name": "full", "description": "every field", "lookback": 24, "horizon": 6,
        "feature_names": ["a", "b", "c"], "target_names": ["c", "a"],
        "quantiles": [0.05, 0.5, 0.95],
        "gru": {"hidden_size": 16, "num_layers": 2, "bidirectional": True, "dropout": 0.1},
        "normalization": "NORMALIZATION_NONE", "precision": "PRECISION_BF16",
        "batching": {
            "max_batch_size": 64, "preferred_batch_size": [16, 32], "max_queue_delay_us": "500",
            "priority_levels": 2, "default_priority_level": 2,
            "default_queue_policy": {"timeout_action": "DELAY", "default_timeout_us": "1000",
                                     "allow_timeout_override": True, "max_queue_size": 100},
            "priority_queue_policy": {"1": {"timeout_action": "REJECT", "max_queue_size": 10}},
        },
        "instances": {"count": 2, "devices": ["cpu", "cuda:0"]},
        "serving_version": "3",
    }
    seeds["full_snake_case.json"] = json.dumps(full, indent=1).encode()
    transformer = {
        "name": "t", "lookback": 8, "horizon": 2, "featureNames": ["x"], "targetNames": ["x"],
        "transformer": {"dModel": 4, "numHeads": 4, "numLayers": 1, "dimFeedforward": 8,
                        "activation": "ACTIVATION_GELU_TANH", "causal": True,
                        "layerNormEps": 1e-6},
    }
    seeds["transformer_causal.json"] = json.dumps(transformer).encode()
    # Near misses.
    seeds["bad_unknown_field.json"] = b'{"name":"x","lookback":4,"hidenSize":3}'
    seeds["bad_no_architecture.json"] = b'{"name":"x","lookback":4,"horizon":1,' \
                                        b'"featureNames":["a"],"targetNames":["a"]}'
    seeds["bad_heads.json"] = json.dumps(dict(transformer, transformer=dict(
        transformer["transformer"], numHeads=3))).encode()
    seeds["bad_target.json"] = b'{"name":"x","lookback":4,"horizon":1,"featureNames":["a","a"],' \
                               b'"targetNames":["b"],"lstm":{"hiddenSize":1,"numLayers":1}}'
    seeds["bad_types.json"] = b'{"name":7,"lookback":"x","quantiles":["NaN",2],' \
                              b'"normalization":99,"lstm":{"dropout":"Infinity"}}'
    return seeds


# --- CSV -----------------------------------------------------------------------------------
# The fuzz target's input is "<timestamp column>|<columns, comma-separated>\n" + CSV text.


def csv_seeds():
    seeds = {}
    sample = (ROOT / "models/sample_input.csv").read_bytes()
    seeds["sample_all_columns.txt"] = b"|\n" + sample
    seeds["sample_features.txt"] = b"|FTSE,DAX\n" + sample
    rows = [f"2024-01-01T{h:02d}:00:00Z,{10 + h},{math.sin(h):.4f},{h * 0.5}" for h in range(12)]
    seeds["iso_timestamps.txt"] = b"time|load,price\n" + (
        "time,load,temperature,price\n" + "\n".join(rows) + "\n").encode()
    iso_variants = ["2024-02-29 23:59:59.5+01:00", "2024-03-01t00:00:00,75-00:30",
                    "2024-03-01T01:00z", "2024-03-01T02:00:00.123456789+0100", "2024-03-02"]
    seeds["iso_variants.txt"] = b"ts|v\n" + ("ts,v\n" + "\n".join(
        f"{t},{i}" for i, t in enumerate(iso_variants)) + "\n").encode()
    seeds["number_timestamps_crlf_bom.txt"] = b"t|\n" + (
        "\ufeff t , a ,b\r\n" + "".join(f"{1700000000 + 60 * i}, {i}.5 ,+{i}e-3\r\n"
                                        for i in range(10)) + "\r\n\r\n").encode("utf-8")
    seeds["label_timestamps.txt"] = b"day|x\n" + ("day,x,note\n" + "".join(
        f"d{i},{-i * 1.25},{'anything goes' if i % 2 else ''}\n" for i in range(9))).encode()
    seeds["extremes.txt"] = b"|\n" + (
        "a,b\n3.4028234e38,-1e-45\n-3.4028234e38,1e-50\n.5,-0\n0,5.\n1e-10,2\n0,1\n1,0\n2,2\n"
    ).encode()
    # Near misses.
    seeds["bad_cells.txt"] = b"|\na,b\n1,nan\n2,inf\n3,\n4,1e39\n0x10,5\n"
    seeds["bad_shape.txt"] = b"ts|a\nts,a\n1,2,3\n\n2,3\n"
    seeds["bad_time_order.txt"] = b"ts|\nts,a\n2024-01-02,1\n2024-01-01,2\n2024-13-40,3\n"
    seeds["bad_header.txt"] = b"missing|a,a\n a ,,a\n1,2,3\n"
    return seeds


# --- PredictRequest --------------------------------------------------------------------------
# forecastd.v1.PredictRequest: model=1 (string), version=2 (int64), inputs=3 (Tensor),
# priority=4 (uint32), timeout_us=5 (uint64), future=6 (Tensor), timestamps=7 (packed int64),
# series=8 (strings); Tensor: shape=1 (packed int64), raw=2 (bytes), values=3 (packed float).


def varint(n):
    n &= (1 << 64) - 1  # negative int64 values are ten-byte two's complement varints
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, payload):
    key = varint(number << 3 | wire_type)
    if wire_type == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def tensor(shape, raw=None, values=None):
    out = field(1, 2, b"".join(varint(d) for d in shape))
    if raw is not None:
        out += field(2, 2, raw)
    if values is not None:
        out += field(3, 2, f32(*values))
    return out


def request(model, inputs, version=0, priority=0, timeout_us=0):
    out = field(1, 2, model.encode()) + field(3, 2, inputs)
    if version:
        out += field(2, 0, version)
    if priority:
        out += field(4, 0, priority)
    if timeout_us:
        out += field(5, 0, timeout_us)
    return out


def predict_request_seeds():
    # The fuzz models (tests/fuzz/fuzz_models.h): lookback 7, 3 features; the LSTM takes at most
    # 8 windows, "transformer_quantile" (max_batch_size 1000000) as many as the server's
    # limits allow (the fuzz target uses the daemon's defaults: 1024 windows, 512 MiB).
    T, F = 7, 3
    window = [10.0 + 0.5 * i for i in range(T * F)]
    seeds = {}
    seeds["lstm_raw_b1.pb"] = request("lstm_uni_l1", tensor([1, T, F], raw=f32(*window)))
    seeds["lstm_values_b2.pb"] = request("lstm_uni_l1", tensor([2, T, F], values=window * 2),
                                         priority=1, timeout_us=5000)
    seeds["transformer_raw_b3.pb"] = request("transformer_quantile",
                                             tensor([3, T, F], raw=f32(*(window * 3))), version=2)
    nan = [math.nan] + window[1:]
    seeds["nan_allowed.pb"] = request("lstm_uni_l1", tensor([1, T, F], values=nan), version=1)
    seeds["nan_refused.pb"] = request("lstm_uni_l1", tensor([1, T, F], raw=f32(*nan)), version=2)
    seeds["inf_raw.pb"] = request("transformer_quantile",
                                  tensor([1, T, F], raw=f32(*([math.inf] * T * F))))
    # Near misses.
    seeds["bad_both.pb"] = request("lstm_uni_l1", tensor([1, T, F], raw=f32(*window),
                                                         values=window))
    seeds["bad_batch_over_max.pb"] = request("lstm_uni_l1", tensor([9, T, F],
                                                                   values=window * 9))
    seeds["bad_raw_size.pb"] = request("lstm_uni_l1", tensor([1, T, F], raw=f32(*window)[:-1]))
    seeds["bad_shape.pb"] = request("lstm_uni_l1", tensor([T, F], values=window))
    seeds["bad_negative.pb"] = request("transformer_quantile", tensor([-1, T, F]))
    seeds["bad_huge.pb"] = request("transformer_quantile", tensor([1 << 62, T, F]))
    seeds["bad_empty.pb"] = request("lstm_uni_l1", tensor([0, T, F]))
    seeds["bad_over_server_rows.pb"] = request("transformer_quantile", tensor([2000, T, F]))
    seeds["bad_no_data_b1024.pb"] = request("transformer_quantile", tensor([1024, T, F]))
    # "gru_covariates": lookback 5, horizon 3, 3 input columns, the future-known holiday, the
    # hour of day, the series north and south.
    CT, CP = 5, 3
    windows = [10.0 + 0.25 * i for i in range(2 * CT * F)]
    future = field(6, 2, tensor([2, CP, 1], values=[0.0, 1.0, 0.0, 1.0, 1.0, 0.0]))
    times = field(7, 2, b"".join(varint(1772409600 + 3600 * (b * 10 + t))
                                 for b in range(2) for t in range(CT + CP)))

    def names(*series):
        return b"".join(field(8, 2, name.encode()) for name in series)

    covariates = request("gru_covariates", tensor([2, CT, F], values=windows))
    seeds["covariates_b2.pb"] = covariates + future + times + names("north", "south")
    seeds["covariates_one_series.pb"] = covariates + future + times + names("south")
    seeds["covariates_unknown_series.pb"] = covariates + future + times + names("west")
    seeds["covariates_no_future.pb"] = covariates + times + names("north")
    seeds["lstm_extra_series.pb"] = request("lstm_uni_l1", tensor([1, T, F],
                                                                  values=window)) + names("north")
    return seeds


def stream_request_seeds():
    # A StreamRequest with ticks: key (field 1), ticks (field 3: raw 1, values 2 packed, future 3
    # packed, timestamps 4 packed). The fuzz target reads F = 1 + len(key) % 4, P = 1 +
    # len(key) % 3 forecast steps of len(key) / 4 % 3 future-known covariates, calendar features
    # for keys holding "t", and allows non-finite values for keys "nan...".
    def ticks(key, raw=None, values=None, future=None, timestamps=None):
        body = b""
        if raw is not None:
            body += field(1, 2, raw)
        if values is not None:
            body += field(2, 2, f32(*values))
        if future is not None:
            body += field(3, 2, f32(*future))
        if timestamps is not None:
            body += field(4, 2, b"".join(varint(t) for t in timestamps))
        return field(1, 2, key.encode()) + field(3, 2, body)

    seeds = {}
    seeds["values_f3.pb"] = ticks("abcd", values=[1.0, 2.0, 3.0, 4.0])  # F = 1
    seeds["raw_f2_rows2.pb"] = ticks("a", raw=f32(1.5, 2.5, 3.5, 4.5))  # F = 2
    seeds["nan_allowed.pb"] = ticks("nan", values=[math.nan, 1.0])  # F = 4: refused shape
    seeds["nan_refused.pb"] = ticks("k", raw=f32(math.nan, 1.0))
    seeds["bad_both.pb"] = ticks("k", raw=f32(1.0, 2.0), values=[1.0, 2.0])
    seeds["bad_raw_size.pb"] = ticks("k", raw=f32(1.0, 2.0)[:-1])
    seeds["bad_empty.pb"] = ticks("k")
    seeds["open.pb"] = field(1, 2, b"k") + field(2, 2, field(1, 2, b"m"))
    # "tick": F = 1, P = 2 steps of 1 future-known covariate, calendar features.
    seeds["covariates_rows2.pb"] = ticks("tick", values=[1.0, 2.0], future=[0.0, 1.0],
                                         timestamps=[10, 20, 30, 40])
    seeds["covariates_bad_times.pb"] = ticks("tick", values=[1.0, 2.0], future=[0.0, 1.0],
                                             timestamps=[10, 20, 20, 40])
    seeds["covariates_missing.pb"] = ticks("tick", values=[1.0])
    return seeds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "tests/fuzz/corpus")
    args = parser.parse_args()
    targets = {
        "safetensors": safetensors_seeds(),
        "model_config": model_config_seeds(),
        "csv": csv_seeds(),
        "predict_request": predict_request_seeds(),
        "stream_request": stream_request_seeds(),
    }
    total = 0
    for target, seeds in targets.items():
        folder = args.out / target
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, data in sorted(seeds.items()):
            (folder / name).write_bytes(data)
            total += len(data)
        print(f"{folder}: {len(seeds)} seeds")
    print(f"{total} bytes in all")


if __name__ == "__main__":
    main()
