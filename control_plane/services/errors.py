"""Domain errors of the use cases; the API maps each to an HTTP status and a JSON error body."""

from __future__ import annotations


class ServiceError(Exception):
    """A refusal the client can act on: a stable code, a message and maybe the field at fault."""

    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class Unauthenticated(ServiceError):
    status_code = 401
    code = "unauthenticated"


class Forbidden(ServiceError):
    status_code = 403
    code = "forbidden"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


class Conflict(ServiceError):
    status_code = 409
    code = "conflict"


class Invalid(ServiceError):
    status_code = 422
    code = "invalid_request"


class QuotaExceeded(ServiceError):
    status_code = 429
    code = "quota_exceeded"


class QueueFull(QuotaExceeded):
    """The tenant's queue of waiting requests is at its configured limit."""

    code = "queue_full"


class Unavailable(ServiceError):
    status_code = 503
    code = "unavailable"
