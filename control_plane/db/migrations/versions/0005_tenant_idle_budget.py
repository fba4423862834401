"""tenant idle budget (idle over busy GPU time, beyond reactive)

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-27 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: no budget set (as before).
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idle_budget", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("idle_budget")
