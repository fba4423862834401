"""the queue's head by index: (tenant, status, requested_at, id) replaces (tenant, status)

Reading a tenant's oldest waiting requests went through (tenant, requested_at) and skipped
every finished request before them: a task's end, which reads the head, grew slower with every
job the tenant ever ran. The new index finds the head directly and, as its prefix, serves
every query (tenant, status) served.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 18:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_allocation_queue", "allocation", ["tenant_id", "status", "requested_at", "id"]
    )
    op.drop_index("ix_allocation_tenant_status", table_name="allocation")


def downgrade() -> None:
    op.create_index("ix_allocation_tenant_status", "allocation", ["tenant_id", "status"])
    op.drop_index("ix_allocation_queue", table_name="allocation")
