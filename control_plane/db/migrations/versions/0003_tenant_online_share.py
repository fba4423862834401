"""tenant online/batch split of the guaranteed quota

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Share of quota_gpus guaranteed to online allocations; NULL: no split (as before).
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("online_share", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("online_share")
