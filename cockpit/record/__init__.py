"""The record: the append-only run log, the start of a campaign and the decisions recorded in it."""
