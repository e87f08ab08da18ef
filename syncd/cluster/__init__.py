"""Replication between syncd nodes on one PostgreSQL database (see replicator.py)."""
