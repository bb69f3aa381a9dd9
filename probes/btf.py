"""A reader for the BTF of a compiled BPF object: enough to check that the
ctypes mirrors in abi.py lay structures out as clang did and hold the
headers' enum constants, and to find where a global variable sits in .rodata. BTF's format: linux/Documentation/bpf/btf.rst."""

from __future__ import annotations

import struct

from mysqlprobe.elfsections import ElfSections
from mysqlprobe.errors import BpfError
from dataclasses import dataclass, field

BTF_MAGIC = 0xEB9F
# kind -> bytes of data that follow its 12-byte type entry (per vlen item where a tuple)
_KIND_STRUCT, _KIND_UNION, _KIND_VAR, _KIND_DATASEC = 4, 5, 14, 15
_KIND_TYPEDEF, _KIND_VOLATILE, _KIND_CONST, _KIND_RESTRICT, _KIND_TYPE_TAG = 8, 9, 10, 11, 18
_KIND_INT, _KIND_PTR, _KIND_ARRAY, _KIND_ENUM, _KIND_ENUM64, _KIND_FLOAT = 1, 2, 3, 6, 19, 16
_EXTRA_FIXED = {1: 4, 3: 12, 14: 4, 17: 4}
_EXTRA_PER_ITEM = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}
_MODIFIERS = {_KIND_TYPEDEF, _KIND_VOLATILE, _KIND_CONST, _KIND_RESTRICT, _KIND_TYPE_TAG}


@dataclass
class BtfType:
    """One type of a BTF blob, as read from its type section."""

    kind: int
    name: str
    size_or_type: int
    items: list[tuple] = field(default_factory=list)  # members (name, type, bit offset), datasec vars...
    extra: tuple = ()


@dataclass(frozen=True)
class Member:
    """A struct member as the C header lays it out: byte offset and size."""

    name: str
    offset: int  # bytes
    size: int


class Btf:
    """The types of one object's .BTF section, and its .rodata bytes."""

    def __init__(self, path: str, types: list, rodata: bytes = b""):
        self.path, self.types, self.rodata = path, types, rodata

    @classmethod
    def of_object(cls, path: str) -> "Btf":
        """The BTF of a BPF object file (its .BTF section) and its .rodata."""
        try:
            with open(path, "rb") as f:
                elf = ElfSections(f)
                section, rodata = elf.section(".BTF"), elf.section(".rodata")
                if section is None:
                    raise BpfError(f"{path} has no BTF: was it compiled with clang -g?")
                return cls(path, _parse(elf.data(section)), elf.data(rodata) if rodata is not None else b"")
        except OSError as e:
            raise BpfError(f"cannot read BPF object {path}: {e.strerror}") from None
        except (ValueError, IndexError, struct.error) as e:
            raise BpfError(f"{path}: not a readable BPF object ({e})") from None

    @classmethod
    def of_kernel(cls, path: str = "/sys/kernel/btf/vmlinux") -> "Btf":
        """The running kernel's BTF (raw, as the kernel exports it)."""
        with open(path, "rb") as f:
            return cls(path, _parse(f.read()))

    def _named(self, kind: int, name: str) -> BtfType:
        for t in self.types:
            if t is not None and t.kind == kind and t.name == name:
                return t
        raise BpfError(f"{self.path}: no {name!r} in its BTF")

    def size(self, type_id: int) -> int:
        t = self.types[type_id]
        while t.kind in _MODIFIERS or t.kind == _KIND_VAR:
            t = self.types[t.size_or_type]
        if t.kind == _KIND_ARRAY:
            elem, _index, n = t.extra
            return self.size(elem) * n
        if t.kind == _KIND_PTR:
            return 8
        return t.size_or_type

    def struct(self, name: str) -> tuple[int, list[Member]]:
        """(size, members) of a struct, offsets in bytes."""
        t = self._named(_KIND_STRUCT, name)
        return t.size_or_type, [Member(n, bits // 8, self.size(tid)) for n, tid, bits in t.items]

    def enum(self, name: str) -> dict[str, int]:
        """An enum's constants, by name."""
        return dict(self._named(_KIND_ENUM, name).items)

    def variable(self, section: str, name: str) -> tuple[int, int]:
        """(offset, size) of a global variable in a data section (.rodata, .bss)."""
        sec = self._named(_KIND_DATASEC, section)
        for var_id, offset, size in sec.items:
            if self.types[var_id].name == name:
                return offset, size
        raise BpfError(f"{self.path}: no variable {name!r} in {section}")


def _parse(data: bytes) -> list[BtfType | None]:
    magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
    if magic != BTF_MAGIC:
        raise BpfError("not BTF (bad magic)")
    type_off, type_len, str_off, _str_len = struct.unpack_from("<IIII", data, 8)
    types_at, strings_at = hdr_len + type_off, hdr_len + str_off

    def name(off: int) -> str:
        end = data.index(b"\0", strings_at + off)
        return data[strings_at + off:end].decode()

    types: list[BtfType | None] = [None]  # type id 0 is void
    pos, end = types_at, types_at + type_len
    while pos < end:
        name_off, info, size_or_type = struct.unpack_from("<III", data, pos)
        pos += 12
        kind, vlen, kind_flag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        t = BtfType(kind, name(name_off), size_or_type)
        if kind in (_KIND_STRUCT, _KIND_UNION):
            for i in range(vlen):
                m_name, m_type, m_off = struct.unpack_from("<III", data, pos + 12 * i)
                t.items.append((name(m_name), m_type, m_off & 0xFFFFFF if kind_flag else m_off))
        elif kind == _KIND_DATASEC:
            t.items = [struct.unpack_from("<III", data, pos + 12 * i) for i in range(vlen)]
        elif kind == _KIND_ARRAY:
            t.extra = struct.unpack_from("<III", data, pos)
        elif kind == _KIND_ENUM:
            signed = "i" if kind_flag else "I"
            t.items = [(name(n), v) for n, v in (struct.unpack_from(f"<I{signed}", data, pos + 8 * i)
                                                 for i in range(vlen))]
        pos += _EXTRA_FIXED.get(kind, 0) + _EXTRA_PER_ITEM.get(kind, 0) * vlen
        types.append(t)
    return types
