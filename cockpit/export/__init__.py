"""The cockpit in the standard format: Prometheus metrics and `/snapshot.json` from the latest
snapshot the engine produced (a scrape reads it, never runs a tick)."""
