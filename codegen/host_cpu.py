"""The CPU as LLVM's host detection sees it, read without LLVM: the raw CPUID leaves and the
XCR0 register that ``llvm::sys::getHostCPUName`` and ``getHostCPUFeatures`` decode on x86-64
(leaves 0, 1, 7.0, 7.1, 0xD.1, 0x14, 0x19, 0x24 and 0x80000000, 0x80000001, 0x80000008, and
XGETBV), plus a few more. Two processes that read the same words get the same CPU name and
feature string from the same LLVM, so ``codegen.jit`` keeps LLVM's answer in the disk cache
under these words and a disk hit never imports ``llvmlite.binding`` to ask again.

:func:`llvm_view` is that cache: LLVM's (triple, CPU name, features) from the disk-cache
entry ``<key>.host`` (authenticated as machine code is, ``codegen.diskcache``), whose key
hashes the words with the LLVM library's identity (llvmlite's version and its shared
library's path, size and modification time); else asked of LLVM and stored.

Only what is the same on every core of a machine is kept: the initial APIC ID in leaf 1 is
masked, and the per-core leaves (cache topology 4, x2APIC topology 0xB/0x1F, hybrid core type
0x1A) are not read. Reading more than LLVM reads only makes a key more specific.
"""
from __future__ import annotations

import ctypes
import os
import sys

from . import diskcache

FORMAT = "symgrad-host-2"      # (in the key of the .host entry; 2: a BLAKE2b key)

# void cpuid(uint32 leaf, uint32 subleaf, uint32 out[4])  (System V: edi, esi, rdx)
#   push rbx; mov r8, rdx; mov eax, edi; mov ecx, esi; cpuid
#   mov [r8], eax; mov [r8+4], ebx; mov [r8+8], ecx; mov [r8+12], edx; pop rbx; ret
_CPUID = bytes.fromhex("534989d089f889f10fa241890041895804418948084189500c5bc3")
# void xgetbv(uint32 index, uint32 out[2])  (edi, rsi)
#   mov ecx, edi; xgetbv; mov [rsi], eax; mov [rsi+4], edx; ret
_XGETBV = bytes.fromhex("89f90f01d08906895604c3")

_BASIC = ((0, 0), (1, 0), (7, 0), (7, 1), (7, 2), (0xD, 0), (0xD, 1), (0x14, 0), (0x19, 0),
          (0x24, 0))
_EXTENDED = (0x80000000, 0x80000001, 0x80000002, 0x80000003, 0x80000004, 0x80000007,
             0x80000008, 0x80000021)
_APIC_ID = 0xFF000000          # leaf 1, EBX: which core ran the instruction
_OSXSAVE = 1 << 27             # leaf 1, ECX: XGETBV may run

_known: list = []              # [identity or None], once per process


def identity() -> str | None:
    """The words above as hex, or None where they cannot be read (not x86-64 Linux, no
    executable memory)."""
    if not _known:
        _known.append(_read())
    return _known[0]


def _read() -> str | None:
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return None
    from . import elf_load
    try:
        code = elf_load.executable(_CPUID + _XGETBV)
    except OSError:
        return None
    cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32,
                             ctypes.POINTER(ctypes.c_uint32))(code)
    xgetbv = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32))(
        code + len(_CPUID))

    def leaf(number: int, sub: int) -> list[int]:
        out = (ctypes.c_uint32 * 4)()
        cpuid(number, sub, out)
        return list(out)

    words: list[int] = []
    top = leaf(0, 0)[0]
    for number, sub in _BASIC:
        if number <= top:
            regs = leaf(number, sub)
            if number == 1:
                regs[1] &= ~_APIC_ID
            words += [number, sub, *regs]
    top = leaf(0x80000000, 0)[0]
    for number in _EXTENDED:
        if number <= top:
            words += [number, 0, *leaf(number, 0)]
    if leaf(1, 0)[2] & _OSXSAVE:          # (XGETBV faults where the OS has not enabled it)
        out = (ctypes.c_uint32 * 2)()
        xgetbv(0, out)
        words += [0xFFFFFFFF, *out]        # (a marker no leaf number uses)
    return "".join(f"{w:08x}" for w in words)


def llvm_view(root: str | None) -> tuple[tuple[str, str, str], bool]:
    """((triple, CPU name, feature string) as LLVM detects them, whether an entry was
    rejected), from the disk cache directory ``root`` (None: no disk cache) when it holds
    them, else asked of LLVM (importing llvmlite.binding) and stored there."""
    key = _key() if root is not None else None
    rejected = False
    if key is not None:
        data, rejected = diskcache.read(root, key, ".host")
        if data is not None:
            fields = data.split(b"\n")
            if len(fields) == 4 and fields[0] == b"host":
                try:
                    return tuple(f.decode("ascii") for f in fields[1:]), False
                except UnicodeDecodeError:
                    pass
            rejected = True
    import llvmlite.binding as llvm
    host = (llvm.get_process_triple(), llvm.get_host_cpu_name(),
            llvm.get_host_cpu_features().flatten())
    if key is not None:
        # (lines: json costs ~1.4 ms to import; LLVM's names have no newline)
        diskcache.write(root, key, "\n".join(("host",) + host).encode("ascii"), ".host")
    return host, rejected


def _key() -> str | None:
    words = identity()
    if words is None:
        return None
    import llvmlite
    library = os.path.join(os.path.dirname(llvmlite.__file__), "binding", "libllvmlite.so")
    try:
        st = os.stat(library)
    except OSError:
        return None
    h = diskcache.hasher()
    for part in (FORMAT, llvmlite.__version__, library, str(st.st_size), str(st.st_mtime_ns),
                 words):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
