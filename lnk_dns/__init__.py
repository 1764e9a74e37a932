"""The DNS that a sandbox sees: a sans-IO core (wire format in message, policy in answer)."""
