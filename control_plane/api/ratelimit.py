"""Per-key request rate limits (tenant, node, anonymous by IP) on the core's token bucket."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.errors import error_response
from control_plane.config import ServerSettings
from control_plane.scheduling.fairshare import BucketState, TokenBucket
from control_plane.schemas.enums import Scope as KeyScope
from control_plane.services.auth import Principal
from control_plane.services.errors import ServiceError

# Past this many tracked keys, keys whose bucket has refilled are forgotten (a full bucket is
# the same as no entry), so that many one-off clients cannot grow the table without bound.
PRUNE_AT = 10_000


class RateLimited(ServiceError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        # Whole seconds, at least 1: what Retry-After can say.
        self.headers = {"Retry-After": str(max(1, math.ceil(retry_after_s)))}


@dataclass(frozen=True)
class RateLimits:
    tenant: TokenBucket
    node: TokenBucket
    anonymous: TokenBucket

    @classmethod
    def from_settings(cls, s: ServerSettings) -> RateLimits:
        return cls(
            tenant=TokenBucket(s.tenant_rate_per_s, s.tenant_burst),
            node=TokenBucket(s.node_rate_per_s, s.node_burst),
            anonymous=TokenBucket(s.anonymous_rate_per_s, s.anonymous_burst),
        )


class RateLimiter:
    """Buckets by key, in this process's memory. Runs on the event loop only (no lock).

    Several replicas each keep their own buckets, so a client spreading its requests over
    N replicas gets up to N times the rate: the limit protects each replica.
    """

    def __init__(self, limits: RateLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._states: dict[tuple[str, str], BucketState] = {}

    def _take(self, kind: str, key: str, bucket: TokenBucket) -> float | None:
        """Spend one token; None if allowed, else the seconds until one is there."""
        now = self.clock()
        if len(self._states) > PRUNE_AT:
            self._prune(now)
        admission = bucket.take(self._states.get((kind, key)), now)
        self._states[(kind, key)] = admission.state
        return None if admission.allowed else admission.retry_after_s

    def _prune(self, now: float) -> None:
        buckets = {"tenant": self.limits.tenant, "node": self.limits.node}
        for (kind, key), state in list(self._states.items()):
            bucket = buckets.get(kind, self.limits.anonymous)
            if state.tokens + (now - state.updated_at) * bucket.rate_per_s >= bucket.burst:
                del self._states[(kind, key)]

    def charge(self, who: Principal) -> None:
        """One request by an authenticated caller; raises RateLimited when over its rate."""
        if who.scope == KeyScope.ADMIN:
            return  # the operator is never locked out of their own server
        if who.scope == KeyScope.TENANT:
            # By tenant, not by key: more keys do not buy a tenant more requests.
            kind, key, bucket = "tenant", who.tenant_id or who.key_id, self.limits.tenant
        else:
            kind, key, bucket = who.scope.value, who.key_id, self.limits.node
        wait = self._take(kind, str(key), bucket)
        if wait is not None:
            raise RateLimited(
                f"more than {bucket.rate_per_s:g} requests/s (burst {bucket.burst:g}) for "
                f"this {kind}; retry after the Retry-After header's seconds",
                retry_after_s=wait,
            )

    def charge_anonymous(self, ip: str) -> float | None:
        """One request without valid credentials from `ip`; the wait if over the rate."""
        return self._take("ip", ip, self.limits.anonymous)

    def anonymous_refusal(self, wait: float) -> RateLimited:
        bucket = self.limits.anonymous
        return RateLimited(
            f"more than {bucket.rate_per_s:g} requests/s (burst {bucket.burst:g}) without "
            "valid credentials from this address",
            retry_after_s=wait,
        )


class AnonymousRateLimit:
    """Requests with no Authorization header count against their client IP's bucket."""

    def __init__(self, app: ASGIApp, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not any(
            name == b"authorization" for name, _ in scope.get("headers") or ()
        ):
            client = scope.get("client")
            wait = self.limiter.charge_anonymous(client[0] if client else "unknown")
            if wait is not None:
                refusal = self.limiter.anonymous_refusal(wait)
                response = error_response(
                    429, refusal.code, refusal.message, headers=refusal.headers
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
