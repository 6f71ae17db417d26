"""The training side: what runs inside a training loop to write its metrics stream. Imports nothing else of cockpit."""
