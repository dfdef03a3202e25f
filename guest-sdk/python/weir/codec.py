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
from itertools import chain, repeat

__all__ = [
    "DecodeError",
    "EncodeError",
    "decode",
    "encode",
    "BatchWriter",
    "type_name",
]

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_HEADER = struct.Struct("<II")
# A row's tag, its first value's kind and that value's length: a string
# row of a one-field batch read or written in one call.
_TAG_LEN = struct.Struct("<IBI")
_KIND_LEN = struct.Struct("<BI")
_KIND_I64 = struct.Struct("<Bq")
_KIND_F64 = struct.Struct("<Bd")

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


def _header(buf):
    """``(rows, arity)`` of a buffer whose header is sound."""
    if len(buf) > 0xFFFFFFFF:
        raise DecodeError(0, "batch is larger than 4 GiB")
    _need(buf, 0, 4)
    (count,) = _U32.unpack_from(buf, 0)
    _need(buf, 4, 4)
    (arity,) = _U32.unpack_from(buf, 4)
    # Each row takes at least its tag and one byte per value.
    if count * (4 + arity) > len(buf) - 8:
        raise DecodeError(8, f"header claims {count} rows of {arity} values, the buffer holds {len(buf)} bytes")
    return count, arity


def _rows_checked(buf, count, arity):
    """The rows, every read checked: names the first fault it finds."""
    rows = []
    value = _value
    pos = 8
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
    return rows


class _Malformed(Exception):
    """Raised by the fast reader at a fault it does not name."""


def _fast_value(buf, pos):
    """The value at ``pos`` and the position after it; a string or bytes
    that runs past the end comes back short, which the caller notices."""
    kind = buf[pos]
    if kind == 5:
        start = pos + 5
        end = start + _U32.unpack_from(buf, pos + 1)[0]
        return buf[start:end].decode(), end
    if kind == 3:
        return _I64.unpack_from(buf, pos + 1)[0], pos + 9
    if kind == 0:
        return None, pos + 1
    if kind == 2:
        return True, pos + 1
    if kind == 1:
        return False, pos + 1
    if kind == 4:
        return _F64.unpack_from(buf, pos + 1)[0], pos + 9
    if kind == 6:
        start = pos + 5
        end = start + _U32.unpack_from(buf, pos + 1)[0]
        return buf[start:end], end
    raise _Malformed


def _ascii_rows(buf, count):
    """The rows of a one-field batch of ASCII strings, each cut from the
    buffer read once as text; None for any other batch. Raises at a fault,
    as ``_rows_fast`` does."""
    text = buf.decode("latin-1")
    strings = [None] * count
    tags = [0] * count
    tag_len = _TAG_LEN.unpack_from
    pos = 8
    for i in range(count):
        tags[i], kind, length = tag_len(buf, pos)
        if kind != 5:
            return None
        start = pos + 9
        pos = start + length
        strings[i] = text[start:pos]
    if pos != len(buf):
        raise _Malformed
    # Latin-1 text is the UTF-8 text only where every byte is ASCII.
    if not "".join(strings).isascii():
        return None
    return [(tag, [string]) for tag, string in zip(tags, strings)]


def _rows_fast(buf, count, arity):
    """The rows of a sound buffer, with as few reads per value as the
    encoding allows; raises at any fault, which the checked reader then
    names. Positions only grow, so a value that ran past the end leaves
    the last position past it."""
    if arity == 1:
        rows = _ascii_rows(buf, count)
        if rows is not None:
            return rows
    rows = [None] * count
    pos = 8
    value = _fast_value
    if arity == 1:
        tag_len = _TAG_LEN.unpack_from
        u32 = _U32.unpack_from
        for i in range(count):
            if buf[pos + 4] == 5:
                tag, _, length = tag_len(buf, pos)
                start = pos + 9
                pos = start + length
                rows[i] = (tag, [buf[start:pos].decode()])
            else:
                v, after = value(buf, pos + 4)
                rows[i] = (u32(buf, pos)[0], [v])
                pos = after
    else:
        for i in range(count):
            tag = _U32.unpack_from(buf, pos)[0]
            pos += 4
            values = [None] * arity
            for k in range(arity):
                values[k], pos = value(buf, pos)
            rows[i] = (tag, values)
    if pos != len(buf):
        raise _Malformed
    return rows


def decode(buf):
    """Checks a whole buffer and returns ``(arity, rows)``, each row a
    ``(tag, values)`` pair with ``values`` a list."""
    buf = bytes(buf)
    count, arity = _header(buf)
    try:
        rows = _rows_fast(buf, count, arity)
    except (_Malformed, struct.error, IndexError, UnicodeDecodeError):
        rows = _rows_checked(buf, count, arity)
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


_BOOLS = {False: b"\x01", True: b"\x02"}

# What follows a row's tag when its one value is a string shorter than 256
# bytes, as latin-1 text (one character per byte): the kind, the length.
_SHORT_HEADS = ["\x05" + chr(n) + "\0\0\0" for n in range(256)]

# Tags as latin-1 text, kept for the first rows of every batch.
_TAG_TEXTS = []
_KEPT_TAGS = 1 << 14


def _tag_texts(count):
    """The texts of tags 0 to ``count`` - 1."""
    if len(_TAG_TEXTS) < min(count, _KEPT_TAGS):
        _TAG_TEXTS.extend(_U32.pack(t).decode("latin-1") for t in range(len(_TAG_TEXTS), min(count, _KEPT_TAGS)))
    if count <= _KEPT_TAGS:
        return _TAG_TEXTS[:count]
    return _TAG_TEXTS + [_U32.pack(t).decode("latin-1") for t in range(_KEPT_TAGS, count)]


def _column_pieces(column):
    """The encoded values of a column whose values are all of one plain
    type, as iterables of byte strings to interleave (one or two pieces per
    value), or None when the column needs value-by-value writing."""
    kinds = set(map(type, column))
    if len(kinds) != 1:
        return None if kinds else []
    (kind,) = kinds
    if kind is str:
        encoded = list(map(str.encode, column))
        return [map(_KIND_LEN.pack, repeat(5), map(len, encoded)), encoded]
    if kind is int:
        if min(column) < _I64_MIN or max(column) > _I64_MAX:
            return None
        return [map(_KIND_I64.pack, repeat(3), column)]
    if kind is float:
        return [map(_KIND_F64.pack, repeat(4), column)]
    if kind is bool:
        return [map(_BOOLS.__getitem__, column)]
    if kind is bytes:
        return [map(_KIND_LEN.pack, repeat(6), map(len, column)), column]
    if kind is type(None):
        return [repeat(b"\x00", len(column))]
    return None


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
        if self.arity == 1 and type(values[0]) is str:
            b = values[0].encode()
            out += _TAG_LEN.pack(tag, 5, len(b))
            out += b
            self.rows += 1
            return
        mark = len(out)
        out += _U32.pack(tag)
        try:
            for v in values:
                _write(out, v)
        except EncodeError:
            del out[mark:]
            raise
        self.rows += 1

    def push_strings(self, counts, strings):
        """Appends one-field rows holding ``strings``: the first
        ``counts[0]`` tagged 0, the next ``counts[1]`` tagged 1, and so on,
        all written at once. Returns False, having appended nothing, unless
        every value is a string (push those rows one by one)."""
        if self.arity != 1 or sum(counts) != len(strings):
            return False
        try:
            text = "".join(strings)
        except TypeError:
            return False
        if text.isascii():
            try:
                heads = list(map(_SHORT_HEADS.__getitem__, map(len, strings)))
            except IndexError:
                heads = None
            if heads is not None:
                # Every byte one character: the rows as latin-1 text, put
                # together in a list of their pieces and encoded at once.
                pieces = [None] * (3 * len(strings))
                pieces[0::3] = chain.from_iterable(map(repeat, _tag_texts(len(counts)), counts))
                pieces[1::3] = heads
                pieces[2::3] = strings
                self._out += "".join(pieces).encode("latin-1")
                self.rows += len(strings)
                return True
        encoded = list(map(str.encode, strings))
        tags = chain.from_iterable(map(repeat, range(len(counts)), counts))
        self._out += b"".join(chain.from_iterable(zip(map(_TAG_LEN.pack, tags, repeat(5), map(len, encoded)), encoded)))
        self.rows += len(strings)
        return True

    def push_columns(self, tags, columns):
        """Appends one row per tag, the row's values taken from
        ``columns`` (one list per value, each as long as ``tags``): whole
        columns of one plain type are encoded at once, not value by value.
        Raises EncodeError as ``push`` does, having appended nothing."""
        if len(columns) != self.arity:
            raise EncodeError(f"{len(columns)} columns where {self.arity} values are declared")
        count = len(tags)
        for column in columns:
            if len(column) != count:
                raise EncodeError(f"a column of {len(column)} values for {count} rows")
        pieces = []
        for column in columns:
            encoded = _column_pieces(column)
            if encoded is None:
                pieces = None
                break
            pieces += encoded
        if pieces is None:
            mark, rows = len(self._out), self.rows
            try:
                for tag, values in zip(tags, zip(*columns) if columns else repeat((), count)):
                    self.push(tag, values)
            except EncodeError:
                del self._out[mark:]
                self.rows = rows
                raise
            return
        self._out += b"".join(chain.from_iterable(zip(map(_U32.pack, tags), *pieces)))
        self.rows += count

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
