"""Tar header blocks: deterministic ustar/pax encoding, and tolerant, bounds-checked decoding.

What we write: one 512-byte ustar header per member with mode 0644, uid/gid 0, empty
uname/gname and mtime 0, so the same samples always give the same bytes. A pax header
('././@PaxHeader', mtime 0) precedes a member only when ustar cannot hold it: a name longer
than 100 bytes or not ASCII, or a size of 8 GiB or more.

What we read: POSIX ustar (with prefix), GNU ('ustar  ', long names 'L', base-256 numbers),
v7, and pax 'x' headers (path, size); global pax headers 'g' are ignored.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
END_OF_ARCHIVE = bytes(2 * BLOCK)
MAX_USTAR_SIZE = 8**11 - 1

REGULAR = (b"0", b"\x00", b"7")  # '7' is contiguous file, read as regular by GNU tar
DIRECTORY = b"5"
PAX = b"x"
PAX_GLOBAL = b"g"
GNU_LONG_NAME = b"L"
GNU_LONG_LINK = b"K"


def _template() -> bytearray:
    block = bytearray(BLOCK)
    block[100:108] = b"0000644\x00"  # mode
    block[108:116] = b"0000000\x00"  # uid
    block[116:124] = b"0000000\x00"  # gid
    block[136:148] = b"00000000000\x00"  # mtime
    block[257:265] = b"ustar\x0000"  # POSIX magic + version
    block[329:337] = b"0000000\x00"  # devmajor
    block[337:345] = b"0000000\x00"  # devminor
    return block


# The header block every member we write starts from (all but name, size, checksum and typeflag),
# and its share of the checksum, which counts the checksum field itself as spaces.
USTAR_TEMPLATE = bytes(_template())
USTAR_TEMPLATE_SUM = sum(USTAR_TEMPLATE) + 8 * ord(" ")

_MODE_TO_SIZE, _MTIME, _AFTER_TYPEFLAG = (
    USTAR_TEMPLATE[100:124],
    USTAR_TEMPLATE[136:148],
    USTAR_TEMPLATE[157:],
)


def _ustar(name: bytes, size: int, typeflag: bytes) -> bytes:
    size_field = b"%011o\x00" % size
    checksum = b"%06o\x00 " % (USTAR_TEMPLATE_SUM + sum(name) + sum(size_field) + typeflag[0])
    return b"".join(
        (
            name.ljust(100, b"\x00"),
            _MODE_TO_SIZE,
            size_field,
            _MTIME,
            checksum,
            typeflag,
            _AFTER_TYPEFLAG,
        )
    )


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))  # the length counts its own digits
    return str(length).encode() + body


def padding(size: int) -> bytes:
    """Zero bytes that round a payload of ``size`` up to a whole block."""
    return bytes(-size % BLOCK)


def member_header(name: str, size: int) -> bytes:
    """Header block(s) for a regular file ``name`` of ``size`` bytes, pax-prefixed only when
    needed."""
    raw = name.encode("utf-8", "surrogateescape")
    records = b""
    if len(raw) > 100 or not raw.isascii():
        records += _pax_record("path", name)
        raw = name.encode("ascii", "replace")[:100]
    if size > MAX_USTAR_SIZE:
        records += _pax_record("size", str(size))
        size = 0
    head = b""
    if records:
        head = _ustar(b"././@PaxHeader", len(records), PAX) + records + padding(len(records))
    return head + _ustar(raw, size, b"0")


class HeaderError(ValueError):
    """Bytes that are not a valid tar header; the scanner turns it into ShardCorruptError."""


@dataclass(frozen=True)
class Header:
    """The fields of one decoded header block that a reader needs."""

    name: bytes
    size: int
    typeflag: bytes
    linkname: bytes


def _cstr(field: bytes) -> bytes:
    end = field.find(b"\x00")
    return field if end < 0 else field[:end]


def _number(field: bytes, what: str) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        if field[0] == 0xFF:
            raise HeaderError(f"negative {what}")
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.replace(b"\x00", b" ").strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise HeaderError(f"{what} field {bytes(field)!r} is not an octal number") from None


def _checksum_ok(block: bytes, stored: int) -> bool:
    # Adler-32's low half is 1 + sum(bytes) mod 65521: the sum tar wants, computed in C.
    # A false match needs the sum off by a multiple of 65521, far beyond any flipped byte.
    a = zlib.adler32(block[156:], zlib.adler32(b"        ", zlib.adler32(block[:148])))
    if (a & 0xFFFF) == (1 + stored) % 65521:
        return True
    # Some old tars summed signed chars.
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + b"        " + block[156:])
    return signed == stored


def parse_header(block: bytes) -> Header:
    """Decode one 512-byte header block, verifying its checksum."""
    stored = _number(block[148:156], "checksum")
    if not _checksum_ok(block, stored):
        raise HeaderError("header checksum mismatch")
    name = _cstr(block[0:100])
    if block[257:263] == b"ustar\x00":  # POSIX: names longer than 100 bytes use the prefix
        prefix = _cstr(block[345:500])
        if prefix:
            name = prefix + b"/" + name
    return Header(name, _number(block[124:136], "size"), block[156:157], _cstr(block[157:257]))


def parse_pax(data: bytes) -> dict[str, str]:
    """Decode pax extended-header records ('LEN key=value\\n' each)."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if data[pos] == 0:  # trailing NUL padding some writers leave
            break
        space = data.find(b" ", pos)
        if space < 0 or not data[pos:space].isdigit():
            raise HeaderError("malformed pax record length")
        length = int(data[pos:space])
        record = data[space + 1 : pos + length]
        if (
            length <= space - pos
            or pos + length > len(data)
            or not record.endswith(b"\n")
            or b"=" not in record
        ):
            raise HeaderError("malformed pax record")
        key, _, value = record[:-1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out
