#!/usr/bin/env python3
"""Validation scores of a served model in the series' own units.

Cuts the validation part of a CSV series the way forecastd's training does (the last
`validation_fraction` of the rows, floor(rows * (1 - fraction)) rows before it train; windows of
lookback T and horizon P start at every row of the part, none crossing the split), asks a running
forecastd for each window's forecast through KServe v2 REST (POST /v2/models/NAME/infer, in
batches of the model's max batch size), and prints JSON: per target and over all targets, MAE and
RMSE of the model and of the naive forecast that repeats the window's last value.

Standard library only. Usage:
    score.py --http 127.0.0.1:8000 --model demo_lstm --csv data/eu_stock_markets.csv
"""

import argparse
import csv
import json
import math
import sys
import urllib.request


def get_json(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--http", required=True, help="host:port of forecastd's KServe REST")
    ap.add_argument("--model", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--config", required=True, help="the model's config.json")
    ap.add_argument("--validation-fraction", type=float, default=0.2)
    args = ap.parse_args()

    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    features = config["featureNames"]
    targets = config["targetNames"]
    T, P = int(config["lookback"]), int(config["horizon"])
    max_batch = int(config.get("batching", {}).get("maxBatchSize", 32) or 32)
    with open(args.csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    series = [[float(r[name]) for name in features] for r in rows]
    n = len(series)
    n_train = int(math.floor(n * (1.0 - args.validation_fraction) + 1e-6))
    starts = list(range(n_train, n - T - P + 1))
    if not starts:
        sys.exit(f"score.py: no validation window in {n - n_train} rows (T={T}, P={P})")
    target_cols = [features.index(t) for t in targets]

    base = f"http://{args.http}/v2/models/{args.model}"
    meta = get_json(base)
    input_name = meta["inputs"][0]["name"]
    forecasts = []
    for i in range(0, len(starts), max_batch):
        chunk = starts[i:i + max_batch]
        data = [v for s in chunk for row in series[s:s + T] for v in row]
        reply = get_json(base + "/infer", {"inputs": [
            {"name": input_name, "shape": [len(chunk), T, len(features)], "datatype": "FP32",
             "data": data}]})
        out = reply["outputs"][0]["data"]
        per = len(out) // len(chunk)
        forecasts += [out[j * per:(j + 1) * per] for j in range(len(chunk))]

    def scores(errors):
        return {"mae": sum(abs(e) for e in errors) / len(errors),
                "rmse": math.sqrt(sum(e * e for e in errors) / len(errors))}

    result = {"model": args.model, "csv": args.csv, "validation_rows": n - n_train,
              "validation_windows": len(starts), "targets": {}}
    all_model, all_naive = [], []
    for k, col in enumerate(target_cols):
        model_err, naive_err = [], []
        for w, s in enumerate(starts):
            last = series[s + T - 1][col]
            for p in range(P):
                truth = series[s + T + p][col]
                model_err.append(forecasts[w][p * len(targets) + k] - truth)
                naive_err.append(last - truth)
        result["targets"][targets[k]] = {"model": scores(model_err), "naive": scores(naive_err)}
        all_model += model_err
        all_naive += naive_err
    result["all"] = {"model": scores(all_model), "naive": scores(all_naive)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
