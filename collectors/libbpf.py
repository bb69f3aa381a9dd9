"""The few libbpf (>= 1.0, the system's libbpf.so.1) calls mysqlprobe needs,
through ctypes. Links are file descriptors of this process: whatever way it
ends, even kill -9, the kernel closes them and the uprobes go away."""

from __future__ import annotations

from collections.abc import Callable

from typing import Any

import ctypes
import errno
import functools
import os
import struct
import threading

from mysqlprobe.errors import BpfError, MysqlprobeError, PermissionProblem


class _UprobeOpts(ctypes.Structure):
    # struct bpf_uprobe_opts as of libbpf 1.0; sz tells newer libbpf what we know
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("ref_ctr_offset", ctypes.c_size_t),
        ("bpf_cookie", ctypes.c_uint64),
        ("retprobe", ctypes.c_bool),
        ("func_name", ctypes.c_char_p),
    ]


_P = ctypes.c_void_p


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    try:  # libbpf 1.x by its soname first: find_library runs ldconfig (and imports tempfile), every start
        so = ctypes.CDLL("libbpf.so.1", use_errno=True)
    except OSError:
        from ctypes.util import find_library
        name = find_library("bpf")
        try:
            so = ctypes.CDLL(name or "libbpf.so", use_errno=True)
        except OSError:
            raise BpfError("libbpf is not installed (Debian: apt-get install libbpf1)") from None
    sigs = {
        "libbpf_set_print": (_P, [_P]),
        "bpf_object__open_file": (_P, [ctypes.c_char_p, _P]),
        "bpf_object__next_program": (_P, [_P, _P]),
        "bpf_program__set_expected_attach_type": (ctypes.c_int, [_P, ctypes.c_int]),
        "bpf_program__type": (ctypes.c_int, [_P]),
        "bpf_program__fd": (ctypes.c_int, [_P]),
        "bpf_object__load": (ctypes.c_int, [_P]),
        "bpf_object__close": (None, [_P]),
        "bpf_object__find_program_by_name": (_P, [_P, ctypes.c_char_p]),
        "bpf_object__find_map_by_name": (_P, [_P, ctypes.c_char_p]),
        "bpf_map__set_initial_value": (ctypes.c_int, [_P, _P, ctypes.c_size_t]),
        "bpf_map__fd": (ctypes.c_int, [_P]),
        "bpf_program__attach_uprobe_opts": (_P, [_P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                                  ctypes.POINTER(_UprobeOpts)]),
        "bpf_link__destroy": (ctypes.c_int, [_P]),
        "bpf_program__attach": (_P, [_P]),
        "bpf_program__attach_perf_event": (_P, [_P, ctypes.c_int]),
        "bpf_map_lookup_elem": (ctypes.c_int, [ctypes.c_int, _P, _P]),
        "bpf_map_update_elem": (ctypes.c_int, [ctypes.c_int, _P, _P, ctypes.c_uint64]),
        "bpf_map_get_next_key": (ctypes.c_int, [ctypes.c_int, _P, _P]),
        "bpf_map_delete_elem": (ctypes.c_int, [ctypes.c_int, _P]),
        "bpf_obj_get_info_by_fd": (ctypes.c_int, [ctypes.c_int, _P, ctypes.POINTER(ctypes.c_uint32)]),
    }
    for fn, (res, args) in sigs.items():
        f = getattr(so, fn)
        f.restype, f.argtypes = res, args
    return so


def _errno_error(what: str) -> Exception:
    err = ctypes.get_errno()
    text = f"{what}: {os.strerror(err)}"
    if err in (errno.EPERM, errno.EACCES):
        exc: MysqlprobeError = PermissionProblem(f"{text}: run as root (or with CAP_BPF and CAP_PERFMON)")
    else:
        exc = BpfError(text)
    exc.errno = err
    return exc


# uprobe_multi links (Linux 6.6+): every offset of a program in one link, made
# and dropped with one system call each; constants from linux/bpf.h
BPF_PROG_LOAD = 5
BPF_LINK_CREATE = 28
BPF_PROG_TYPE_KPROBE = 2
BPF_TRACE_UPROBE_MULTI = 48
BPF_F_UPROBE_MULTI_RETURN = 1
SYS_BPF = 321  # x86_64
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
# struct bpf_prog_info (linux/bpf.h): its size, and where run_time_ns and run_cnt
# sit (tests/unit/test_abi.py checks both against the kernel's BTF)
PROG_INFO_SIZE = 232
PROG_INFO_RUN_TIME_NS = 192
PROG_INFO_RUN_CNT = 200


def _bpf_syscall(cmd: int, attr: ctypes.Array[Any]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    return int(libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_long(cmd), attr, ctypes.c_long(len(attr))))


# perf events (linux/perf_event.h)
PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_ATTR_SIZE = 112            # PERF_ATTR_SIZE_VER5
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
PERF_FLAG_DISABLED = 1          # attr.flags bit 0
PERF_FLAG_FD_CLOEXEC = 8


def perf_event_open(attr: ctypes.Array[Any], pid: int, cpu: int = -1) -> int:
    """A perf event's descriptor (attr: struct perf_event_attr's bytes);
    OSError with the kernel's errno when refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    number = PERF_EVENT_OPEN.get(os.uname().machine)
    if number is None:
        raise OSError(f"no perf_event_open number known for {os.uname().machine}")
    fd = libc.syscall(number, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def cpu_clock_attr(period_ns: int) -> ctypes.Array[Any]:
    """A cpu-clock event firing every period_ns of CPU time, off until enabled."""
    attr = (ctypes.c_uint8 * PERF_ATTR_SIZE)()
    struct.pack_into("<IIQQ", attr, 0, PERF_TYPE_SOFTWARE, PERF_ATTR_SIZE, PERF_COUNT_SW_CPU_CLOCK, period_ns)
    struct.pack_into("<Q", attr, 40, PERF_FLAG_DISABLED)
    return attr


def uprobe_multi_link(program_fd: int, pid: int, binary: str, offsets: list[int], cookies: list[int],
                      retprobe: bool = False, ref_ctr_offsets: list[int] | None = None) -> int:
    """A uprobe_multi link of a loaded program at many offsets of one
    binary (pid: only that process's calls); its descriptor."""
    n = len(offsets)
    path = ctypes.create_string_buffer(binary.encode())
    offs = (ctypes.c_uint64 * n)(*offsets)
    cooks = (ctypes.c_uint64 * n)(*cookies)
    refs = (ctypes.c_uint64 * n)(*ref_ctr_offsets) if ref_ctr_offsets and any(ref_ctr_offsets) else None
    attr = (ctypes.c_uint8 * 128)()
    struct.pack_into("<IIII", attr, 0, program_fd, 0, BPF_TRACE_UPROBE_MULTI, 0)
    struct.pack_into("<QQQQIII", attr, 16, ctypes.addressof(path), ctypes.addressof(offs),
                     ctypes.addressof(refs) if refs else 0,
                     ctypes.addressof(cooks), n, BPF_F_UPROBE_MULTI_RETURN if retprobe else 0, pid)
    fd = _bpf_syscall(BPF_LINK_CREATE, attr)
    if fd < 0:
        raise _errno_error(f"attaching {n} {'uretprobes' if retprobe else 'uprobes'} to {binary} failed")
    return fd


def load_empty_uprobe_program() -> int:
    """A program of two instructions (return 0) for uprobe_multi links,
    loaded without libbpf; its descriptor."""
    insns = bytes.fromhex("b700000000000000" "9500000000000000")  # r0 = 0; exit
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = (ctypes.c_uint8 * 128)()
    struct.pack_into("<IIQQ", attr, 0, BPF_PROG_TYPE_KPROBE, len(insns) // 8, ctypes.addressof(code),
                     ctypes.addressof(license_))
    struct.pack_into("<I", attr, 68, BPF_TRACE_UPROBE_MULTI)  # expected_attach_type
    fd = _bpf_syscall(BPF_PROG_LOAD, attr)
    if fd < 0:
        raise _errno_error("loading an empty uprobe program failed")
    return fd


def enable_run_time_stats() -> int | None:
    """Have the kernel time every BPF program run while the returned
    descriptor stays open (closing it, or this process ending, turns it
    back off); None where the kernel refuses."""
    attr = (ctypes.c_uint8 * 8)()
    struct.pack_into("<I", attr, 0, BPF_STATS_RUN_TIME)
    fd = _bpf_syscall(BPF_ENABLE_STATS, attr)
    return fd if fd >= 0 else None


def program_run_stats(program_fd: int) -> tuple[int, int]:
    """(ns the program ran, times it ran) while run-time stats were on."""
    info = (ctypes.c_uint8 * PROG_INFO_SIZE)()
    size = ctypes.c_uint32(PROG_INFO_SIZE)
    if lib().bpf_obj_get_info_by_fd(program_fd, info, ctypes.byref(size)) != 0:
        return 0, 0
    run_ns, runs = struct.unpack_from("<QQ", info, PROG_INFO_RUN_TIME_NS)
    return run_ns, runs


class RunTimeMeter:
    """What some programs cost the kernel between start() and stop(): ns of
    run time and runs, from read() (their run statistics, summed). The
    statistics are on from open() until close(), where the kernel allows."""

    def __init__(self, read: Callable[[], tuple[int, int]]) -> None:
        self.read = read
        self._fd: int | None = None
        self._at = (0, 0)
        self.ns = self.runs = 0

    def open(self) -> None:
        if self._fd is None:
            self._fd = enable_run_time_stats()

    @property
    def measured(self) -> bool:
        return self._fd is not None

    def start(self) -> None:
        self._at = self.read()

    def stop(self) -> None:
        ns, runs = self.read()
        self.ns, self.runs = ns - self._at[0], runs - self._at[1]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class BpfObject:
    """One loaded BPF object file. Use as a context manager.

    multi=True loads the programs for uprobe_multi links; a kernel without
    them refuses the load (BpfError with errno EINVAL) and the caller falls
    back to one perf-event link per probe."""

    def __init__(self, path: str, rodata: bytes | None = None, verbose: bool = False, multi: bool = False):
        self._links: list[int] = []
        self._fds: list[int] = []
        self._obj = None
        self.multi = multi
        so = lib()
        if not verbose:
            so.libbpf_set_print(None)
        if not os.path.exists(path):
            raise BpfError(f"BPF object {path} is missing: reinstall mysqlprobe (the build compiles it)")
        ctypes.set_errno(0)
        obj = so.bpf_object__open_file(path.encode(), None)
        if not obj:
            raise _errno_error(f"cannot open BPF object {path}")
        self._obj = obj
        if rodata is not None:
            m = so.bpf_object__find_map_by_name(obj, b".rodata")
            if not m:
                self.close()
                raise BpfError(f"{path} has no .rodata map")
            buf = ctypes.create_string_buffer(rodata, len(rodata))
            if so.bpf_map__set_initial_value(m, ctypes.cast(buf, _P), len(rodata)) != 0:
                self.close()
                raise BpfError("cannot set the BPF program's constants (.rodata size mismatch?)")
        if multi:
            prog = so.bpf_object__next_program(obj, None)
            while prog:  # the uprobe programs; a tracepoint's stays as it is
                if so.bpf_program__type(prog) == BPF_PROG_TYPE_KPROBE:
                    so.bpf_program__set_expected_attach_type(prog, BPF_TRACE_UPROBE_MULTI)
                prog = so.bpf_object__next_program(obj, prog)
        ctypes.set_errno(0)
        if so.bpf_object__load(obj) != 0:
            err = _errno_error("loading the BPF programs failed (run with -v for the verifier log)")
            self.close()
            raise err

    def __enter__(self) -> "BpfObject":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def program(self, name: str) -> int:
        p = lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not p:
            raise BpfError(f"BPF program {name} not found in the object")
        return int(p)

    def program_fd(self, name: str) -> int:
        return int(lib().bpf_program__fd(self.program(name)))

    def map_fd(self, name: str) -> int:
        m = lib().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise BpfError(f"BPF map {name} not found in the object")
        return int(lib().bpf_map__fd(m))

    def attach_uprobe(self, program: int, pid: int, binary: str, offset: int,
                      cookie: int, retprobe: bool, ref_ctr_offset: int = 0) -> None:
        """ref_ctr_offset: the file offset of a USDT semaphore, which the
        kernel raises while the probe is on (0: none)."""
        opts = _UprobeOpts(ctypes.sizeof(_UprobeOpts), ref_ctr_offset, cookie, retprobe, None)
        ctypes.set_errno(0)
        link = lib().bpf_program__attach_uprobe_opts(program, pid, binary.encode(), offset,
                                                     ctypes.byref(opts))
        if not link:
            kind = "uretprobe" if retprobe else "uprobe"
            raise _errno_error(f"attaching a {kind} to {binary} at offset {offset:#x} failed")
        self._links.append(link)

    def attach_program(self, program: int, what: str) -> None:
        """Attach a program where its section says (a tracepoint)."""
        ctypes.set_errno(0)
        link = lib().bpf_program__attach(program)
        if not link:
            raise _errno_error(f"attaching {what} failed")
        self._links.append(link)

    def attach_perf_event(self, program: int, perf_fd: int, what: str) -> None:
        """Run the program on each sample of a perf event; the link owns
        the event's descriptor from here (it closes it when detached)."""
        ctypes.set_errno(0)
        link = lib().bpf_program__attach_perf_event(program, perf_fd)
        if not link:
            error = _errno_error(f"attaching to {what} failed")
            os.close(perf_fd)
            raise error
        self._links.append(link)

    def attach_uprobe_multi(self, program: int, pid: int, binary: str, offsets: list[int],
                            cookies: list[int], retprobe: bool, ref_ctr_offsets: list[int] | None = None) -> int:
        """One link for many offsets of one binary; returns its descriptor.
        ref_ctr_offsets: each offset's USDT semaphore (file offset, 0: none)."""
        fd = uprobe_multi_link(lib().bpf_program__fd(program), pid, binary, offsets, cookies, retprobe,
                               ref_ctr_offsets)
        self._fds.append(fd)
        return fd

    @property
    def attached(self) -> int:
        return len(self._links) + len(self._fds)

    def detach(self, link_fds: list[int]) -> None:
        """Close the links, in parallel: each uprobe link waits out a grace
        period as it goes (60-120 ms for 25 functions), one after another
        five links kept the probes' window open 250 ms beyond its end."""
        fds = [fd for fd in link_fds if fd in self._fds]
        for fd in fds:
            self._fds.remove(fd)
        if len(fds) < 2:
            for fd in fds:
                os.close(fd)
            return
        closers = [threading.Thread(target=os.close, args=(fd,)) for fd in fds]
        for t in closers:
            t.start()
        for t in closers:
            t.join()

    def detach_all(self) -> None:
        while self._fds:
            os.close(self._fds.pop())
        while self._links:
            lib().bpf_link__destroy(self._links.pop())

    def close(self) -> None:
        self.detach_all()
        if self._obj:
            lib().bpf_object__close(self._obj)
            self._obj = None


# a ctypes value a map holds: a structure or a plain C number
CData = Any


def lookup(fd: int, key: CData, value: CData) -> bool:
    return bool(lib().bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(value)) == 0)


def update(fd: int, key: CData, value: CData) -> None:
    ctypes.set_errno(0)
    if lib().bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), 0) != 0:
        raise _errno_error("updating a BPF map failed")


def delete(fd: int, key: CData) -> bool:
    return bool(lib().bpf_map_delete_elem(fd, ctypes.byref(key)) == 0)


def keys(fd: int, key_type: Callable[[], CData]) -> list[Any]:
    """All keys of a hash map (a snapshot; entries may come and go meanwhile)."""
    so = lib()
    out = []
    prev = None
    nxt = key_type()
    while so.bpf_map_get_next_key(fd, ctypes.byref(prev) if prev is not None else None,
                                  ctypes.byref(nxt)) == 0:
        out.append(nxt)
        prev, nxt = nxt, key_type()
    return out
