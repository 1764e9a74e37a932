"""The helper that makes the sandbox's sockets waits for the sandbox's loopback to be up
(lnk_dns.helper.wait_for_loopback): bubblewrap says the sandbox's pid before its process
has brought the loopback up, and a bind then failed "Cannot assign requested address"
(seen once under load: tests/test_endpoints.py's psql test, on 127.53.0.1; ::1 fails so
whenever the loopback is down, and the relay's IPv6 listener was then left out as if the
sandbox had no IPv6). Run in a network namespace of its own (unshare -rn), whose
loopback starts down."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import socket, subprocess, threading, time
from lnk_dns.helper import wait_for_loopback
try:
    wait_for_loopback(0.05)
    print("up at once")
except OSError as error:
    print("down:", error)
try:
    socket.socket(socket.AF_INET6).bind(("::1", 5432))
except OSError as error:
    print("bind before:", error.strerror)
threading.Timer(0.2, lambda: subprocess.run(["ip", "link", "set", "lo", "up"],
                                            check=True)).start()
started = time.monotonic()
wait_for_loopback()
print("waited", round(time.monotonic() - started, 1))
socket.socket().bind(("127.53.0.1", 5432))
socket.socket(socket.AF_INET6).bind(("::1", 5432))
print("bound")
"""


def test_the_helper_waits_for_the_loopback_then_binds() -> None:
    done = subprocess.run(["unshare", "-rn", sys.executable, "-c", _SCRIPT],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "down: the sandbox's loopback was not up within 0.05 s",
        "bind before: Cannot assign requested address",
        "waited 0.2", "bound"], done.stdout
