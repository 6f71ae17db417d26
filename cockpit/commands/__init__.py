"""One module a command group: each turns parsed arguments into calls on the core and prints."""
