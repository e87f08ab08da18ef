"""syncd: a self-hosted CRDT sync service."""

__version__ = "0.1.0"
