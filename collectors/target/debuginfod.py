"""Debug files fetched by build-id from debuginfod servers (DEBUGINFOD_URLS
or --debuginfod), kept in the cache elfutils' own client uses, so that perf,
gdb and mysqlprobe share it and a second start needs no network."""

from __future__ import annotations

from collections.abc import Mapping

from typing import Any

import os
import re
from pathlib import Path
from collections.abc import Callable

from mysqlprobe.errors import TargetError
from dataclasses import dataclass, field

TIMEOUT_S = 90.0  # elfutils' default for DEBUGINFOD_TIMEOUT
CHUNK = 1 << 20
PROGRESS_EVERY = 32 << 20  # bytes between two progress reports
BUILD_ID = re.compile(r"^[0-9a-f]{8,}$")

# the servers the distributions run, for the line that says how to get symbols
DISTRIBUTION_SERVERS = {
    "debian": "https://debuginfod.debian.net", "ubuntu": "https://debuginfod.ubuntu.com",
    "fedora": "https://debuginfod.fedoraproject.org", "arch": "https://debuginfod.archlinux.org",
    "opensuse": "https://debuginfod.opensuse.org",
}


def server_urls(option: str | None = None, env: Mapping[str, str] = os.environ) -> list[str]:
    """The servers to ask: the option's, else DEBUGINFOD_URLS (space-separated)."""
    text = option if option is not None else env.get("DEBUGINFOD_URLS", "")
    return [u.rstrip("/") for u in text.split() if u.startswith(("http://", "https://", "file://"))]


def shown(url: str) -> str:
    """A URL fit to print: without a user or password in it."""
    return re.sub(r"//[^/@]*@", "//", url)


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("DEBUGINFOD_CACHE_PATH"):
        return Path(env["DEBUGINFOD_CACHE_PATH"])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "debuginfod_client"


def timeout_s(env: Mapping[str, str] = os.environ) -> float:
    try:
        return float(env.get("DEBUGINFOD_TIMEOUT", TIMEOUT_S))
    except ValueError:
        return TIMEOUT_S


def distribution_server(os_release: str = "/etc/os-release") -> str | None:
    """The debuginfod server of the distribution this machine runs, if it has one."""
    try:
        text = Path(os_release).read_text()
    except OSError:
        return None
    ids = re.findall(r'^(?:ID|ID_LIKE)="?([^"\n]+)"?', text, re.M)
    for word in " ".join(ids).split():
        if word in DISTRIBUTION_SERVERS:
            return DISTRIBUTION_SERVERS[word]
    return None


@dataclass
class Fetched:
    """Where the debug file is (None: no server had it) and what went wrong on the way."""

    path: str | None
    source: str | None = None  # "cache" or the server's URL (shown)
    errors: list[str] = field(default_factory=list)


# told the server, the bytes done and the total (None: not known)
Progress = Callable[[str, int, "int | None"], None]


def fetch_debuginfo(build_id: str, urls: list[str], read_elf: Callable[..., Any], cache: Path | None = None,
                    progress: Progress | None = None,
                    timeout: float | None = None) -> Fetched:
    """The debug file of build_id: from the cache when one there belongs to
    it (offline too), else from the first server that has it. A download is
    checked (an ELF file of the same build-id) before it enters the cache."""
    build_id = build_id.lower()
    if not BUILD_ID.match(build_id):
        raise TargetError(f"not a build-id: {build_id!r}")
    cache = cache or cache_dir()
    path = cache / build_id / "debuginfo"
    if path.is_file() and _belongs(path, build_id, read_elf):
        return Fetched(str(path), "cache")
    import urllib.error  # urllib.response imports tempfile and shutil: only a download needs them
    errors = []
    for url in urls:
        try:
            tmp = _download(url, f"/buildid/{build_id}/debuginfo", path.parent, progress, timeout or timeout_s())
        except urllib.error.HTTPError as e:
            if e.code != 404:
                errors.append(f"{shown(url)}: HTTP {e.code}")
            continue
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors.append(f"{shown(url)}: {getattr(e, 'reason', e)}")
            continue
        if _belongs(tmp, build_id, read_elf):
            os.replace(tmp, path)
            return Fetched(str(path), shown(url), errors)
        tmp.unlink(missing_ok=True)
        errors.append(f"{shown(url)}: served a file that is not the debug file of build-id {build_id}")
    return Fetched(None, None, errors)


def _belongs(path: Path, build_id: str, read_elf: Callable[[str], Any]) -> bool:
    try:
        return bool(read_elf(str(path)).build_id == build_id)
    except TargetError:
        return False


def _download(server: str, path: str, into: Path, progress: Progress | None, timeout: float) -> Path:
    """The body of server + path in a new file under `into` (the caller
    renames or removes it); progress is told the server, bytes done and total."""
    import urllib.request  # http and email come with it: 0.04 s a start that needs no download
    into.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(server + path, headers={"User-Agent": "mysqlprobe"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        total = response.headers.get("Content-Length")
        total = int(total) if total and total.isdigit() else None
        import tempfile  # only when downloading: 7 ms of imports
        fd, name = tempfile.mkstemp(dir=into, prefix=".download-")
        done, reported = 0, 0
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    if progress and done - reported >= PROGRESS_EVERY:
                        progress(shown(server), done, total)
                        reported = done
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
    if progress and reported and reported != done:
        progress(shown(server), done, total)
    return Path(name)
