"""Weir's packed batch encoding (docs/wire-format.md), byte for byte as the
Rust SDK writes it.

A batch crosses the boundary as one byte buffer::

    batch := rows:u32 arity:u32 row*          exactly `rows` rows
    row   := tag:u32 value*                   exactly `arity` values
    value := 0 | 1 | 2                        None | False | True
           | 3 i64 | 4 f64                    int | float
           | 5 len:u32 utf8 | 6 len:u32 bytes str | bytes

All integers are little-endian. Values are plain Python objects: ``None``,
``bool``, ``int`` (64-bit signed), ``float``, ``str`` and ``bytes``.
"""

import struct

__all__ = ["DecodeError", "EncodeError", "decode", "encode", "BatchWriter", "type_name"]

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_HEADER = struct.Struct("<II")

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


class DecodeError(ValueError):
    """A buffer that is not a valid packed batch."""

    def __init__(self, offset, reason):
        super().__init__(f"malformed batch at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class EncodeError(ValueError):
    """A value the encoding cannot hold, or a row of the wrong arity."""


def type_name(value):
    """The name of a value's type, as every SDK spells it in errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "i64"
    if isinstance(value, float):
        return "f64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    return type(value).__name__


def _need(buf, pos, n):
    if pos + n > len(buf):
        raise DecodeError(pos, f"needs {n} more bytes, {len(buf) - pos} left")


def _value(buf, pos):
    """The value at `pos` and the position after it."""
    _need(buf, pos, 1)
    kind = buf[pos]
    pos += 1
    if kind == 0:
        return None, pos
    if kind == 1:
        return False, pos
    if kind == 2:
        return True, pos
    if kind == 3:
        _need(buf, pos, 8)
        return _I64.unpack_from(buf, pos)[0], pos + 8
    if kind == 4:
        _need(buf, pos, 8)
        return _F64.unpack_from(buf, pos)[0], pos + 8
    if kind == 5 or kind == 6:
        _need(buf, pos, 4)
        (length,) = _U32.unpack_from(buf, pos)
        pos += 4
        _need(buf, pos, length)
        raw = bytes(buf[pos : pos + length])
        if kind == 6:
            return raw, pos + length
        try:
            return raw.decode("utf-8"), pos + length
        except UnicodeDecodeError as e:
            raise DecodeError(pos + e.start, "string is not valid UTF-8") from None
    raise DecodeError(pos - 1, f"unknown value kind {kind}")


def decode(buf):
    """Checks a whole buffer and returns ``(arity, rows)``, each row a
    ``(tag, values)`` pair with ``values`` a list."""
    buf = bytes(buf)
    if len(buf) > 0xFFFFFFFF:
        raise DecodeError(0, "batch is larger than 4 GiB")
    _need(buf, 0, 4)
    (count,) = _U32.unpack_from(buf, 0)
    _need(buf, 4, 4)
    (arity,) = _U32.unpack_from(buf, 4)
    pos = 8
    # Each row takes at least its tag and one byte per value.
    if count * (4 + arity) > len(buf) - pos:
        raise DecodeError(pos, f"header claims {count} rows of {arity} values, the buffer holds {len(buf)} bytes")
    rows = []
    value = _value
    for _ in range(count):
        _need(buf, pos, 4)
        (tag,) = _U32.unpack_from(buf, pos)
        pos += 4
        values = []
        for _ in range(arity):
            v, pos = value(buf, pos)
            values.append(v)
        rows.append((tag, values))
    if pos != len(buf):
        raise DecodeError(pos, f"{len(buf) - pos} bytes after the last row")
    return arity, rows


def _write(out, v):
    if v is None:
        out.append(0)
    elif v is True:
        out.append(2)
    elif v is False:
        out.append(1)
    elif isinstance(v, str):
        b = v.encode("utf-8")
        out.append(5)
        out += _U32.pack(len(b))
        out += b
    elif isinstance(v, int):
        if not _I64_MIN <= v <= _I64_MAX:
            raise EncodeError(f"integer {v} does not fit in 64 bits")
        out.append(3)
        out += _I64.pack(v)
    elif isinstance(v, float):
        out.append(4)
        out += _F64.pack(v)
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        out.append(6)
        out += _U32.pack(len(b))
        out += b
    else:
        raise EncodeError(f"cannot encode a value of type {type(v).__name__}")


class BatchWriter:
    """Builds a packed batch of rows of ``arity`` values."""

    __slots__ = ("arity", "rows", "_out")

    def __init__(self, arity):
        self.arity = arity
        self.rows = 0
        self._out = bytearray(8)

    def push(self, tag, values):
        """Appends a row; raises EncodeError when it does not hold
        ``arity`` values."""
        if len(values) != self.arity:
            raise EncodeError(f"a row of {len(values)} values where {self.arity} are declared")
        out = self._out
        mark = len(out)
        out += _U32.pack(tag)
        try:
            for v in values:
                _write(out, v)
        except EncodeError:
            del out[mark:]
            raise
        self.rows += 1

    def finish(self):
        """The batch's bytes."""
        _HEADER.pack_into(self._out, 0, self.rows, self.arity)
        return bytes(self._out)


def encode(arity, rows):
    """Encodes ``(tag, values)`` rows of ``arity`` values."""
    writer = BatchWriter(arity)
    for tag, values in rows:
        writer.push(tag, values)
    return writer.finish()
