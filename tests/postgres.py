"""A throwaway PostgreSQL server for the tests that need the real thing.

This module owns the whole life of one test cluster: finding the server binaries, `initdb`
into a temporary folder, starting and stopping it with `pg_ctl` on a free loopback port, the
password-bearing role the URLs carry, fresh databases, and removing every file again. It
never touches a system cluster (Debian's `main` on 5432 and /var/run/postgresql may exist or
run; this server has its own port, socket folder and data folder).

Auth: the Unix socket (in the temporary folder) trusts everyone, which is how the harness
itself creates databases; TCP on 127.0.0.1 asks for a password (scram-sha-256), so every URL
the tests get carries credentials and a wrong password is really refused.

The pytest fixtures that use this live in tests/integration/conftest.py.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

USER = "supermew"
PASSWORD = "supermew-test"
DEFAULT_DATABASE = "supermew"
#: The unprivileged account the server runs as when the tests run as root: PostgreSQL refuses
#: to run as root, and Debian's postgresql-common creates this user.
SYSTEM_USER = "postgres"
#: What a database name may be: it goes into URLs and command lines unquoted.
_DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
#: Seconds `pg_ctl -w` waits for the server to accept connections (or to stop).
_PG_CTL_TIMEOUT = 60
_LOG_TAIL_LINES = 40
#: Settings for a cluster whose data may be lost at any time: durability costs time for nothing.
_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class PostgresError(RuntimeError):
    """The test cluster could not be created, started or stopped; the message says why."""


def postgres_binaries() -> Path | None:
    """The folder holding `initdb` and `pg_ctl` (and their siblings `postgres`, `createdb`),
    or None when there is none.

    PATH first, its symlinks resolved so that the siblings come from the same installation
    (Debian's /usr/bin/psql is a version-picking wrapper, /usr/local/bin may hold links);
    else the highest version under /usr/lib/postgresql, where Debian puts them off PATH."""
    found = shutil.which("initdb")
    if found is not None:
        folder = Path(found).resolve().parent
        if _is_bin_dir(folder):
            return folder
    candidates = [Path(p) for p in glob.glob(_DEBIAN_BIN_GLOB) if _is_bin_dir(Path(p))]
    if not candidates:
        return None
    return max(candidates, key=lambda p: _version_key(p.parent.name))


def skip_reason() -> str | None:
    """One line saying why no test cluster can be started here, or None when one can."""
    if postgres_binaries() is None:
        return "PostgreSQL binaries (initdb, pg_ctl) not found: apt-get install postgresql"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root and no runuser to start PostgreSQL as another user"
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            return f"running as root and no '{SYSTEM_USER}' user to run PostgreSQL as"
    return None


class PostgresServer:
    """One throwaway cluster: `with PostgresServer() as pg: pg.url()`.

    `start()` creates the cluster on its first call and starts it again after `stop()`, with
    the same data folder and port, so a test can take the database down and bring it back.
    Leaving the `with` block (or `close()`) stops the server and removes its folder."""

    def __init__(self, binaries: Path | None = None) -> None:
        found = binaries if binaries is not None else postgres_binaries()
        if found is None:
            raise PostgresError(skip_reason() or "PostgreSQL binaries not found")
        self.binaries: Path = found
        self.port: int = 0
        self.root: Path | None = None
        #: Seconds the last start() took (creating the cluster included on the first).
        self.started_in: float = 0.0
        self._running = False
        self._initialised = False
        self._as_root = os.geteuid() == 0

    # -- paths ---------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._root() / "data"

    @property
    def socket_dir(self) -> Path:
        return self._root()

    @property
    def log_file(self) -> Path:
        return self._root() / "postgres.log"

    @property
    def running(self) -> bool:
        return self._running

    def _root(self) -> Path:
        if self.root is None:
            raise PostgresError("the server has no folder yet: call start() first")
        return self.root

    # -- URLs ----------------------------------------------------------------------------------

    def url(self, database: str = DEFAULT_DATABASE, driver: str = "postgresql+asyncpg") -> str:
        """The URL of `database` on this server as the `supermew` role (password included).
        `driver="postgresql"` gives the plain DSN asyncpg.connect and psql take."""
        if not self.port:
            raise PostgresError("the server has no port yet: call start() first")
        credentials = f"{quote(USER, safe='')}:{quote(PASSWORD, safe='')}"
        return f"{driver}://{credentials}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database owned by the `supermew` role; returns its asyncpg URL."""
        if not _DATABASE_NAME.match(name):
            raise ValueError(f"database name {name!r} must match {_DATABASE_NAME.pattern}")
        if not self._running:
            raise PostgresError("the server is stopped: start() it before creating a database")
        self._run_client("createdb", "--owner", USER, name)
        return self.url(name)

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster when there is none yet, then start it (a no-op when running)."""
        if self._running:
            return
        began = time.monotonic()
        if not self._initialised:
            self._initialise()
            self._launch(first=True)
            self._run_client("createdb", "--owner", USER, DEFAULT_DATABASE)
        else:
            self._launch(first=False)
        self.started_in = time.monotonic() - began

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are cut); the data stays."""
        if not self._running:
            return
        self._pg_ctl("stop", "-m", "fast")
        self._running = False

    def close(self) -> None:
        """Stop the server if it runs and remove its folder."""
        atexit.unregister(self.close)
        try:
            if self._running:
                try:
                    self.stop()
                except PostgresError:
                    # pg_ctl could not stop it cleanly; the folder must still go, and an
                    # immediate stop is the only thing left to try.
                    self._pg_ctl("stop", "-m", "immediate", check=False)
                    self._running = False
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _initialise(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="supermew-pg-"))
        # An interpreter that exits without close() (a test run cut short) must not leave a
        # postmaster behind holding a port and a deleted folder.
        atexit.register(self.close)
        # The server runs as `postgres` when we are root, and must own its folder; 0700 keeps
        # the password file and the socket private to it.
        self._give_to_owner(self.root)
        os.chmod(self.root, 0o700)
        password_file = self.root / "password"
        password_file.write_text(PASSWORD + "\n")
        self._give_to_owner(password_file)
        try:
            self._run_as_owner(
                "initdb",
                "--pgdata",
                str(self.data_dir),
                "--username",
                USER,
                "--pwfile",
                str(password_file),
                "--auth-local",
                "trust",
                "--auth-host",
                "scram-sha-256",
                "--encoding",
                "UTF8",
                # The C locale exists everywhere; the schema asks for C collation anyway.
                "--locale",
                "C",
                # Nothing here needs to survive a power cut: skipping fsync saves seconds.
                "--no-sync",
            )
        finally:
            password_file.unlink(missing_ok=True)
        os.chmod(self.data_dir, 0o700)
        self._initialised = True

    def _launch(self, *, first: bool) -> None:
        # A free port is only free until someone else takes it: on the first start a port
        # lost to such a race is replaced by another; a restart keeps its port (URLs handed
        # out before the stop must work after the start) and fails instead.
        attempts = 3 if first else 1
        for attempt in range(attempts):
            if first:
                self.port = _free_port()
            self._write_settings()
            try:
                self._pg_ctl("start", "--log", str(self.log_file))
            except PostgresError:
                if attempt + 1 < attempts and "could not bind" in self._log_tail():
                    continue
                raise
            self._running = True
            return

    def _write_settings(self) -> None:
        # postgresql.auto.conf is read last and rewritten whole, so a new port on a retry
        # replaces the old one, and a restart by pg_ctl alone finds the same settings.
        settings = {
            **_SETTINGS,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
        }
        lines = [f"{key} = '{value}'" for key, value in settings.items()]
        auto_conf = self.data_dir / "postgresql.auto.conf"
        auto_conf.write_text("# Written by tests/postgres.py.\n" + "\n".join(lines) + "\n")
        self._give_to_owner(auto_conf)

    def _give_to_owner(self, path: Path) -> None:
        if self._as_root:
            account = pwd.getpwnam(SYSTEM_USER)
            os.chown(path, account.pw_uid, account.pw_gid)

    def _pg_ctl(self, action: str, *args: str, check: bool = True) -> None:
        self._run_as_owner(
            "pg_ctl",
            action,
            "--pgdata",
            str(self.data_dir),
            "--wait",
            "--timeout",
            str(_PG_CTL_TIMEOUT),
            *args,
            check=check,
        )

    def _run_as_owner(self, name: str, *args: str, check: bool = True) -> None:
        """Run one of the cluster's binaries as the account that owns the cluster: the server
        refuses root, and the socket folder is open to its owner alone."""
        command = [str(self.binaries / name), *args]
        if self._as_root:
            command = ["runuser", "-u", SYSTEM_USER, "--", *command]
        self._execute(command, check=check)

    def _run_client(self, name: str, *args: str) -> None:
        """Run a client binary (createdb) over the private Unix socket, where auth is trust."""
        self._run_as_owner(
            name,
            "--host",
            str(self.socket_dir),
            "--port",
            str(self.port),
            "--username",
            USER,
            "--no-password",
            *args,
        )

    def _execute(self, command: list[str], *, check: bool) -> None:
        # The caller's PG* variables (PGHOST, PGDATA, PGPASSWORD…) must not steer a throwaway
        # cluster; the working folder is ours because `postgres` may not enter the caller's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        try:
            done = subprocess.run(
                command,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_PG_CTL_TIMEOUT + 30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PostgresError(self._failure(command, "timed out", str(exc.output or ""))) from exc
        if check and done.returncode != 0:
            output = (done.stdout + done.stderr).strip()
            raise PostgresError(self._failure(command, f"exit {done.returncode}", output))

    def _failure(self, command: list[str], what: str, output: str) -> str:
        return (
            f"PostgreSQL test cluster: `{' '.join(command)}` failed ({what})\n"
            f"--- output ---\n{output}\n"
            f"--- server log (last {_LOG_TAIL_LINES} lines) ---\n{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        if self.root is None or not self.log_file.exists():
            return "(no server log)"
        lines = self.log_file.read_text(errors="replace").splitlines()
        return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(empty server log)"


def _is_bin_dir(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def _version_key(version: str) -> tuple[int, ...]:
    # "15" < "9.6" as text; as numbers 9.6 < 15. Names that are no version sort lowest.
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (-1,)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
