"""lnk-sandbox-relay: this machine's loopback ports, relayed into a sandbox."""
