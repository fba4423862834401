"""Persistence: SQLModel tables, engines for SQLite and PostgreSQL, locking and migrations."""
