"""ruizn: a small, exact agent core for Claude."""

__version__ = "0.1.0"
