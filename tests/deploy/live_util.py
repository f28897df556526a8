"""What the deployment tests that start real processes share: free loopback ports and polling."""

import socket
import time


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, seconds=20, interval=0.25):
    """predicate()'s first truthy value within `seconds`; RuntimeError naming `what` otherwise."""
    give_up = time.monotonic() + seconds
    got = None
    while time.monotonic() < give_up:
        got = predicate()
        if got:
            return got
        time.sleep(interval)
    raise RuntimeError(f"timed out after {seconds} s waiting for {what} (last: {got!r})")
