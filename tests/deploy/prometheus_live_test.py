#!/usr/bin/env python3
"""Debian's real Prometheus scrapes a running forecastd; the deployment material is held to it.

Starts forecastd (free loopback ports, one model) and a Prometheus configured from
deploy/prometheus/prometheus.yml (its forecastd job pointed at the daemon, 1 s scrape and rule
evaluation, deploy/prometheus/forecastd-rules.yml loaded, storage in a temporary directory), sends
Predict traffic through a grpcio client (stubs generated here from proto/, as
tests/server/kserve_python_test.py does), waits for a scrape and then checks, through
Prometheus' HTTP API:
  - forecastd_requests_total{model,code="OK"} equals the Predicts sent, the INVALID_ARGUMENT
    count equals the bad ones sent, and forecastd_models_loaded is 1;
  - every alert rule loaded and evaluates without error;
  - every PromQL expression of the Grafana dashboard and of the alert rules parses and runs
    in Prometheus, refers only to metrics forecastd exports (this scrape, the series that
    server/serving_metrics.h documents, the per-GPU ones among them) and to
    labels those metrics carry; the dashboard's latency, traffic, batching and queue panels
    return data;
and, on the daemon directly: `promtool check metrics` accepts its /metrics (lint warnings are
printed), and forecastd-health exits 0 against it and 1 against a port where nothing listens.
Exits 0 when every check holds, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_refs  # noqa: E402
from live_util import free_port, wait_for  # noqa: E402

PREDICTS = 12      # good Predict calls
BAD_PREDICTS = 3   # Predict calls with the wrong lookback (INVALID_ARGUMENT)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode("utf-8")


def generate_stubs(proto_dir, out_dir):
    protos = ["forecastd/v1/model_config.proto", "forecastd/v1/training.proto",
              "forecastd/v1/forecaster.proto"]
    plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={out_dir}",
                    f"--grpc_out={out_dir}", f"--plugin=protoc-gen-grpc={plugin}"] + protos,
                   check=True)
    for package in ("forecastd", "forecastd/v1"):
        open(os.path.join(out_dir, package, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)


class Prometheus:
    def __init__(self, binary, config, storage, log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={storage}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, seconds=30):
        give_up = time.time() + seconds
        while time.time() < give_up:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}")
            try:
                http_get(self.url + "/-/ready", timeout=1)
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def api(self, path, **params):
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            return json.loads(http_get(url))
        except urllib.error.HTTPError as e:  # 400/422 carry the error as JSON
            return json.loads(e.read().decode("utf-8"))

    def query(self, expr):
        return self.api("query", query=expr)

    def value(self, expr):
        reply = self.query(expr)
        result = reply.get("data", {}).get("result", [])
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


def write_config(source, work, metrics_port):
    """deploy/prometheus/prometheus.yml with its forecastd job aimed at the test daemon."""
    import yaml
    with open(os.path.join(source, "deploy/prometheus/prometheus.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == "forecastd"]
    if len(jobs) != 1:
        raise RuntimeError("deploy/prometheus/prometheus.yml has no job named forecastd")
    job = jobs[0]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{metrics_port}"]}]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    rules_dir = os.path.join(source, "deploy/prometheus")
    config["rule_files"] = [os.path.join(rules_dir, r) for r in config.get("rule_files", [])]
    path = os.path.join(work, "prometheus.yml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    return path, config["rule_files"]


def send_traffic(grpc_port, repository, model, csv_path):
    import grpc
    from forecastd.v1 import forecaster_pb2, forecaster_pb2_grpc
    with open(os.path.join(repository, model, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    T, features = config["lookback"], config["featureNames"]
    with open(csv_path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        rows = [[float(x) for x in line.split(",")] for line in f if line.strip()][-T:]
    flat = [row[header.index(name)] for row in rows for name in features]
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = forecaster_pb2_grpc.ForecasterStub(channel)
    for _ in range(PREDICTS):
        request = forecaster_pb2.PredictRequest(model=model)
        request.inputs.shape.extend([1, T, len(features)])
        request.inputs.raw = struct.pack(f"<{len(flat)}f", *flat)
        stub.Predict(request, timeout=30)
    bad_codes = []
    for _ in range(BAD_PREDICTS):
        request = forecaster_pb2.PredictRequest(model=model)
        request.inputs.shape.extend([1, T - 1, len(features)])
        request.inputs.raw = struct.pack(f"<{len(flat) - len(features)}f",
                                         *flat[len(features):])
        try:
            stub.Predict(request, timeout=30)
            bad_codes.append("OK")
        except grpc.RpcError as e:
            bad_codes.append(e.code().name)
    channel.close()
    return bad_codes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--health-binary", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--model", default="demo_lstm")
    ap.add_argument("--csv", required=True)
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    ap.add_argument("--promtool", default=shutil.which("promtool") or "/usr/bin/promtool")
    args = ap.parse_args()
    args.source = os.path.abspath(args.source)

    failures = []

    def check(condition, message):
        if not condition:
            failures.append(message)
        return condition

    work = tempfile.mkdtemp(prefix="forecastd_prometheus_")
    daemon = prometheus = None
    try:
        generate_stubs(os.path.join(args.source, "proto"), work)
        grpc_port, metrics_port = free_port(), free_port()
        daemon_log = open(os.path.join(work, "forecastd.log"), "w")
        daemon = subprocess.Popen(
            [args.binary, "--grpc-address", f"127.0.0.1:{grpc_port}", "--metrics-address",
             f"127.0.0.1:{metrics_port}", "--http-address", "", "--model-repository",
             args.repository, "--load-model", args.model, "--devices", "cpu", "--cpu-workers", "2"],
            stdout=daemon_log, stderr=subprocess.STDOUT)
        health = [args.health_binary, f"--address=127.0.0.1:{grpc_port}", "--timeout-ms=1000"]
        wait_for("forecastd to serve", lambda: daemon.poll() is None and subprocess.run(
            health, capture_output=True).returncode == 0, seconds=60)

        config, rule_files = write_config(args.source, work, metrics_port)
        prometheus_log = open(os.path.join(work, "prometheus.log"), "w")
        prometheus = Prometheus(args.prometheus, config, os.path.join(work, "tsdb"), prometheus_log)
        prometheus.wait_ready()
        wait_for("the first scrape", lambda: prometheus.value("forecastd_models_loaded") is not None)

        bad_codes = send_traffic(grpc_port, args.repository, args.model, args.csv)
        check(bad_codes == ["INVALID_ARGUMENT"] * BAD_PREDICTS,
              f"a window of the wrong lookback gave {bad_codes}")
        ok_query = f'sum(forecastd_requests_total{{model="{args.model}",code="OK"}})'
        try:
            wait_for(f"{ok_query} == {PREDICTS}", lambda: prometheus.value(ok_query) == PREDICTS)
        except RuntimeError:
            pass
        ok = prometheus.value(ok_query)
        check(ok == PREDICTS, f"Prometheus has {ok_query} = {ok}, want {PREDICTS}")
        bad_query = f'sum(forecastd_requests_total{{model="{args.model}",code="INVALID_ARGUMENT"}})'
        bad = prometheus.value(bad_query)
        check(bad == BAD_PREDICTS, f"Prometheus has {bad_query} = {bad}, want {BAD_PREDICTS}")
        loaded = prometheus.value("forecastd_models_loaded")
        check(loaded == 1, f"Prometheus has forecastd_models_loaded = {loaded}, want 1")
        print(f"Prometheus (scraping every 1s): {ok_query} = {ok}, {bad_query} = {bad}, "
              f"forecastd_models_loaded = {loaded}")

        # The alert rules loaded, and each has been evaluated without error.
        def evaluated():
            groups = prometheus.api("rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            done = rules and all(r.get("lastEvaluation", "").startswith("20") and
                                 not r["lastEvaluation"].startswith("0001") for r in rules)
            return rules if done else None
        rules = wait_for("every rule to be evaluated", evaluated)
        check(len(rules) >= 10, f"Prometheus loaded {len(rules)} rules from {rule_files}")
        for rule in rules:
            check(rule.get("health") == "ok",
                  f"rule {rule['name']}: health {rule.get('health')}: {rule.get('lastError')}")
        firing = [a["labels"]["alertname"] for a in prometheus.api("alerts")["data"]["alerts"]
                  if a["state"] == "firing"]
        check(not firing, f"alerts fire against a healthy forecastd: {firing}")

        # forecastd's /metrics, as Prometheus scrapes it.
        metrics_text = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        lint = subprocess.run([args.promtool, "check", "metrics"], input=metrics_text,
                              capture_output=True, text=True)
        print(f"$ curl -s http://127.0.0.1:{metrics_port}/metrics | promtool check metrics  "
              f"(exit {lint.returncode})\n{lint.stdout}{lint.stderr}".rstrip())
        lint_errors = [line for line in (lint.stdout + lint.stderr).splitlines()
                       if "error" in line.lower()]
        check(not lint_errors, f"promtool check metrics reports errors: {lint_errors}")

        live, _ = promql_refs.parse_exposition(metrics_text)
        documented = promql_refs.documented_metrics(
            os.path.join(args.source, "server/serving_metrics.h"))
        catalogue = promql_refs.MetricCatalogue(live, documented)
        not_live = sorted(n for n in documented if n not in live)
        print(f"{len([n for n in live if n.startswith('forecastd_')])} forecastd_* families in "
              f"this scrape; documented but not in it (no event of theirs yet): {not_live}")

        # Every query of the dashboard and every rule expression: known series and labels,
        # and Prometheus runs it.
        with open(os.path.join(args.source, "deploy/grafana/forecastd-dashboard.json"),
                  encoding="utf-8") as f:
            dashboard = json.load(f)
        expressions = []
        for item in promql_refs.grafana_expressions(dashboard):
            where, expr = item[0], item[1]
            extra = [item[2]] if len(item) > 2 else []
            expressions.append(("dashboard " + where, expr, extra))
        for rule in rules:
            expressions.append((f"rule {rule['name']}", rule["query"], []))
        gpu_only = set()
        for where, expr, extra in expressions:
            failures.extend(catalogue.check(where, expr, extra))
            gpu_only |= {m for m in catalogue.source_of(expr) if m.startswith("forecastd_gpu_")}
            runnable = promql_refs.substitute_grafana_variables(expr)
            reply = prometheus.query(runnable)
            check(reply.get("status") == "success",
                  f"{where}: Prometheus rejects {runnable!r}: {reply.get('error')}")
        print(f"{len(expressions)} PromQL expressions (dashboard and rules) run in Prometheus and "
              f"use known series; GPU series (none on this CPU-only daemon): {sorted(gpu_only)}")

        # rate() needs two samples of a series, and the per-model series appear with the traffic.
        wait_for("two scrapes after the traffic", lambda: (prometheus.value(
            "min(count_over_time(forecastd_requests_total[1m]))") or 0) >= 2)
        expect_data = ("End-to-end latency", "Queue time", "Compute time", "Throughput by model",
                       "Throughput by method", "Batch size", "Batches / s", "Queue depth",
                       "Models loaded", "Requests / s")
        for panel in dashboard["panels"]:
            if not panel["title"].startswith(expect_data):
                continue
            for target in panel["targets"]:
                expr = promql_refs.substitute_grafana_variables(target["expr"])
                result = prometheus.query(expr).get("data", {}).get("result", [])
                check(result, f"dashboard panel {panel['title']!r} {target['refId']}: no data "
                              f"after traffic: {expr}")

        # The image's HEALTHCHECK binary against the live server and against nothing.
        run = subprocess.run(health, capture_output=True, text=True)
        check(run.returncode == 0 and "SERVING" in run.stdout,
              f"forecastd-health against forecastd: exit {run.returncode}: {run.stdout}")
        nothing = [args.health_binary, f"--address=127.0.0.1:{free_port()}", "--timeout-ms=1000"]
        run = subprocess.run(nothing, capture_output=True, text=True)
        check(run.returncode == 1, f"forecastd-health where nothing listens: exit "
                                   f"{run.returncode}, want 1: {run.stdout}")
    except Exception as e:  # noqa: BLE001 -- report with the logs below
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        if prometheus is not None:
            prometheus.stop()
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(timeout=60)
                check(code == 0, f"forecastd exited {code} on SIGTERM")
            except subprocess.TimeoutExpired:
                daemon.kill()
                failures.append("forecastd did not exit on SIGTERM")
        if failures:
            for name in ("forecastd.log", "prometheus.log"):
                path = os.path.join(work, name)
                if os.path.exists(path):
                    with open(path, encoding="utf-8", errors="replace") as f:
                        print(f"--- {name} (last lines)\n" + "".join(f.readlines()[-30:]))
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    print(f"deploy prometheus live: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
