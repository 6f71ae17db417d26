"""What every layer shares: times, the campaign folder's layout, text and subprocess helpers. Imports nothing else of cockpit."""
