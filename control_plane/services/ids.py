"""Object identifiers: a type prefix and 64 random bits, made without a database round trip."""

from __future__ import annotations

import secrets

PREFIXES = ("tnt", "key", "node", "alloc", "hold")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"
