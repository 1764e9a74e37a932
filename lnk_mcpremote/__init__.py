"""lnk-sandbox-mcp-remote: a stdio MCP server that relays to a remote MCP server over
Streamable HTTP (lnk_mcpremote.main says how it is run; docs/decisions/0027-mcp-remote.md why)."""

from lnk_mcpremote._arguments import (
    MAX_HEADER_VALUE_BYTES,
    MAX_HEADERS,
    TOOL_SECRETS_VARIABLE,
    ArgumentError,
    Arguments,
    Target,
    keep_literal_values_out,
    parse_arguments,
    parse_target,
)
from lnk_mcpremote._protocol import MAX_MESSAGE_BYTES, SseReader, routing_headers
from lnk_mcpremote._relay import Relay

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_VALUE_BYTES",
    "MAX_MESSAGE_BYTES",
    "TOOL_SECRETS_VARIABLE",
    "ArgumentError",
    "Arguments",
    "Relay",
    "SseReader",
    "Target",
    "keep_literal_values_out",
    "parse_arguments",
    "parse_target",
    "routing_headers",
]
