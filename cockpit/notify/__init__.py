"""Notifications off the box (apprise channels, exactly once through the run log) and the heartbeat."""
