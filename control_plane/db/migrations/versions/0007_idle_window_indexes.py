"""a tenant's holds and allocations by end time, for the idle budget's window

The idle budget's check read every hold and allocation of the tenant that ended within the
window (or runs still) into objects, on every new hold: a tenant that ran 100,000 jobs in a
day made each of its holds take seconds, inside the writer's batch. The check now sums in SQL
over these two indexes, which find exactly the rows of the window.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 06:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_hold_tenant_ended", "hold", ["tenant_id", "ended_at"])
    op.create_index("ix_allocation_tenant_released", "allocation", ["tenant_id", "released_at"])


def downgrade() -> None:
    op.drop_index("ix_allocation_tenant_released", table_name="allocation")
    op.drop_index("ix_hold_tenant_ended", table_name="hold")
