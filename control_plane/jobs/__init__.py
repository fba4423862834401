"""Periodic jobs that keep the database true to the world (liveness, expiry, retention)."""
