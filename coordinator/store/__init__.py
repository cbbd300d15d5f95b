"""Persistence: the JobStore contract (api.py) and its in-memory and SQLite implementations."""
