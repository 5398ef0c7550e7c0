"""A loader of our own for the x86-64 ELF relocatable objects ``codegen.jit`` compiles: what
lets a disk-cache hit run its machine code without importing ``llvmlite.binding`` (22 ms of a
fresh process) or creating LLVM's MCJIT engine.

:func:`load` places the allocated sections of one or several objects (a module's parts) in
one private mapping, resolves their undefined symbols (first among the objects themselves,
then through the caller's ``resolve``), applies the relocations and maps the code read +
execute and the constants read-only (never writable and executable at once). The objects jit
emits (``reloc="static"``, ``codemodel="jitdefault"``: LLVM's large code model) carry only
``R_X86_64_64`` relocations; the PC-relative, 32-bit and GOT forms of the small code model
are handled too (calls to targets more than 2 GiB away go through a stub, GOT references
through a slot of this mapping), so another code model still loads.

Anything it does not know (not a little-endian ELF64 x86-64 relocatable object, a section
type, flag or relocation type outside the lists below, writable or thread-local data, a
symbol ``resolve`` cannot find, a value out of range) raises :class:`Declined` before any
code can run, and jit links the object with LLVM's engine instead. Unwind tables
(``.eh_frame``) are left out: nothing unwinds through kernels (C code called from Python).
"""
from __future__ import annotations

import ctypes
import mmap
import struct
from typing import Callable


class Declined(Exception):
    """This loader does not handle the object: link it with LLVM's engine."""


_PAGE = mmap.PAGESIZE
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long]
_mprotect = _libc.mprotect
_mprotect.restype = ctypes.c_int
_mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

# ELF
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 1, 2, 3, 4, 8, 9
_SHT_X86_64_UNWIND = 0x70000001
_SHT_SYMTAB_SHNDX = 18
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 0x1, 0x2, 0x4
# flags an allocated section may carry: merge, strings, info link, link order, group, large
_SHF_KNOWN = _SHF_ALLOC | _SHF_EXECINSTR | 0x10 | 0x20 | 0x40 | 0x80 | 0x200 | 0x10000000
_SHN_UNDEF, _SHN_LORESERVE, _SHN_ABS = 0, 0xff00, 0xfff1
_STB_LOCAL, _STB_GLOBAL, _STB_WEAK = 0, 1, 2
_STT_TLS, _STT_GNU_IFUNC = 6, 10

# relocation type -> (how its value is computed, the field it is written to)
_RELOCATIONS = {
    1: ("S+A", "<Q"),         # R_X86_64_64
    2: ("S+A-P", "<i"),       # R_X86_64_PC32
    4: ("L+A-P", "<i"),       # R_X86_64_PLT32: the target, or its stub when it is far
    9: ("G+A-P", "<i"),       # R_X86_64_GOTPCREL
    10: ("S+A", "<I"),        # R_X86_64_32
    11: ("S+A", "<i"),        # R_X86_64_32S
    24: ("S+A-P", "<q"),      # R_X86_64_PC64
    41: ("G+A-P", "<i"),      # R_X86_64_GOTPCRELX
    42: ("G+A-P", "<i"),      # R_X86_64_REX_GOTPCRELX
}
_RANGE = {"<Q": (0, 1 << 64), "<q": (-(1 << 63), 1 << 63), "<I": (0, 1 << 32),
          "<i": (-(1 << 31), 1 << 31)}
_STUB = b"\xff\x25"           # jmp *disp32(%rip): a stub jumps through its slot
_STUB_BYTES = 8               # the jump (6 bytes) and two int3
_GOT_BYTES = 8


class _Object:
    """One relocatable object, parsed and checked (nothing mapped yet)."""

    def __init__(self, data: bytes):
        self.data = data
        if (len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1):
            raise Declined("not a little-endian ELF64 object")
        e_type, e_machine = struct.unpack_from("<HH", data, 16)
        shoff, = struct.unpack_from("<Q", data, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
        if e_type != 1 or e_machine != 62:
            raise Declined("not an x86-64 relocatable object")
        if shentsize != 64 or shnum == 0 or shoff + 64 * shnum > len(data) \
                or shstrndx >= shnum:
            raise Declined("section headers out of bounds")
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * k)
                         for k in range(shnum)]
        for _, kind, _, _, offset, size, _, _, _, _ in self.sections:
            if kind != _SHT_NOBITS and offset + size > len(data):   # (NOBITS: not loaded)
                raise Declined("a section runs past the end of the object")
        names = self.sections[shstrndx]
        self.names = [self._string(names, s[0]) for s in self.sections]
        self.loaded = [self._placed(k) for k in range(shnum)]   # loaded: True/False
        symtabs = [k for k, s in enumerate(self.sections) if s[1] == _SHT_SYMTAB]
        if len(symtabs) != 1:
            raise Declined("not exactly one symbol table")
        self.symtab = symtabs[0]
        self.symbols = self._symbols()
        self.relocations = [k for k, s in enumerate(self.sections) if s[1] == _SHT_RELA
                            and s[7] < shnum and self.loaded[s[7]]]
        for k in self.relocations:
            if self.sections[k][6] != self.symtab or self.sections[k][9] != 24:
                raise Declined("relocations against another symbol table")

    def _string(self, table, offset: int) -> str:
        start = table[4] + offset
        end = self.data.find(b"\0", start, table[4] + table[5])
        if offset >= table[5] or end < 0:
            raise Declined("a name outside its string table")
        return self.data[start:end].decode("utf-8", "surrogateescape")

    def _placed(self, k: int) -> bool:
        """Is section ``k`` part of the image? Declines what cannot be left out."""
        _, kind, flags, _, _, _, _, _, align, _ = self.sections[k]
        if kind in (_SHT_REL, _SHT_SYMTAB_SHNDX):
            raise Declined(f"section type {kind} ({self.names[k]})")
        if not flags & _SHF_ALLOC:
            return False
        if kind == _SHT_X86_64_UNWIND or self.names[k] == ".eh_frame":
            return False              # unwind tables: see the module docstring
        if kind != _SHT_PROGBITS or flags & ~_SHF_KNOWN:   # (NOBITS: .bss, writable)
            raise Declined(f"allocated section {self.names[k]} of type {kind}, flags {flags:#x}")
        if align & (align - 1) or align > _PAGE:
            raise Declined(f"section {self.names[k]} aligned to {align}")
        return True

    def _symbols(self) -> list[tuple[str, int, int, int, int]]:
        """(name, binding, type, section index, value) of every symbol."""
        _, _, _, _, offset, size, strtab, _, _, entsize = self.sections[self.symtab]
        if entsize != 24 or strtab >= len(self.sections):
            raise Declined("an unusual symbol table")
        out = []
        for at in range(offset, offset + size - size % 24, 24):
            name, info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", self.data, at)
            out.append((self._string(self.sections[strtab], name), info >> 4, info & 0xf,
                        shndx, value))
        return out


class _Image:
    """Where every section goes in one mapping: code (with the stubs) first, then, from the
    next page on, constants (with the GOT slots)."""

    def __init__(self, objects: list[_Object]):
        self.where: dict[tuple[int, int], int] = {}   # (object, section) -> offset
        code, data = [], []
        for i, obj in enumerate(objects):
            for k, placed in enumerate(obj.loaded):
                if placed:
                    (code if obj.sections[k][2] & _SHF_EXECINSTR else data).append((i, k))
        self.stubs, self.slots = _far_references(objects)
        end = self._lay_out(objects, code, 0)
        self.stub_at = _align(end, 16)
        self.code_size = _align(self.stub_at + _STUB_BYTES * len(self.stubs), _PAGE)
        end = self._lay_out(objects, data, self.code_size)
        self.slot_at = _align(end, _GOT_BYTES)
        self.size = _align(self.slot_at + _GOT_BYTES * len(self.slots), _PAGE)
        if self.size >= 1 << 31:
            raise Declined("an image beyond the reach of 32-bit offsets")

    def _lay_out(self, objects, sections, at: int) -> int:
        for i, k in sections:
            _, _, _, _, _, size, _, _, align, _ = objects[i].sections[k]
            at = _align(at, max(align, 1))
            self.where[(i, k)] = at
            at += size
        return at


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _far_references(objects: list[_Object]) -> tuple[dict, dict]:
    """The symbols that need a stub (calls that may go further than 2 GiB: to a symbol of
    another mapping) and those that need a GOT slot (GOT references, and every stub's
    target), each numbered, keyed (object, symbol)."""
    stubs: dict[tuple[int, int], int] = {}
    slots: dict[tuple[int, int], int] = {}
    for i, obj in enumerate(objects):
        for r in obj.relocations:
            for _, info, _ in _entries(obj, r):
                kind = _RELOCATIONS.get(info & 0xffffffff, ("", ""))[0]
                ref = (i, info >> 32)
                if kind == "L+A-P" and ref[1] < len(obj.symbols) \
                        and obj.symbols[ref[1]][3] == _SHN_UNDEF:
                    stubs.setdefault(ref, len(stubs))
                    slots.setdefault(ref, len(slots))     # the slot its stub jumps through
                elif kind == "G+A-P":
                    slots.setdefault(ref, len(slots))
    return stubs, slots


def _entries(obj: _Object, r: int):
    _, _, _, _, offset, size, _, _, _, _ = obj.sections[r]
    return [struct.unpack_from("<QQq", obj.data, at)
            for at in range(offset, offset + size - size % 24, 24)]


def load(objects: list[bytes], resolve: Callable[[str], int | None]) -> dict[str, int]:
    """Load ``objects`` into memory and return the addresses of the global symbols they
    define. An undefined symbol is looked up among those first, then by ``resolve`` (None:
    unknown). Raises Declined (nothing stays mapped) for anything this loader does not know."""
    try:
        parsed = [_Object(o) for o in objects]
        image = _Image(parsed)
    except (struct.error, IndexError, KeyError, ValueError, OverflowError) as e:
        raise Declined(f"a malformed object: {e}") from e   # (a loader bug, or not LLVM's)
    base = _mmap(None, image.size, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if base in (None, _MAP_FAILED):
        raise Declined(f"mmap failed (errno {ctypes.get_errno()})")
    try:
        defined = _defined(parsed, image, base)
        addresses = [_addresses(obj, i, image, base, defined, resolve)
                     for i, obj in enumerate(parsed)]
        memory = bytearray(image.size)
        _fill(memory, parsed, image)
        _relocate(memory, parsed, image, base, addresses)
        ctypes.memmove(base, (ctypes.c_char * image.size).from_buffer(memory), image.size)
        _protect(base, image)
    except BaseException as e:
        _munmap(base, image.size)
        if isinstance(e, (struct.error, IndexError, KeyError, ValueError, OverflowError)):
            raise Declined(f"a malformed object: {e}") from e
        raise
    return defined


def _defined(objects: list[_Object], image: _Image, base: int) -> dict[str, int]:
    """The global symbols the objects define (the first definition of a name wins, as in a
    weak/COMDAT link of identical copies)."""
    out: dict[str, int] = {}
    for i, obj in enumerate(objects):
        for name, bind, kind, shndx, value in obj.symbols:
            if bind == _STB_LOCAL or shndx == _SHN_UNDEF:
                continue
            if bind not in (_STB_GLOBAL, _STB_WEAK) or kind in (_STT_TLS, _STT_GNU_IFUNC):
                raise Declined(f"symbol {name}: binding {bind}, type {kind}")
            address = _defined_address(obj, i, image, base, shndx, value)
            if address is not None:
                out.setdefault(name, address)
    return out


def _defined_address(obj: _Object, i: int, image: _Image, base: int, shndx: int,
                     value: int) -> int | None:
    if shndx == _SHN_ABS:
        return value
    if shndx >= _SHN_LORESERVE or shndx >= len(obj.sections):
        raise Declined(f"a symbol in special section {shndx:#x}")
    if not obj.loaded[shndx]:
        return None                  # in a section left out (not referenced by loaded code)
    return base + image.where[(i, shndx)] + value


def _addresses(obj: _Object, i: int, image: _Image, base: int, defined: dict,
               resolve) -> list[int | None]:
    """The address of each symbol of ``obj`` (None: in a section left out; referencing one
    declines in _relocate)."""
    out = []
    for name, bind, _, shndx, value in obj.symbols:
        if shndx != _SHN_UNDEF:
            out.append(_defined_address(obj, i, image, base, shndx, value))
        elif not name:
            out.append(0)            # the null symbol (relocations with no symbol)
        else:
            address = defined.get(name) or resolve(name)
            if not address:
                raise Declined(f"cannot resolve {name}")
            out.append(address)
    return out


def _fill(memory: bytearray, objects: list[_Object], image: _Image) -> None:
    for (i, k), at in image.where.items():
        _, kind, _, _, offset, size, _, _, _, _ = objects[i].sections[k]
        if kind == _SHT_PROGBITS:
            memory[at:at + size] = objects[i].data[offset:offset + size]
    for n in range(len(image.stubs)):
        at = image.stub_at + _STUB_BYTES * n
        memory[at:at + _STUB_BYTES] = _STUB + b"\0\0\0\0\xcc\xcc"


def _relocate(memory: bytearray, objects: list[_Object], image: _Image, base: int,
              addresses: list[list[int | None]]) -> None:
    for ref, n in image.stubs.items():      # each stub jumps through its symbol's slot
        stub = image.stub_at + _STUB_BYTES * n
        struct.pack_into("<i", memory, stub + 2, _got_slot(image, image.slots[ref]) - (stub + 6))
    for (i, symbol), n in image.slots.items():
        target = addresses[i][symbol] if symbol < len(addresses[i]) else None
        if target is None:
            raise Declined("a GOT slot for a symbol left out")
        struct.pack_into("<Q", memory, _got_slot(image, n), target)
    for i, obj in enumerate(objects):
        for r in obj.relocations:
            section = obj.sections[r][7]
            start, size = image.where[(i, section)], obj.sections[section][5]
            for offset, info, addend in _entries(obj, r):
                _apply(memory, image, base, addresses[i], (i, info >> 32),
                       info & 0xffffffff, start, size, offset, addend)


def _got_slot(image: _Image, n: int) -> int:
    return image.slot_at + _GOT_BYTES * n


def _apply(memory, image: _Image, base: int, addresses, ref, rtype: int, start: int,
           size: int, offset: int, addend: int) -> None:
    if rtype not in _RELOCATIONS:
        raise Declined(f"relocation type {rtype}")
    kind, field = _RELOCATIONS[rtype]
    width = struct.calcsize(field)
    if offset + width > size or ref[1] >= len(addresses) or addresses[ref[1]] is None:
        raise Declined("a relocation outside its section or to a symbol left out")
    place = base + start + offset
    if kind == "S+A":
        value = addresses[ref[1]] + addend
    elif kind == "S+A-P":
        value = addresses[ref[1]] + addend - place
    elif kind == "G+A-P":
        value = base + _got_slot(image, image.slots[ref]) + addend - place
    else:                                  # a call: direct when in reach, else its stub
        value = addresses[ref[1]] + addend - place
        if ref in image.stubs and not -(1 << 31) <= value < 1 << 31:
            value = base + image.stub_at + _STUB_BYTES * image.stubs[ref] + addend - place
    low, high = _RANGE[field]
    if not low <= value < high:
        raise Declined(f"relocation type {rtype}: value {value:#x} out of range")
    struct.pack_into(field, memory, start + offset, value)


def _protect(base: int, image: _Image) -> None:
    """Code read + execute, the rest read-only."""
    regions = ((0, image.code_size, _PROT_READ | _PROT_EXEC),
               (image.code_size, image.size - image.code_size, _PROT_READ))
    for at, size, prot in regions:
        if size and _mprotect(base + at, size, prot) != 0:
            raise Declined(f"mprotect failed (errno {ctypes.get_errno()})")


def executable(code: bytes) -> int:
    """The address of a read + execute copy of ``code`` (position-independent machine code
    that references nothing), mapped for the rest of the process."""
    size = _align(max(len(code), 1), _PAGE)
    base = _mmap(None, size, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if base in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), "mmap failed")
    ctypes.memmove(base, code, len(code))
    if _mprotect(base, size, _PROT_READ | _PROT_EXEC) != 0:
        _munmap(base, size)
        raise OSError(ctypes.get_errno(), "mprotect failed")
    return base
