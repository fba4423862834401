"""node drain requested by an administrator

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Set by POST /v1/nodes/{id}/drain: the node stays draining whatever its heartbeats say.
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.add_column(sa.Column("drain_requested_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.drop_column("drain_requested_at")
