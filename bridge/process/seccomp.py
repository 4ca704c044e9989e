"""The sandbox's seccomp filter, as the classic BPF program bwrap loads with `--seccomp FD`."""

from __future__ import annotations

import errno
import platform
import struct
import sys
from dataclasses import dataclass
from typing import Final

# BPF opcodes (linux/filter.h) and seccomp's return values (linux/seccomp.h).
_LD_W_ABS: Final = 0x20
_JEQ_K: Final = 0x15
_JGE_K: Final = 0x35
_JSET_K: Final = 0x45
_RET_K: Final = 0x06
RET_KILL_PROCESS: Final = 0x80000000
RET_ERRNO: Final = 0x00050000
RET_ALLOW: Final = 0x7FFF0000

# Offsets in struct seccomp_data: nr, arch, then args[6] of 8 bytes after the instruction pointer.
_NR: Final = 0
_ARCH: Final = 4
_ARG0_LOW: Final = 16  # little-endian: the low 32 bits of args[0] come first

AF_UNIX: Final = 1
CLONE_NEWUSER: Final = 0x10000000
_X32_SYSCALL_BIT: Final = 0x40000000


@dataclass(frozen=True, slots=True)
class Arch:
    """One arch's audit id and the syscall numbers the filter looks at."""

    audit: int
    socket: int
    unshare: int
    clone: int
    clone3: int
    io_uring: tuple[int, ...]
    #: Numbers at or above this are a second ABI of the same audit arch (x86_64's x32).
    foreign_from: int | None = None


ARCHES: Final = {
    "x86_64": Arch(0xC000003E, 41, 272, 56, 435, (425, 426, 427), _X32_SYSCALL_BIT),
    "aarch64": Arch(0xC00000B7, 198, 97, 220, 435, (425, 426, 427)),
}


def arch_of(machine: str | None = None) -> Arch | None:
    """The filter's numbers for `machine` (default: this one), None where there is no filter."""
    if sys.byteorder != "little":
        return None
    name = (machine or platform.machine()).lower()
    return ARCHES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(name, name))


def program(machine: str | None = None) -> bytes | None:
    """The filter as bwrap reads it: `struct sock_filter` entries, native byte order."""
    arch = arch_of(machine)
    if arch is None:
        return None
    return b"".join(struct.pack("=HBBI", *op) for op in _assemble(arch))


_Op = tuple[int, int, int, int]


def _assemble(arch: Arch) -> list[_Op]:
    """The program, its jumps resolved: each branch names a label, the end block defines them."""
    body: list[tuple[int, str | int, str | int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, "kill", arch.audit),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if arch.foreign_from is not None:
        body.append((_JGE_K, "kill", 0, arch.foreign_from))
    body += [(_JEQ_K, "nosys", 0, number) for number in (*arch.io_uring, arch.clone3)]
    body += [
        (_JEQ_K, "socket", 0, arch.socket),
        (_JEQ_K, "flags", 0, arch.unshare),
        (_JEQ_K, "flags", "allow", arch.clone),
    ]
    ends: list[tuple[str, list[tuple[int, str | int, str | int, int]]]] = [
        ("flags", [(_LD_W_ABS, 0, 0, _ARG0_LOW), (_JSET_K, "deny", "allow", CLONE_NEWUSER)]),
        ("socket", [(_LD_W_ABS, 0, 0, _ARG0_LOW), (_JEQ_K, "deny", "allow", AF_UNIX)]),
        ("allow", [(_RET_K, 0, 0, RET_ALLOW)]),
        ("deny", [(_RET_K, 0, 0, RET_ERRNO | errno.EPERM)]),
        ("nosys", [(_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]),
        ("kill", [(_RET_K, 0, 0, RET_KILL_PROCESS)]),
    ]
    flat = list(body)
    labels: dict[str, int] = {}
    for name, block in ends:
        labels[name] = len(flat)
        flat += block

    def offset(target: str | int, at: int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - at - 1
        assert 0 <= jump < 256, (target, jump)
        return jump

    return [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(flat)]
