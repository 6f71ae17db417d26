"""Several lots in one cockpit: the other lots' `/snapshot.json`, fetched over their tunnels,
kept with their age when a lot stops answering, and a summary across the lots. Read-only: a
lot's decisions are recorded on the box that owns its run log."""
