"""A sandbox with DNS gets its own resolv.conf and hosts, read only.

resolv.conf names 127.0.0.1, where the proxy answers (lnk_dns.helper made the sockets).
No search domain: a single-label name is asked as it is, not with this machine's
domains appended (each would be one more query, and a name of the machine's network).

hosts names only localhost: this machine's /etc/hosts maps names to addresses of its
networks (and test and development names to anything), which would answer a lookup
inside before DNS is asked, with an address the sandbox cannot reach, and tell the
program what the sandbox was not given.

Each file is handed to bubblewrap as a pipe (--ro-bind-data), at the path the system's
file really is (/etc/resolv.conf is often a link into /run, which a sandbox does not
see: bubblewrap then makes that path in the sandbox's own root).

A sandbox of the proxy's network without DNS of its own (no endpoint, no [lan] name)
gets only a resolv.conf naming 127.0.0.1, at the same path, bound read only from a file
of this package (lnk_wrap/resolv.conf, bound by lnk_wrap.launch._later_files, which
does not import this module: one bind, no pipe): nothing listens on
127.0.0.1:53, so a lookup is refused at once by the kernel, as the machine's resolver,
unreachable from the sandbox's network, was; once `lnk-sandbox allow --tcp` adds an
endpoint, its proxy serves DNS there (lnk_proxy.dns_server.DnsOnAddition). Its hosts
stays the machine's, as it was (the machine's own name is looked up there by programs
that ask for it): a name that file lists is answered from it, never asked of the DNS.
"""

from __future__ import annotations

import os

__all__ = ["HOSTS", "RESOLV_CONF", "data_files"]

RESOLV_CONF = b"# lnk-sandbox: the proxy answers DNS here, for this sandbox's endpoints only\n" \
              b"nameserver 127.0.0.1\noptions edns0\n"
HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _pipe_holding(data: bytes) -> int:
    """A pipe's read end that holds `data` (small: it fits the pipe's buffer)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


def data_files() -> tuple[tuple[int, str], ...]:
    found: list[tuple[int, str]] = []
    for path, data in (("/etc/resolv.conf", RESOLV_CONF), ("/etc/hosts", HOSTS)):
        if not os.path.lexists(path):
            continue  # glibc asks 127.0.0.1 when there is no resolv.conf; no hosts: none
        found.append((_pipe_holding(data), os.path.realpath(path)))
    return tuple(found)

