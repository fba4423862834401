"""Requests that can never be placed (unknown model, more GPUs than exist) are refused at once."""

from __future__ import annotations

from sqlalchemy import func
from sqlmodel import Session, col, select

from control_plane.db.models import GpuRow, NodeRow
from control_plane.services.errors import Conflict


def inventory(session: Session) -> dict[str, int]:
    """GPUs the cluster has, by model, on every known node whatever its state.

    Offline nodes and unhealthy GPUs count: they may come back, so a request that fits them
    is worth queueing. Only GPUs gone from their node's registration are left out.
    """
    rows = session.exec(
        select(GpuRow.model, func.count())
        .join(NodeRow, col(NodeRow.id) == col(GpuRow.node_id))
        .where(col(GpuRow.present).is_(True))
        .group_by(GpuRow.model)
    ).all()
    return {model: int(count) for model, count in rows}


def check(session: Session, *, gpu_count: int, gpu_model: str | None) -> None:
    """Raise 409 naming the field when the cluster as it is could never satisfy the request.

    409, not 422: the request is well formed; it conflicts with what the cluster has.

    A cluster with no node yet refuses nothing: its nodes may still be starting.
    """
    models = inventory(session)
    if not models:
        return
    if gpu_model is not None and gpu_model not in models:
        known = ", ".join(sorted(models))
        raise Conflict(
            f"no GPU of model {gpu_model!r} in the cluster (models: {known})",
            code="unplaceable",
            field="gpu_model",
        )
    have = models[gpu_model] if gpu_model is not None else sum(models.values())
    if gpu_count > have:
        what = f"{gpu_model} GPUs" if gpu_model is not None else "GPUs"
        raise Conflict(
            f"{gpu_count} GPUs requested but the cluster has {have} {what} in all",
            code="unplaceable",
            field="gpu_count",
        )


def waiting_reason(session: Session, *, gpu_count: int, gpu_model: str | None) -> str:
    """Why a request that could fit the cluster waits now, in words for `alloc show`."""
    models = inventory(session)
    if not models:
        return "queued: no GPU node has registered yet"
    have = models.get(gpu_model, 0) if gpu_model is not None else sum(models.values())
    what = f"{gpu_model} GPUs" if gpu_model is not None else "GPUs"
    return f"queued: {gpu_count} {what} not free now (the cluster has {have} in all)"
