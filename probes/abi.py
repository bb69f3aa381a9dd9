"""The one Python side of the BPF programs' ABI: the constants and ctypes
structures of the probes' headers (uprobe_latency.h, histogram.h, tracing.h,
offcpu.h, io.h, cpu_sample.h, user_stack.h), the histogram slots, and the checks that hold
them to the compiled objects.

checked_object() compares every mirrored structure (size, member offsets and
sizes) and every enum of the headers (each program names their types in
its `abi_enums` variable) with the BTF clang wrote into the object, and the ABI version
compiled into uprobe_latency's .rodata with UPROBE_LATENCY_ABI here: the
collectors call it before loading, tests/unit/test_abi.py at build."""

from __future__ import annotations

from collections.abc import Mapping
import ctypes
from functools import lru_cache

from mysqlprobe.errors import BpfError
from mysqlprobe.probes import object_path
from mysqlprobe.probes.btf import Btf

UPROBE_LATENCY_ABI = 9

# uprobe_latency.h (and histogram.h)
MAX_PROBES, STMT_TEXT_LEN, MAX_COST_CLASSES, NO_PARENT = 1024, 128, 4, 0xFFFF
HIST_SUB_BITS, MAX_SLOTS = 2, 160
PART_NONE, PART_ARG_VALUE, PART_ARG_OUT_PTR = 0, 1, 2
COOKIE_PROBE_MASK, COOKIE_MODE_SHIFT, COOKIE_ARG_SHIFT, COOKIE_CLASS_SHIFT = 0xFFFF, 16, 24, 32
COOKIE_ENTRY_ONLY_BIT = 31
COOKIE_ENTRY_ONLY = 1 << COOKIE_ENTRY_ONLY_BIT
STMT_CMD_ARG_SHIFT, STMT_TEXT_ARG_SHIFT, STMT_TEXT_INDIRECT_BIT, STMT_LEN_ARG_SHIFT = 16, 24, 31, 40
STMT_TEXT_INDIRECT = 1 << STMT_TEXT_INDIRECT_BIT
# a USDT site's text operand, in its own cookie (uprobe_latency.h)
STMT_CMD_QUERY, STMT_TEXT_USDT, STMT_TEXT_DEREF, STMT_REG_MASK, STMT_REG_NONE = 0xFF, 0x40, 0x20, 0x1F, 0x1F
STMT_LEN_NONE, STMT_DISP_SHIFT, STMT_USDT_FLAT_BIT, STMT_KEY_NO_TEXT_BIT = 0xFF, 48, 31, 63
STMT_USDT_FLAT, STMT_KEY_NO_TEXT = 1 << STMT_USDT_FLAT_BIT, 1 << STMT_KEY_NO_TEXT_BIT
COM_QUERY, COM_STMT_EXECUTE = 3, 23
# enum counter_id: the C name of each of the engine's counters -> the capture's
COUNTER_IDS = {"CNT_ENTRIES": "entries", "CNT_RETURNS": "returns", "CNT_UNMATCHED_RETURNS": "unmatched_returns",
               "CNT_LOST_FRAMES": "lost_frames", "CNT_DEPTH_OVERFLOW": "depth_overflow", "CNT_NO_STACK": "no_stack",
               "CNT_PART_READ_ERRORS": "partition_read_errors"}
COUNTERS = tuple(COUNTER_IDS.values())
# tracing.h
MAX_STACKS, STACK_DEPTH = 16384, 127
# offcpu.h: each kind of drop's C name -> the capture's
OFFCPU_DROPS = {"OFFCPU_THREAD_MAP_FULL": "thread map full", "OFFCPU_STACK_MAP_FULL": "stack map full",
               "OFFCPU_RECOVERED_MAP_FULL": "recovered-stack map full",
               "OFFCPU_USER_STACK_NOT_TAKEN": "user stacks not taken",
               "OFFCPU_KERNEL_STACK_NOT_TAKEN": "kernel stacks not taken"}
KERNEL_STACKS = 4096
# user_stack.h, kept_stack.h
SCAN_WORDS, MAX_FRAME_GAP, RECOVERED_STACKS = 64, 1 << 16, 4096
COPIED_STACK = 1
# io.h
MAX_IOCBS, IOCB_OP_BASE, PATH_LEN = 8, 1000, 256
IO_DROPS = {"IO_THREAD_MAP_FULL": "thread map full", "IO_CALL_MAP_FULL": "call map full",
            "IO_IOCBS_LEFT_OUT": f"io_submit calls of more than {MAX_IOCBS} iocbs",
            "IO_OPENED_MAP_FULL": "opened-file map full", "IO_RECOVERED_MAP_FULL": "copied-stack map full",
            "IO_USER_STACK_NOT_TAKEN": "user stacks not taken"}
# cpu_sample.h
SAMPLE_USER_STACKS, SAMPLE_KERNEL_STACKS = 1, 2
SAMPLE_DROPS = {"SAMPLE_MAP_FULL": "sample map full", "SAMPLE_STACKS_NOT_TAKEN": "stacks not taken",
                "SAMPLE_SLICES_FULL": "samples without their time", "SAMPLE_RECOVERED_MAP_FULL": "copied-stack map full"}
OFFCPU_DROPPED, IO_DROPPED, SAMPLE_DROPPED = (tuple(d.values()) for d in (OFFCPU_DROPS, IO_DROPS, SAMPLE_DROPS))


def _numbered(names, count: str) -> dict[str, int]:
    """An enum of names numbered from 0, ending in their count."""
    return {**{n: i for i, n in enumerate(names)}, count: len(names)}


TRACING_LIMITS = {"MAX_STACKS": MAX_STACKS, "STACK_DEPTH": STACK_DEPTH}
USER_STACK_LIMITS = {"SCAN_WORDS": SCAN_WORDS, "MAX_FRAME_GAP": MAX_FRAME_GAP, "RECOVERED_STACKS": RECOVERED_STACKS}
KEPT_STACKS = {"COPIED_STACK": COPIED_STACK}
# per object: each enum of its header (as the object's BTF carries it) -> its constants
ENUMS = {
    "uprobe_latency": {
        "latency_limits": {"MAX_PROBES": MAX_PROBES, "STMT_TEXT_LEN": STMT_TEXT_LEN,
                           "MAX_COST_CLASSES": MAX_COST_CLASSES, "NO_PARENT": NO_PARENT},
        "histogram_layout": {"HIST_SUB_BITS": HIST_SUB_BITS, "MAX_SLOTS": MAX_SLOTS},
        "probe_cookie": {"COOKIE_PROBE_MASK": COOKIE_PROBE_MASK, "COOKIE_MODE_SHIFT": COOKIE_MODE_SHIFT,
                         "COOKIE_ARG_SHIFT": COOKIE_ARG_SHIFT, "COOKIE_ENTRY_ONLY_BIT": COOKIE_ENTRY_ONLY_BIT,
                         "COOKIE_CLASS_SHIFT": COOKIE_CLASS_SHIFT},
        "part_mode": {"PART_NONE": PART_NONE, "PART_ARG_VALUE": PART_ARG_VALUE, "PART_ARG_OUT_PTR": PART_ARG_OUT_PTR},
        "stmt_cookie": {"STMT_CMD_ARG_SHIFT": STMT_CMD_ARG_SHIFT, "STMT_TEXT_ARG_SHIFT": STMT_TEXT_ARG_SHIFT,
                        "STMT_TEXT_INDIRECT_BIT": STMT_TEXT_INDIRECT_BIT, "STMT_LEN_ARG_SHIFT": STMT_LEN_ARG_SHIFT,
                        "STMT_CMD_QUERY": STMT_CMD_QUERY, "STMT_TEXT_USDT": STMT_TEXT_USDT,
                        "STMT_TEXT_DEREF": STMT_TEXT_DEREF, "STMT_REG_MASK": STMT_REG_MASK,
                        "STMT_REG_NONE": STMT_REG_NONE, "STMT_LEN_NONE": STMT_LEN_NONE,
                        "STMT_DISP_SHIFT": STMT_DISP_SHIFT, "STMT_USDT_FLAT_BIT": STMT_USDT_FLAT_BIT,
                        "STMT_KEY_NO_TEXT_BIT": STMT_KEY_NO_TEXT_BIT},
        "server_command": {"COM_QUERY": COM_QUERY, "COM_STMT_EXECUTE": COM_STMT_EXECUTE},
        "counter_id": _numbered(COUNTER_IDS, "CNT_MAX"),
    },
    "offcpu": {"tracing_limits": TRACING_LIMITS, "offcpu_dropped": _numbered(OFFCPU_DROPS, "OFFCPU_DROPPED_KINDS"),
               "user_stack_limits": USER_STACK_LIMITS, "offcpu_stacks": {"KERNEL_STACKS": KERNEL_STACKS},
               "kept_stacks": KEPT_STACKS},
    "io": {"tracing_limits": TRACING_LIMITS,
           "io_limits": {"MAX_IOCBS": MAX_IOCBS, "IOCB_OP_BASE": IOCB_OP_BASE, "PATH_LEN": PATH_LEN},
           "io_dropped": _numbered(IO_DROPS, "IO_DROPPED_KINDS"), "user_stack_limits": USER_STACK_LIMITS,
           "kept_stacks": KEPT_STACKS},
    "cpu_sample": {"tracing_limits": TRACING_LIMITS,
                   "sample_stacks": {"SAMPLE_USER_STACKS": SAMPLE_USER_STACKS,
                                     "SAMPLE_KERNEL_STACKS": SAMPLE_KERNEL_STACKS},
                   "sample_dropped": _numbered(SAMPLE_DROPS, "SAMPLE_DROPPED_KINDS"),
                   "user_stack_limits": USER_STACK_LIMITS, "kept_stacks": KEPT_STACKS},
}

_u32, _u64, _s64 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64


def slot_of(value_ns: int) -> int:
    """The histogram slot hist_slot() in histogram.h puts value_ns into."""
    sub = 1 << HIST_SUB_BITS
    if value_ns < sub:
        return max(int(value_ns), 0)
    e = int(value_ns).bit_length() - 1
    slot = ((e - 1) << HIST_SUB_BITS) | ((int(value_ns) >> (e - HIST_SUB_BITS)) & (sub - 1))
    return min(slot, MAX_SLOTS - 1)


def slot_bounds(slot: int) -> tuple[int, int]:
    """[low, high) in ns of a slot."""
    sub = 1 << HIST_SUB_BITS
    if slot < sub:
        return slot, slot + 1
    e = (slot >> HIST_SUB_BITS) + 1
    width = 1 << (e - HIST_SUB_BITS)
    low = (1 << e) + (slot & (sub - 1)) * width
    return low, low + width


class LatencyConfig(ctypes.Structure):
    _fields_ = [("abi", _u32), ("targ_tgid", _u32), ("calib_tgid", _u32)]


class ProbeCost(ctypes.Structure):
    _fields_ = [("own_ns", _u64), ("pair_ns", _u64)]


class ProbeStats(ctypes.Structure):
    _fields_ = [("calls", _u64), ("total_ns", _u64), ("nested_hits", _u64), ("corrected_ns", _s64),
                ("hist", _u64 * MAX_SLOTS), ("chist", _u64 * MAX_SLOTS), ("preempted_ns", _u64),
                ("preempted_calls", _u64)]


class PartKey(ctypes.Structure):
    _fields_ = [("probe", _u32), ("part", _u32)]


class PartStats(ctypes.Structure):
    _fields_ = [("calls", _u64), ("total_ns", _u64), ("corrected_ns", _s64),
                ("hist", _u64 * MAX_SLOTS), ("chist", _u64 * MAX_SLOTS)]


class EdgeKey(ctypes.Structure):
    _fields_ = [("tid", _u32), ("probe", ctypes.c_uint16), ("parent", ctypes.c_uint16)]


class EdgeStats(ctypes.Structure):
    _fields_ = [("calls", _u64), ("total_ns", _u64), ("corrected_ns", _s64)]


class StmtStats(ctypes.Structure):
    _fields_ = [("executions", _u64), ("total_ns", _u64), ("probe_hits", _u64), ("probe_cost_ns", _u64),
                ("hist", _u64 * MAX_SLOTS), ("command", _u32), ("text_len", _u32),
                ("text", ctypes.c_char * STMT_TEXT_LEN)]


class StmtEdgeKey(ctypes.Structure):
    _fields_ = [("stmt", _u64), ("probe", ctypes.c_uint16), ("parent", ctypes.c_uint16), ("stage", _u32)]


class Preempted(ctypes.Structure):
    """A thread of the target waiting for a CPU with probed calls open (keyed by its task_struct's address)."""
    _fields_ = [("ts", _u64), ("tid", _u32), ("pad", _u32)]


class OffCpuConfig(ctypes.Structure):
    _fields_ = [("target_tgid", _u32), ("stacks_per_s", _u32), ("text_lo", _u64), ("text_hi", _u64),
                ("trampoline", _u64)]


class OffCpuKey(ctypes.Structure):
    _fields_ = [("tid", _u32), ("ustack", ctypes.c_int32), ("kstack", ctypes.c_int32), ("preempted", _u32),
                ("urecovered", _u64), ("caller", _u64), ("length", _u32), ("pad", _u32), ("kcopied", _u64)]


class OffCpuValue(ctypes.Structure):
    _fields_ = [("ns", _u64), ("count", _u64)]


class Away(ctypes.Structure):
    """A thread switched out in an on-phase, not yet back (keyed by its task_struct's address)."""
    _fields_ = [("ts", _u64), ("ustack", ctypes.c_int32), ("kstack", ctypes.c_int32), ("preempted", _u32),
                ("tid", _u32), ("urecovered", _u64), ("caller", _u64), ("taken", _u32), ("pad", _u32),
                ("kcopied", _u64)]


class OffCpuThreadKey(ctypes.Structure):
    _fields_ = [("tid", _u32), ("preempted", _u32), ("length", _u32), ("pad", _u32)]


class OffCpuTimed(ctypes.Structure):
    _fields_ = [("ns", _u64), ("count", _u64), ("walked", _u64)]


class OffCpuPace(ctypes.Structure):
    _fields_ = [("since", _u64), ("seen", _u32), ("every", _u32), ("count", _u64)]


class IoKey(ctypes.Structure):
    _fields_ = [("tid", _u32), ("ustack", ctypes.c_int32), ("call", _u32), ("fd", ctypes.c_int32), ("gen", _u32),
                ("pad", _u32), ("ucopied", _u64)]


class IoValue(ctypes.Structure):
    _fields_ = [("calls", _u64), ("bytes", _u64), ("ns", _u64), ("errors", _u64)]


class IocbSeen(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int32), ("op", _u32), ("gen", _u32), ("pad", _u32), ("bytes", _u64)]


class InCall(ctypes.Structure):
    """A thread inside an I/O call entered in an on-phase."""
    _fields_ = [("ts", _u64), ("ustack", ctypes.c_int32), ("call", _u32), ("fd", ctypes.c_int32),
                ("gen", _u32), ("iocbs", _u32), ("ucopied", _u64), ("iocb", IocbSeen * MAX_IOCBS)]


class OpenedKey(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int32), ("gen", _u32)]


class Path(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * PATH_LEN)]


class SampleConfig(ctypes.Structure):
    _fields_ = [("target_tgid", _u32), ("stacks", _u32), ("trampoline", _u64), ("text_lo", _u64), ("text_hi", _u64),
                ("origin_ns", _u64), ("slice_ns", _u64)]


class SampleKey(ctypes.Structure):
    _fields_ = [("tid", _u32), ("ustack", ctypes.c_int32), ("kstack", ctypes.c_int32), ("in_kernel", ctypes.c_uint8),
                ("at_entry", ctypes.c_uint8), ("slice", ctypes.c_uint16), ("ip", _u64), ("caller", _u64),
                ("ucopied", _u64), ("kcopied", _u64)]


# per object: C struct name -> its mirror
MIRRORS = {
    "uprobe_latency": {"latency_config": LatencyConfig, "probe_cost": ProbeCost, "probe_stats": ProbeStats,
                       "part_key": PartKey, "part_stats": PartStats, "edge_key": EdgeKey,
                       "edge_stats": EdgeStats, "stmt_stats": StmtStats, "stmt_edge_key": StmtEdgeKey,
                       "preempted": Preempted},
    "offcpu": {"offcpu_config": OffCpuConfig, "offcpu_key": OffCpuKey, "offcpu_value": OffCpuValue, "away": Away,
               "offcpu_thread_key": OffCpuThreadKey, "offcpu_timed": OffCpuTimed, "offcpu_pace": OffCpuPace},
    "io": {"io_key": IoKey, "io_value": IoValue, "iocb_seen": IocbSeen, "in_call": InCall,
           "opened_key": OpenedKey, "path": Path},
    "cpu_sample": {"sample_config": SampleConfig, "sample_key": SampleKey},
}
# per object: .rodata variable -> its mirror
RODATA = {"uprobe_latency": ("config", LatencyConfig), "offcpu": ("config", OffCpuConfig), "io": ("target_tgid", _u32),
          "cpu_sample": ("config", SampleConfig)}


def layout_mismatches(btf: Btf, mirrors: Mapping[str, type[ctypes.Structure]]) -> list[str]:
    """How the ctypes mirrors differ from the object's structures (none: they agree)."""
    out = []
    for name, mirror in mirrors.items():
        size, members = btf.struct(name)
        if size != ctypes.sizeof(mirror):
            out.append(f"struct {name}: {size} bytes in the object, {ctypes.sizeof(mirror)} in abi.py")
        ours = {f[0]: (getattr(mirror, f[0]).offset, getattr(mirror, f[0]).size) for f in mirror._fields_}
        theirs = {m.name: (m.offset, m.size) for m in members}
        if ours != theirs:
            out.append(f"struct {name}: members {theirs} in the object, {ours} in abi.py")
    return out


def enum_mismatches(btf: Btf, enums: dict[str, dict[str, int]]) -> list[str]:
    """How the headers' enums in the object differ from ENUMS (none: they agree)."""
    out = []
    for name, ours in enums.items():
        try:
            theirs = btf.enum(name)
        except BpfError:
            out.append(f"enum {name}: not in the object")
            continue
        if theirs != ours:
            out.append(f"enum {name}: {theirs} in the object, {ours} in abi.py")
    return out


def compiled_abi(btf: Btf) -> int:
    """UPROBE_LATENCY_ABI as compiled into the object's .rodata."""
    offset, size = btf.variable(".rodata", "config")
    return LatencyConfig.from_buffer_copy(btf.rodata[offset:offset + size]).abi


@lru_cache(maxsize=None)
def checked_object(name: str) -> Btf:
    """The object's BTF once its layout and ABI version agree with this module."""
    btf = Btf.of_object(object_path(name))
    problems = layout_mismatches(btf, MIRRORS[name]) + enum_mismatches(btf, ENUMS[name])
    if name == "uprobe_latency" and compiled_abi(btf) != UPROBE_LATENCY_ABI:
        problems.append(f"ABI {compiled_abi(btf)} compiled in, {UPROBE_LATENCY_ABI} expected")
    if problems:
        raise BpfError(f"{btf.path} does not match this mysqlprobe ({'; '.join(problems)}): reinstall it")
    return btf


def rodata(name: str, value: ctypes.Structure | ctypes._SimpleCData) -> bytes:
    """The object's .rodata with its configuration variable set to value."""
    btf = checked_object(name)
    var, mirror = RODATA[name]
    offset, size = btf.variable(".rodata", var)
    if not isinstance(value, mirror) or ctypes.sizeof(value) != size:
        raise BpfError(f"{var}: {ctypes.sizeof(value)} bytes given, {size} in {btf.path}")
    data = bytearray(btf.rodata)
    data[offset:offset + size] = bytes(value)
    return bytes(data)
