#!/usr/bin/env python3
"""`make run` builds only what it runs.

Asks make what `make run` would execute (`make -n run`, which runs nothing) and checks that it
installs only the build dependencies (`install-deps.sh --build-only`) and builds exactly the
daemon, the CLI and the health probe. Usage: make_run_check.py SOURCE_DIR. Exits 0 when both
hold, 1 otherwise.
"""

import re
import subprocess
import sys

RUN_TARGETS = {"forecastd", "forecastctl", "forecastd-health"}


def main() -> int:
    source = sys.argv[1]
    failures = []
    dry = subprocess.run(["make", "-n", "-C", source, "run"], capture_output=True, text=True,
                         check=False)
    if dry.returncode != 0:
        print(dry.stdout + dry.stderr)
        return 1
    commands = dry.stdout
    if "scripts/install-deps.sh --build-only" not in commands:
        failures.append("make run does not install with --build-only:\n" + commands)
    targets = re.search(r"TARGETS='([^']*)'\s+bash scripts/build.sh", commands)
    if targets is None:
        failures.append("make run does not build named targets:\n" + commands)
    elif set(targets.group(1).split()) != RUN_TARGETS:
        failures.append(f"make run builds {targets.group(1)!r}, not {sorted(RUN_TARGETS)}")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"make run builds {sorted(RUN_TARGETS)} after install-deps.sh --build-only")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
