"""What the benchmark drivers (run_cpu.py, load.py) share: the host, the tables, RESULTS.md.

Plain standard library, so a driver that needs no PyTorch (load.py) can use it too.
"""

import os
import platform
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir))
RESULTS_MD = os.path.join(HERE, "RESULTS.md")


def fmt_us(v):
    return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def text_table(head, body):
    widths = [max(len(c) for c in col) for col in zip(head, *body)]
    right = lambda i: i > 0  # noqa: E731
    fmt = lambda cells: "  ".join(c.rjust(w) if right(i) else c.ljust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def markdown_table(head, body):
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |"]
    return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_describe():
    try:
        p = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty", "--tags"],
                           capture_output=True, text=True, timeout=30)
        return p.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def command_line():
    # The bench/*.sh wrappers pass the command the user typed; run directly, rebuild it.
    cmd = os.environ.get("FORECASTD_BENCH_COMMAND")
    if cmd:
        return cmd
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    return shlex.join([sys.executable, script] + sys.argv[1:])


NEW_RESULTS_HEADER = (
    "# CPU benchmark results\n\n"
    "Written by `bench/run_cpu.sh --record` (see bench/README.md). Times are per "
    "forecast call, in microseconds; ratio = PyTorch median / forecastd median, so "
    "> 1 means forecastd is faster. Each section is one run; a re-run of the same "
    "command on the same day and host replaces its section.\n")


def write_section(path, begin, end, section):
    """Replaces the text from the line `begin` to the line `end` in path with `section` (which
    starts with `begin` and ends with `end`), or appends it; atomically (temp file, rename)."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:
        text = NEW_RESULTS_HEADER
    i = text.find(begin)
    if i >= 0:
        j = text.find(end, i)
        j = len(text) if j < 0 else j + len(end)
        text = text[:i] + section + text[j:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
