"""Campaign cockpit: watch a training campaign on a GPU box rented as a fixed-price lot."""

__version__ = "0.1.0"
