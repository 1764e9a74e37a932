"""`/_link/s/<secret>/local/<port>/…`: a local model runtime on this machine's loopback,
one of [localhost] models, through the same inference filter as the relay's
(lnk_proxy.local_models). The one place the proxy reaches this machine: the port is
named by the spec, as a [localhost] port is. The log keeps `local:<port>`.

Order: the port one of the spec's, the route and the headers the filter allows, the
body read within the filter's limit and checked, then a connection to 127.0.0.1 on
that port (one request a connection, as the relay's).
"""

from __future__ import annotations

import ipaddress

import h11

from lnk_common.wire import Refused
from lnk_proxy import local_models
from lnk_proxy.upstream import open_upstream
from lnk_proxy.verb_call import Keep, VerbCall
from lnk_proxy.verbs import VerbError, split_local

__all__ = ["LocalVerb"]

_LOOPBACK = ipaddress.ip_address("127.0.0.1")


class LocalVerb:
    """The [localhost] models ports, and whether server tools are let through."""

    __slots__ = ("ports", "server_tools")

    def __init__(self, ports: frozenset[int], *, server_tools: bool) -> None:
        self.ports = ports
        self.server_tools = server_tools

    async def call(self, call: VerbCall, rest: str) -> Keep:
        authority = "-"
        try:
            port, target = split_local(rest, self.ports)
            authority = f"local:{port}"
            admitted = local_models.route(call.request.method, target)
            headers = local_models.check_headers(list(call.request.headers))
            raw = await call.body(local_models.MAX_BODY_BYTES)
            body = local_models.check_body(admitted, raw, server_tools=self.server_tools)
            upstream = await open_upstream(_LOOPBACK, port, authority)
        except (VerbError, local_models.LocalModelError) as error:
            return await call.refuse(authority, Refused(error.status, error.reason))
        except Refused as refusal:
            return await call.refuse(authority, refusal)
        fields = [(name, value) for name, value in headers
                  if name not in (b"host", b"content-type")]
        fields.insert(0, (b"host", f"localhost:{port}".encode()))
        if admitted.body != "none":
            # The body is the filter's JSON, whatever type the program named.
            fields += [(b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode())]
        fields.append((b"connection", b"close"))  # one request a connection, as the relay's
        request = h11.Request(method=admitted.method, target=admitted.target.encode(),
                              headers=fields)
        outcome = await call.exchange(authority, "local-model", upstream, request, body)
        if outcome.reusable:
            upstream.close()
        return call.next_cycle(outcome)

    def close(self) -> None:
        """Nothing is kept between calls: one request a connection."""
