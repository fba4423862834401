"""The service-test fixtures (the app on both databases), shared with the security tests."""

from tests.control_plane.conftest import api, settings  # noqa: F401
