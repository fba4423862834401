"""The service-test fixtures (the app on SQLite and PostgreSQL) for the security tests."""

from tests.control_plane.conftest import api, settings

__all__ = ["api", "settings"]
