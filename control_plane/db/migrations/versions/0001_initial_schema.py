"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 07:23:03.305696
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_epoch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # The single epoch row every placement transaction reads and bumps.
    op.bulk_insert(
        sa.table(
            "cluster_epoch", sa.column("id", sa.Integer()), sa.column("value", sa.BigInteger())
        ),
        [{"id": 1, "value": 0}],
    )
    op.create_table(
        "event",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("object_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("from_state", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("to_state", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_event_at"), ["at"], unique=False)
        batch_op.create_index("ix_event_object", ["object_id"], unique=False)

    op.create_table(
        "idempotency",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("principal", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("request_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("principal", "key", name="uq_idempotency_principal_key"),
    )
    with op.batch_alter_table("idempotency", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_idempotency_created_at"), ["created_at"], unique=False)

    op.create_table(
        "lease",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("holder", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "node",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("spine", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("leaf", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=False),
        sa.Column("last_heartbeat_at", sa.Float(), nullable=True),
        sa.Column("agent_version", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("telemetry_json", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "tenant",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("quota_gpus", sa.Integer(), nullable=False),
        sa.Column("burst_gpus", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("max_held_gpus", sa.Integer(), nullable=False),
        sa.Column("max_idle_gpu_hours_per_day", sa.Float(), nullable=False),
        sa.Column("max_hold_ttl_s", sa.Integer(), nullable=False),
        sa.Column("allowed_warmups", sa.Text(), nullable=True),
        sa.Column("holds_may_preempt_holds", sa.Boolean(), nullable=False),
        sa.Column("usage_gpu_s", sa.Float(), nullable=False),
        sa.Column("usage_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "allocation",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("hold_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("warm", sa.Boolean(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("allocated_at", sa.Float(), nullable=True),
        sa.Column("ready_at", sa.Float(), nullable=True),
        sa.Column("released_at", sa.Float(), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("lease_s", sa.Integer(), nullable=True),
        sa.Column("strategy", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("job_class", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("label", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("warmup", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("command_json", sa.Text(), nullable=True),
        sa.Column("task_status", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("output_tail", sa.Text(), nullable=True),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("preempted_json", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenant.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("allocation", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_allocation_status"), ["status"], unique=False)
        batch_op.create_index(
            "ix_allocation_tenant_requested", ["tenant_id", "requested_at"], unique=False
        )
        batch_op.create_index("ix_allocation_tenant_status", ["tenant_id", "status"], unique=False)

    op.create_table(
        "api_key",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("key_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("prefix", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("scope", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("label", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenant.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_hash"),
    )
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_key_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "gpu",
        sa.Column("uuid", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=True),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("health_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
        ),
        sa.PrimaryKeyConstraint("uuid"),
    )
    with op.batch_alter_table("gpu", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_node_id"), ["node_id"], unique=False)

    op.create_table(
        "hold",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("start_at", sa.Float(), nullable=False),
        sa.Column("ttl_s", sa.Integer(), nullable=False),
        sa.Column("lead_s", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("warmup", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("strategy", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("label", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("placed_at", sa.Float(), nullable=True),
        sa.Column("ready_at", sa.Float(), nullable=True),
        sa.Column("warmup_s", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("allocation_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("idle_gpu_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenant.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("hold", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_hold_status"), ["status"], unique=False)
        batch_op.create_index("ix_hold_tenant_created", ["tenant_id", "created_at"], unique=False)
        batch_op.create_index("ix_hold_tenant_status", ["tenant_id", "status"], unique=False)

    op.create_table(
        "assignment",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("gpu_uuid", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("hold_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("allocation_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["gpu_uuid"],
            ["gpu.uuid"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("assignment", schema=None) as batch_op:
        batch_op.create_index("ix_assignment_allocation", ["allocation_id"], unique=False)
        batch_op.create_index("ix_assignment_hold", ["hold_id"], unique=False)
        batch_op.create_index("ix_assignment_node_active", ["node_id", "ended_at"], unique=False)
        batch_op.create_index(
            "ux_assignment_active_gpu",
            ["gpu_uuid"],
            unique=True,
            sqlite_where=sa.text("ended_at IS NULL"),
            postgresql_where=sa.text("ended_at IS NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("assignment", schema=None) as batch_op:
        batch_op.drop_index(
            "ux_assignment_active_gpu",
            sqlite_where=sa.text("ended_at IS NULL"),
            postgresql_where=sa.text("ended_at IS NULL"),
        )
        batch_op.drop_index("ix_assignment_node_active")
        batch_op.drop_index("ix_assignment_hold")
        batch_op.drop_index("ix_assignment_allocation")

    op.drop_table("assignment")
    with op.batch_alter_table("hold", schema=None) as batch_op:
        batch_op.drop_index("ix_hold_tenant_status")
        batch_op.drop_index("ix_hold_tenant_created")
        batch_op.drop_index(batch_op.f("ix_hold_status"))

    op.drop_table("hold")
    with op.batch_alter_table("gpu", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_node_id"))

    op.drop_table("gpu")
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_key_tenant_id"))

    op.drop_table("api_key")
    with op.batch_alter_table("allocation", schema=None) as batch_op:
        batch_op.drop_index("ix_allocation_tenant_status")
        batch_op.drop_index("ix_allocation_tenant_requested")
        batch_op.drop_index(batch_op.f("ix_allocation_status"))

    op.drop_table("allocation")
    op.drop_table("tenant")
    op.drop_table("node")
    op.drop_table("lease")
    with op.batch_alter_table("idempotency", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_created_at"))

    op.drop_table("idempotency")
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.drop_index("ix_event_object")
        batch_op.drop_index(batch_op.f("ix_event_at"))

    op.drop_table("event")
    op.drop_table("cluster_epoch")
