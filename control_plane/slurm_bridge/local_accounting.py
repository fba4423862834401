"""Accounting for the throwaway Slurm cluster: a private MariaDB and slurmdbd on loopback.

The database is made by `mariadb-install-db` inside the cluster's temporary folder and served
by its own `mariadbd` (a socket in that folder and a free loopback port, never the system's
/run/mysqld or port 3306); slurmdbd reaches it over TCP as a user with a random password.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from control_plane.slurm_bridge.local_files import Layout, SlurmUnavailable, find_binary

ACCOUNTING_BINARIES = ("mariadbd", "mariadb-install-db", "slurmdbd", "sacct", "sacctmgr")
INSTALL_HINT = "Debian: apt-get install slurmdbd mariadb-server"
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
ACCOUNT = "jitgpu"
# Small and unsafe on a crash: the database lives as long as one test.
INNODB = (
    "--innodb-log-file-size=4M",
    "--innodb-buffer-pool-size=16M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
)


def missing_accounting_binaries() -> list[str]:
    return [b for b in ACCOUNTING_BINARIES if find_binary(b) is None]


def db_dir(layout: Layout) -> Path:
    return layout.root / "mariadb"


def db_log(layout: Layout) -> Path:
    return layout.log("mariadbd")


def install_db(layout: Layout) -> None:
    """An empty MariaDB data folder, and the SQL that gives slurmdbd its user at each start."""
    installer = find_binary("mariadb-install-db")
    assert installer is not None
    done = subprocess.run(
        [
            installer,
            "--no-defaults",
            f"--datadir={db_dir(layout)}",
            "--user=root",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            "--skip-name-resolve",
            *INNODB,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise SlurmUnavailable(
            f"mariadb-install-db failed ({done.returncode}): {done.stdout[-1500:]}"
            f"{done.stderr[-1500:]}"
        )
    init = layout.root / "mariadb-init.sql"
    user = f"'{DB_USER}'@'127.0.0.1'"
    init.write_text(
        f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{layout.db_password}';\n"
        f"GRANT ALL ON {DB_NAME}.* TO {user};\n"
    )
    init.chmod(0o600)


def mariadbd_args(layout: Layout) -> list[str]:
    return [
        "--no-defaults",
        f"--datadir={db_dir(layout)}",
        "--user=root",
        "--bind-address=127.0.0.1",
        f"--port={layout.db_port}",
        f"--socket={layout.root / 'mariadb.sock'}",
        f"--pid-file={layout.pidfile('mariadbd')}",
        f"--log-error={db_log(layout)}",
        f"--init-file={layout.root / 'mariadb-init.sql'}",
        "--skip-name-resolve",
        "--skip-log-bin",
        *INNODB,
    ]


def db_ready(layout: Layout) -> bool:
    # Written once the init file has run and the port listens.
    log = db_log(layout)
    return log.exists() and "ready for connections" in log.read_text(errors="replace")


def write_dbd_conf(layout: Layout, host: str) -> None:
    """slurmdbd reads slurmdbd.conf from slurm.conf's folder; it must be 0600, its user's."""
    conf = layout.dbd_conf
    conf.write_text(
        f"""\
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
DbdHost={host}
DbdAddr=127.0.0.1
DbdPort={layout.dbd_port}
SlurmUser=root
PidFile={layout.pidfile("slurmdbd")}
LogFile={layout.log("slurmdbd")}
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={layout.db_port}
StorageUser={DB_USER}
StoragePass={layout.db_password}
StorageLoc={DB_NAME}
"""
    )
    conf.chmod(0o600)


def register(layout: Layout, env: dict[str, str], users: tuple[str, ...]) -> None:
    """The cluster, one account and its users in the database (before slurmctld starts, so
    that it finds its cluster registered); one sacctmgr reading the commands (each run of
    it costs a connection and a commit)."""
    sacctmgr = find_binary("sacctmgr")
    assert sacctmgr is not None
    commands = (
        "add cluster jitgpu\n"
        f"add account {ACCOUNT} Cluster=jitgpu Description=tests\n"
        f"add user {','.join(users)} DefaultAccount={ACCOUNT}\n"
    )
    done = subprocess.run(
        [sacctmgr, "-i"],
        input=commands,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=layout.root,
    )
    if done.returncode != 0 or "error" in done.stderr.lower():
        raise SlurmUnavailable(f"sacctmgr failed ({done.returncode}): {done.stderr[-1500:]}")
