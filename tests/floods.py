"""Floods a sandboxed program can make to grow Link's settings from inside (issue 12,
item 7), as programs run inside a real sandbox; shared by tests/test_log_bounds.py and
bench/logflood. Each prints one JSON line: what it sent, what came back, and how long.

- EXEC: execve of programs not in [commands], each path ~1,000 bytes of control
  characters (each written \\xNN in programs.log), 64 distinct names in turn.
- DNS: A queries for distinct 253-byte names nobody listed, over UDP (one after
  another) or TCP (one connection, one query after another); or ("malformed") queries
  that do not parse; or ("wildcard") distinct 253-byte names under a `*.lnkt`
  endpoint, each given an address of the sandbox's own (allowed, so never folded:
  bounded by the log's rotation and the addresses there are to give).
- CONNECT: CONNECT to distinct 253-byte names not in hosts, a connection each.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["CONNECT", "DNS", "EXEC", "folded", "settings_bytes"]

EXEC = r"""
import json, os, sys, time
count = int(sys.argv[1])
names = []
for index in range(64):
    folder = "/tmp/flood"
    for level in range(3):
        folder += "/" + ("\x1b[2J\x07\x08\x0b" * 62 + f"{index:02d}")[:250]
    os.makedirs(folder, exist_ok=True)
    path = folder + "/" + ("\x1b]0;owned\x07" * 25)[:200]
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\necho ran\n")
    os.chmod(path, 0o755)
    names.append(path)
refused = 0
start = time.monotonic()
for index in range(count):
    try:
        os.execv(names[index % 64], [names[index % 64]])
    except PermissionError:
        refused += 1
print(json.dumps({"sent": count, "refused": refused, "seconds": time.monotonic() - start}))
"""

DNS = r"""
import json, socket, struct, sys, time
transport, count = sys.argv[1], int(sys.argv[2])
style = sys.argv[3] if len(sys.argv) > 3 else "unlisted"

def name(index):
    if style == "wildcard":  # under a `*.lnkt` endpoint: each given an address here
        return ".".join([f"{index:010d}" + "x" * 53, "y" * 63, "z" * 63, "w" * 56, "lnkt"])
    return ".".join([f"{index:010d}" + "x" * 53, "y" * 63, "z" * 63, "w" * 61])  # 253 bytes

def query(index):
    head = struct.pack(">HHHHHH", index & 0xFFFF, 0x0100, 1, 0, 0, 0)
    if style == "malformed":  # a header, then bytes that are no question
        return head + bytes([63]) + bytes(range(64, 127)) + b"\xff" * 200
    wire = b"".join(bytes([len(label)]) + label.encode() for label in name(index).split("."))
    return head + wire + b"\0" + struct.pack(">HH", 1, 1)

rcodes = {}
start = time.monotonic()
if transport == "udp":
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", 53))
    for index in range(count):
        sock.send(query(index))
        answer = sock.recv(4096)
        rcodes[answer[3] & 0xF] = rcodes.get(answer[3] & 0xF, 0) + 1
else:
    sock = socket.create_connection(("127.0.0.1", 53), timeout=5)
    for index in range(count):
        data = query(index)
        sock.sendall(struct.pack(">H", len(data)) + data)
        size = b""
        while len(size) < 2:
            size += sock.recv(2 - len(size))
        want, answer = struct.unpack(">H", size)[0], b""
        while len(answer) < want:
            answer += sock.recv(want - len(answer))
        rcodes[answer[3] & 0xF] = rcodes.get(answer[3] & 0xF, 0) + 1
print(json.dumps({"sent": count, "rcodes": {str(k): v for k, v in rcodes.items()},
                  "seconds": time.monotonic() - start}))
"""

CONNECT = r"""
import json, socket, sys, time
count = int(sys.argv[1])
statuses = {}
start = time.monotonic()
for index in range(count):
    host = ".".join([f"{index:010d}" + "c" * 53, "o" * 63, "n" * 63, "e" * 61])
    with socket.create_connection(("127.0.0.1", 3128), timeout=5) as sock:
        sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        status = answer.split(b" ")[1].decode() if answer.count(b" ") else "closed"
        statuses[status] = statuses.get(status, 0) + 1
print(json.dumps({"sent": count, "statuses": statuses, "seconds": time.monotonic() - start}))
"""

_MORE = re.compile(r"… and ([0-9]+) more like this")


def folded(lines: list[str]) -> int:
    """How many lines the fold lines among `lines` stand for."""
    return sum(int(found.group(1)) for line in lines if (found := _MORE.search(line)))


def settings_bytes(settings: Path) -> int:
    """Every file's size under Link's settings folder."""
    return sum(path.stat().st_size for path in settings.rglob("*") if path.is_file())
