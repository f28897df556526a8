"""The forecastd process of the KServe Python tests: free ports, the daemon started with its
log in a file, a wait until a readiness check passes, and a SIGTERM stop that records how the
daemon ended. Standard library only; the tests import it from their own directory."""

import signal
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, args, log_path):
    """binary with args, its stdout and stderr written to log_path."""
    log = open(log_path, "w")
    return subprocess.Popen([binary, *args], stdout=log, stderr=subprocess.STDOUT)


def wait_until(daemon, ready, log_path, what, timeout_s=60):
    """Calls ready() every 0.2 s (an exception counts as not yet: the port may not listen) until
    it returns true; RuntimeError saying `what` did not happen, with the log, when the daemon
    exits or timeout_s passes first."""
    give_up = time.time() + timeout_s
    while True:
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001  (not listening yet)
            pass
        if daemon.poll() is not None or time.time() > give_up:
            with open(log_path) as f:
                raise RuntimeError(f"forecastd did not {what}:\n" + f.read())
        time.sleep(0.2)


def stop(daemon, failures):
    """SIGTERM to a daemon still running; an exit code other than 0, or no exit within 60 s
    (then SIGKILL), is appended to failures."""
    if daemon is None or daemon.poll() is not None:
        return
    daemon.send_signal(signal.SIGTERM)
    try:
        code = daemon.wait(timeout=60)
        if code != 0:
            failures.append(f"forecastd exited {code} on SIGTERM")
    except subprocess.TimeoutExpired:
        daemon.kill()
        failures.append("forecastd did not exit on SIGTERM")
