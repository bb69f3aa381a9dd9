"""What attaching needs, checked before anything is read of the target:
the uprobes and BPF programs need CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN
(root has them all). Without them a run ends at once with exit 4 naming
what is missing, rather than on the first thing it cannot read."""

from __future__ import annotations

from mysqlprobe.errors import PermissionProblem

# capability -> its bit (linux/capability.h)
NEEDED = {"CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}


def effective_capabilities(status_path: str = "/proc/self/status") -> int:
    """This process's effective capability set (CapEff), 0 where unreadable."""
    try:
        with open(status_path) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def missing_capabilities(effective: int) -> list[str]:
    return [name for name, bit in NEEDED.items() if not effective >> bit & 1]


def require_attach_privileges(what: str, effective: int | None = None) -> None:
    """PermissionProblem (exit 4) when this process cannot attach probes."""
    missing = missing_capabilities(effective_capabilities() if effective is None else effective)
    if missing:
        raise PermissionProblem(f"{what} needs root (or {', '.join(NEEDED)}); this process lacks "
                                f"{', '.join(missing)}: run it with sudo")
