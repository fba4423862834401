"""Shared wire pieces: error body, bounds, identifiers and UTC timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

# Bounds keep every integer far inside a 32-bit column and every string inside its column,
# so that no input can surface as a database overflow (a 500) instead of a 422.
MAX_GPUS_PER_REQUEST = 4096
MAX_LEASE_S = 30 * 86400
MAX_TTL_S = 7 * 86400
MAX_LEAD_S = 86400
MAX_NAME_LEN = 64
MAX_TEXT_LEN = 4096
MAX_GPUS_PER_NODE = 64
MAX_QUOTA_GPUS = 1_000_000

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
ID_PATTERN = r"^[a-z]+_[0-9a-f]{16}$"

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN, pattern=NAME_PATTERN)]
GpuModel = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN)]
ObjectId = Annotated[str, Field(min_length=1, max_length=64)]


def _as_utc(value: datetime) -> datetime:
    # Naive timestamps are taken as UTC: the API never guesses a local zone.
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]


class WireModel(BaseModel):
    """Base for request bodies: unknown fields are refused so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _json_integers(cls, value: object, info: ValidationInfo) -> object:
        # JSON Schema's integer admits 3.0 but not true or "3"; pydantic's lax int is the
        # other way round for the last two (and its strict int refuses 3.0).
        field = cls.model_fields.get(info.field_name or "")
        if (
            field is not None
            and field.annotation in _INTEGER_TYPES
            and isinstance(value, bool | str | bytes)
        ):
            raise ValueError("must be an integer")
        return value


_INTEGER_TYPES = (int, int | None)


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. quota_exceeded.")
    message: str = Field(description="What went wrong, for a person.")
    field: str | None = Field(default=None, description="The request field at fault, if any.")


class ErrorBody(BaseModel):
    error: ErrorDetail


def utc_from_epoch(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)
