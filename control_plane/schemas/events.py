"""The events feed: every state transition with its time and reason."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class Event(BaseModel):
    id: int
    at: datetime
    kind: str
    object_id: str
    tenant_id: str | None
    from_state: str | None
    to_state: str
    reason: str | None
