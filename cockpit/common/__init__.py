"""What every layer shares: times, the campaign folder's layout, whole-file and whole-line writes, text and subprocess helpers. Imports nothing else of cockpit."""
