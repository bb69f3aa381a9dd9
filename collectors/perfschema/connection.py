"""A SQL connection to the probed server: its unix socket found from the
PID unless given, credentials from --defaults-file, ~/.my.cnf or
--user/--password-file. A password is never printed or written."""

from __future__ import annotations

from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from configparser import ConfigParser

from typing import Any

import os
from pathlib import Path

from dataclasses import dataclass
from mysqlprobe.errors import InputFileError
from mysqlprobe.files import SECRET_FILE_LIMIT, read_bounded, read_bounded_text

LISTENING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix flags


class _Driver:
    """The pymysql module, imported at its first use: the Performance
    Schema's setup thread does that, beside the BPF loads, instead of every
    start paying its 0.02-0.03 s (ssl, decimal, configparser) before them.
    The import system's own lock makes a first use from two threads safe."""

    def __getattr__(self, name: str) -> Any:
        import pymysql
        return getattr(pymysql, name)


# used as the module: pymysql.connect(...), except pymysql.err.MySQLError
pymysql = _Driver()
# a PyMySQL connection (PyMySQL ships no types: mypy sees Any)
Connection = Any


@dataclass
class ConnectOptions:
    """How to reach the server's SQL interface: as given on the command line, None where not."""

    socket: str | None = None
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password_file: str | None = None
    defaults_file: str | None = None


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir() if fd_dir.exists() else []:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def listening_sockets(pid: int) -> list[str]:
    """Unix socket paths the process listens on, reachable from here
    (through /proc/PID/root when it runs in another mount namespace)."""
    inodes = _socket_inodes(pid)
    out = []
    try:
        lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) < 8 or not parts[7].startswith("/"):
            continue
        if int(parts[6]) in inodes and int(parts[3], 16) & LISTENING:
            path = parts[7]
            here = path if os.path.exists(path) else f"/proc/{pid}/root{path}"
            out.append(here)
    return out


def listening_ports(pid: int) -> list[int]:
    inodes = _socket_inodes(pid)
    ports = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[9]) in inodes:  # LISTEN
                ports.append(int(parts[1].rsplit(":", 1)[1], 16))
    return sorted(set(ports))


def check_files(opts: ConnectOptions) -> str | None:
    """Why the option files the user named cannot be used, or None: asked
    for by name, they are checked before anything is attached."""
    for flag, path in (("--password-file", opts.password_file), ("--defaults-file", opts.defaults_file)):
        if not path:
            continue
        try:
            text = read_bounded_text(path, SECRET_FILE_LIMIT, flag)  # a FIFO or device: InputFileError
        except OSError as e:
            return f"{flag} {path}: {e.strerror}"
        except UnicodeDecodeError:
            return f"{flag} {path}: not a text file"
        if flag == "--defaults-file":
            try:
                _parser().read_string(text)
            except _config_error() as e:
                return f"{flag} {path}: not a MySQL option file ({str(e).splitlines()[0]})"
    return None


# configparser is imported where an option file is read: most starts have none
def _parser() -> ConfigParser:
    import configparser

    return configparser.ConfigParser(allow_no_value=True, strict=False, interpolation=None)


def _config_error() -> type[Exception]:
    import configparser

    return configparser.Error


def option_file(path: str) -> dict[str, str]:
    """[client] and [mysql] options of a MySQL option file (later groups win)."""
    parser = _parser()
    try:
        parser.read_string(read_bounded(path, SECRET_FILE_LIMIT, "--defaults-file").decode(errors="replace"))
    except (OSError, InputFileError, _config_error()):
        return {}
    out: dict[str, str] = {}
    for group in ("client", "mysql"):
        if parser.has_section(group):
            out.update({k.replace("-", "_"): (v or "").strip().strip("'\"") for k, v in parser.items(group)})
    return out


# a server that stops answering (hung, or SIGSTOPped) must not hold the run: the
# slowest query mysqlprobe makes (the window's P_S history) takes well under a second
ANSWER_TIMEOUT_S = 15


def resolve(pid: int, opts: ConnectOptions) -> dict[str, Any]:
    """pymysql.connect() arguments, and where each came from (no password)."""
    files = [opts.defaults_file] if opts.defaults_file else [os.path.expanduser("~/.my.cnf")]
    conf: dict[str, str] = {}
    for f in files:
        if f and os.path.isfile(f):
            conf.update(option_file(f))
    args: dict[str, Any] = {"user": opts.user or conf.get("user") or "root", "connect_timeout": 5, "autocommit": True,
                  "read_timeout": ANSWER_TIMEOUT_S, "write_timeout": ANSWER_TIMEOUT_S}
    if opts.password_file:
        args["password"] = read_bounded_text(opts.password_file, SECRET_FILE_LIMIT, "--password-file").rstrip("\n")
    elif "password" in conf:
        args["password"] = conf["password"]
    if opts.host or opts.port:
        args["host"] = opts.host or "127.0.0.1"
        args["port"] = opts.port or 3306
    elif opts.socket or conf.get("socket"):
        args["unix_socket"] = opts.socket or conf["socket"]
    else:
        found = listening_sockets(pid)
        if found:
            args["unix_socket"] = found[0]
        else:
            ports = listening_ports(pid)
            if ports:
                args["host"], args["port"] = "127.0.0.1", ports[0]
    if "unix_socket" in args:
        # TLS adds nothing on a local socket (the server counts it secure), and
        # PyMySQL's default, TLS where the server offers it, builds an SSL
        # context for every connection: 40 ms of loading CA certificates each
        args["ssl_disabled"] = True
    return args


def describe(args: dict[str, Any]) -> str:
    where = args.get("unix_socket") or f"{args.get('host')}:{args.get('port')}"
    return f"{args['user']}@{where}"


def connect(pid: int, opts: ConnectOptions) -> tuple[Connection | None, dict[str, Any] | None, str | None]:
    """(connection, its arguments, None) or (None, arguments or None, why not);
    never raises for a server problem."""
    try:
        args = resolve(pid, opts)
    except OSError as e:
        return None, None, f"cannot read the password file: {e.strerror}"
    except (InputFileError, UnicodeDecodeError) as e:
        return None, None, f"cannot read the password file: {e}"
    if "unix_socket" not in args and "host" not in args:
        return None, args, f"PID {pid} listens on no unix socket or TCP port (use --socket or --host/--port)"
    try:
        return pymysql.connect(**args), args, None
    except pymysql.err.MySQLError as e:
        code = e.args[0] if e.args else "?"
        text = e.args[1] if len(e.args) > 1 else str(e)
        if "timed out" in str(text):
            return None, args, (f"the server at {describe(args)} did not answer within {ANSWER_TIMEOUT_S}s "
                                "(hung, or stopped?)")
        return None, args, f"cannot connect as {describe(args)}: ({code}) {text}"
