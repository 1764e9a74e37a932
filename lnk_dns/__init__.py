"""The DNS that a sandbox sees: a sans-IO core (DNS's message format in message, policy in
answer)."""
