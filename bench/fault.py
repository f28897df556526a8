"""Runs forecastd's fault and overload tests (tests/server/fault_test.cc, ctest label `slow`)
and reports what each one saw: requests sent and answered by code, health checks, peak RSS.

    bench/fault.sh [--build-dir build] [--record]

Builds nothing: run `make build` (or cmake --build <dir> --target fault_test) first. Every test
is bounded in time and runs on loopback; the whole run takes about a minute. With --record,
the table goes into bench/RESULTS.md (a re-run of the same command on the same day and host
replaces its section).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

from bench_report import (REPO, RESULTS_MD, command_line, cpu_model, git_describe,
                          markdown_table, text_table, write_section)


def run_tests(build_dir, report_path):
    env = dict(os.environ, FORECASTD_FAULT_REPORT=report_path)
    cmd = ["ctest", "--test-dir", build_dir, "-L", "slow", "-R", "^fault_test:",
           "--output-on-failure"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    return p.returncode, p.stdout + p.stderr


def codes_cell(codes):
    return ", ".join(f"{name} {c['count']:,} (p50 {c['p50_ms']:g} ms, p99 {c['p99_ms']:g} ms)"
                     for name, c in codes.items())


def rows(reports):
    """One row per test: what it sent, what came back, and its memory."""
    body = []
    for r in reports:
        t = r["test"]
        if t == "overload":
            what = (f"{r['duration_s']:g} s at {r['offered_per_s']:,} req/s offered "
                    f"(10x the {r['capacity_per_s']:,} req/s served closed-loop)")
            sent = f"{r['sent']:,} sent, {r['answered']:,} answered"
            codes = codes_cell(r["codes"])
            other = (f"health {r['health_checks_ok']} SERVING / {r['health_checks_failed']} "
                     f"failed (slowest {r['health_max_ms']} ms)")
            rss = f"{r['rss_before_mib']} -> peak {r['peak_rss_mib']}"
        elif t == "disconnect":
            what = f"{r['streams_cut']} watch streams cut mid-job, 200 Predicts cancelled"
            sent = "200 Predicts"
            codes = codes_cell(r["predicts_cancelled"])
            other = f"job SUCCEEDED; a fresh watch replayed {r['job_events_replayed']} events"
            rss = f"{r['rss_before_mib']} -> peak {r['peak_rss_mib']}"
        elif t == "sigkill_training":
            what = f"SIGKILL in epoch {r['killed_in_epoch']}, restart, same Train request"
            sent, codes, rss = "-", "-", "-"
            other = (f"resumed at epoch {r['resumed_at_epoch']}, published version "
                     f"{r['published_version']}; repository unchanged")
        elif t == "corrupt_model":
            what = "random bytes / half a file as model.safetensors"
            sent, codes, rss = "-", "-", "-"
            other = "both FAILED, the good model serves"
        elif t == "sigterm_under_load":
            what = (f"SIGTERM after {r['sent_before_sigterm']:,} requests at "
                    f"{r['offered_per_s']:,} req/s (2x capacity)")
            sent = f"{r['sent']:,} sent, {r['answered']:,} answered"
            codes = codes_cell(r["codes"])
            other = (f"daemon accepted {r['accepted']:,} (the capacity probe's included), "
                     f"answered {r['answered_by_daemon']:,}; exit code {r['exit_code']}")
            rss = "-"
        else:
            continue
        body.append([t, what, sent, codes, other, rss])
    return body


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build", help="CMake build directory (build)")
    ap.add_argument("--record", action="store_true", help="write the table into RESULTS.md")
    args = ap.parse_args(argv)
    build_dir = os.path.join(REPO, args.build_dir)

    with tempfile.TemporaryDirectory(prefix="forecastd-fault-") as tmp:
        report_path = os.path.join(tmp, "fault.jsonl")
        code, output = run_tests(build_dir, report_path)
        reports = []
        if os.path.exists(report_path):
            with open(report_path, encoding="utf-8") as f:
                reports = [json.loads(line) for line in f if line.strip()]
    if code != 0:
        print(output, file=sys.stderr)
        print(f"error: fault tests failed (ctest exit {code})", file=sys.stderr)
        return 1

    head = ["test", "what", "requests", "replies by code", "also", "RSS MiB"]
    body = rows(reports)
    print(text_table(head, body))
    env = {"date": datetime.date.today().isoformat(), "cpu": cpu_model(),
           "cores": os.cpu_count(), "git": git_describe(), "command": command_line()}
    print(json.dumps({"env": env, "tests": reports}))
    if args.record:
        key = f"{env['date']} | {env['cpu']} | {env['cores']} cores | {env['command']}"
        begin = f"<!-- fault.py section: {key} -->"
        end = "<!-- fault.py section end -->"
        section = "\n".join([
            begin,
            f"## {env['date']}: fault and overload tests, {env['cpu']}, {env['cores']} cores",
            "",
            "Written by `bench/fault.sh --record`: tests/server/fault_test.cc (ctest label "
            "`slow`) against a real forecastd on loopback, client on the same cores. Every test "
            "passed; the figures are what each saw.",
            "",
            f"- forecastd `{env['git']}`; command: `{env['command']}`",
            "",
            markdown_table(head, body),
            "",
            end])
        write_section(RESULTS_MD, begin, end, section)
        print(f"recorded in {os.path.relpath(RESULTS_MD, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
