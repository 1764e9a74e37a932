"""lnk-sandbox-mcp-remote: a stdio MCP server of ours that relays to a remote MCP server
over Streamable HTTP (both the 2025-11-25 revision with sessions and the stateless
2026-07-28 one, as the client speaks).

    lnk-sandbox-mcp-remote URL [--header "Name: value"]…

It is a tool's command (`lnk-sandbox tool add far --secret FAR_TOKEN -- lnk-sandbox-mcp-remote
URL --header 'Authorization: Bearer ${FAR_TOKEN}'`), run outside any sandbox, straight to
the network: it is the person's tool. `https://` (TLS verified against the system's CAs,
SSL_CERT_FILE honoured), or `http://` to this machine's loopback only; anything else is
refused before a connection is made, one line on stderr, exit 2 (and `tool add` refuses
such a definition at once). `${VAR}` in a header's value is filled from the environment
for a VAR that LNK_TOOL_SECRETS names (the tool's own secrets, which the proxy gives it in
the environment), so a token stays out of argv (where the same user sees it in /proc).
"""

from __future__ import annotations

import os
import sys

from lnk_mcpremote._arguments import ArgumentError, parse_arguments
from lnk_mcpremote._relay import serve

__all__ = ["main"]

_USAGE = 'usage: lnk-sandbox-mcp-remote URL [--header "Name: value"]…'


def main(argv: list[str] | None = None) -> None:
    words = sys.argv[1:] if argv is None else argv
    if not words or words[0] in ("-h", "--help"):
        sys.stderr.write(_USAGE + "\n")
        sys.exit(0 if words else 2)
    try:
        arguments = parse_arguments(words, os.environ)
    except ArgumentError as error:
        sys.stderr.write(f"lnk-sandbox-mcp-remote: {error}\n")
        sys.exit(2)
    serve(arguments)


if __name__ == "__main__":
    main()
