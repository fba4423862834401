"""Shared wire pieces: error body, bounds, identifiers, safe strings and UTC timestamps."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

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
# Short names like "A100", "H100-80GB" or "RTX 4090" (the node agent's name for a GeForce):
# no leading or trailing space, nothing a log line, a shell or a query string would misread.
GPU_MODEL_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9 _.-]{0,62}[A-Za-z0-9_.-])?$"
# Stated in the schema so that clients (and the schema fuzzer) know; enforced below with a
# message that says which character and where.
PLAIN_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
MULTILINE_PATTERN = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"

# PostgreSQL text refuses NUL, and a lone surrogate cannot be encoded as UTF-8 for either
# database: both would fail at the INSERT. The other control characters have no place in a
# name or a label and would garble logs and terminals.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True)
class SchemaPattern:
    """States a pattern in the JSON schema only; a validator enforces it with a clearer error."""

    pattern: str

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema["pattern"] = self.pattern
        return schema


def _refuse(found: re.Match[str]) -> ValueError:
    return ValueError(
        f"must not contain control characters (U+{ord(found.group()):04X} at {found.start()})"
    )


def _plain(value: str) -> str:
    found = _CONTROL.search(value)
    if found is not None:
        raise _refuse(found)
    return value


def _multiline(value: str) -> str:
    found = _CONTROL_BUT_LINES.search(value)
    if found is not None:
        raise _refuse(found)
    return value


def _scrub(value: str) -> str:
    # Output captured from a process is reported, not chosen: refusing it would lose the
    # whole report, so what cannot be stored or shown safely becomes U+FFFD instead.
    return _CONTROL_BUT_LINES.sub("\ufffd", value)


# Checks (the pattern stated in the schema, the validator with a clear message) to put
# after a length bound: Annotated[str, Field(max_length=...), *PLAIN].
PLAIN = (AfterValidator(_plain), SchemaPattern(PLAIN_PATTERN))
MULTILINE = (AfterValidator(_multiline), SchemaPattern(MULTILINE_PATTERN))
SCRUB = AfterValidator(_scrub)

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN, pattern=NAME_PATTERN)]
GpuModel = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN, pattern=GPU_MODEL_PATTERN)]
ObjectId = Annotated[str, Field(min_length=1, max_length=64, pattern=ID_PATTERN)]
# A one-line, person-chosen string: labels, warm-up profile names, topology names.
Label = Annotated[str, Field(max_length=MAX_NAME_LEN), *PLAIN]
NonEmptyLabel = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN), *PLAIN]
# Text a node reports from a process or a driver: unsafe characters are replaced, not refused.
ReportedText = Annotated[str, Field(max_length=MAX_TEXT_LEN), SCRUB]

# Wide enough for any schedule (and for history). Bounding the year as written, before any
# zone offset applies, keeps every conversion inside Python's datetime range (years 1 to
# 9999), and the schema states the same bound.
FIRST_YEAR = 1970
LAST_YEAR = 2199
YEAR_PATTERN = r"^(19[7-9][0-9]|2[01][0-9]{2})-"


def _as_utc(value: datetime) -> datetime:
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ValueError(f"the year must be from {FIRST_YEAR} to {LAST_YEAR}")
    # Naive timestamps are taken as UTC: the API never guesses a local zone.
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc), SchemaPattern(YEAR_PATTERN)]


def _json_integer(value: object) -> object:
    # JSON Schema's integer admits 3.0 but not true or "3"; pydantic's lax int is the other
    # way round for the last two (and its strict int refuses 3.0).
    if isinstance(value, bool | str | bytes):
        raise ValueError("must be an integer")
    return value


_JSON_INTEGER = BeforeValidator(_json_integer)
# The integer of a request body. A check on the integer fields only: one on every field (as
# this was) cost a Python call per field, five sixths of validating a heartbeat's telemetry.
JsonInt = Annotated[int, _JSON_INTEGER]
# Not `JsonInt | None`: around the union, the field's bounds stay JSON Schema's minimum and
# maximum in the OpenAPI document (inside it, pydantic writes them as its own ge and le).
OptionalJsonInt = Annotated[int | None, _JSON_INTEGER]


class WireModel(BaseModel):
    """Base for request bodies: unknown fields are refused so typos never pass silently, and
    integer fields are `JsonInt` or `OptionalJsonInt` (checked when each class is made)."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name, field in cls.__pydantic_fields__.items():
            if field.annotation in _INTEGER_TYPES and _JSON_INTEGER not in field.metadata:
                raise TypeError(
                    f"{cls.__name__}.{name}: integer fields of request bodies are JsonInt or "
                    "OptionalJsonInt"
                    ' (a plain int takes true and "3")'
                )


_INTEGER_TYPES = (int, int | None)


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. quota_exceeded.")
    message: str = Field(description="What went wrong, for a person.")
    field: str | None = Field(default=None, description="The request field at fault, if any.")


class ErrorBody(BaseModel):
    error: ErrorDetail


def utc_from_epoch(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)
