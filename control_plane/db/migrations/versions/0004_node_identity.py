"""node identity: credentials bound to a node, enrolment tokens, rotation requests

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Node tokens minted before this revision keep node_id NULL: they are no longer accepted
    # on node routes, only to enrol a node that has no credential yet (the upgrade path).
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch_op.create_index(batch_op.f("ix_api_key_node_id"), ["node_id"], unique=False)
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rotate_requested_at", sa.Float(), nullable=True))
    op.create_table(
        "enrol_token",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("token_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("prefix", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node_name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("label", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("single_use", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )


def downgrade() -> None:
    op.drop_table("enrol_token")
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.drop_column("rotate_requested_at")
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_key_node_id"))
        batch_op.drop_column("node_id")
