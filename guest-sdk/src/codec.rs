//! Weir's packed batch encoding, shared by the host and every guest.
//!
//! A batch crosses the boundary as one byte buffer, never as a list of
//! records: one call per batch costs microseconds, a record per tuple costs
//! milliseconds. Layout (all integers little-endian):
//!
//! ```text
//! batch := rows:u32 arity:u32 row*          (exactly `rows` rows)
//! row   := tag:u32 value*                   (exactly `arity` values)
//! value := 0                                null
//!        | 1 | 2                            false | true
//!        | 3 i64                            signed integer
//!        | 4 f64                            float (IEEE 754 bits)
//!        | 5 len:u32 utf8-bytes             string
//!        | 6 len:u32 bytes                  bytes
//! ```
//!
//! The tag's meaning depends on the call: the index of the input row an
//! emitted row extends, or the group a row belongs to. Decoding validates the
//! whole buffer once; reading fields afterwards borrows from it in place.

use std::borrow::Cow;

const HEADER_LEN: usize = 8;
/// A bound no row's tag reaches.
const ANY_TAG: u64 = 1 << 32;

/// A tuple field value, owned.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// No value.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    I64(i64),
    /// A 64-bit float.
    F64(f64),
    /// A UTF-8 string.
    Str(String),
    /// Raw bytes.
    Bytes(Vec<u8>),
}

/// A tuple field value borrowed from a packed batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    /// No value.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    I64(i64),
    /// A 64-bit float.
    F64(f64),
    /// A UTF-8 string.
    Str(&'a str),
    /// Raw bytes.
    Bytes(&'a [u8]),
}

/// The kind of a value: the byte that starts each value in every encoding
/// of values Weir has, the packed batches here as much as the host's stored
/// records and ordered keys. What follows the kind is each encoding's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ValueKind {
    /// No value.
    Null = 0,
    /// The boolean false.
    False = 1,
    /// The boolean true.
    True = 2,
    /// A signed 64-bit integer.
    I64 = 3,
    /// A 64-bit float.
    F64 = 4,
    /// A UTF-8 string.
    Str = 5,
    /// Raw bytes.
    Bytes = 6,
}

impl ValueKind {
    /// The kind `byte` stands for; `None` for a byte that stands for none.
    #[inline]
    pub const fn from_byte(byte: u8) -> Option<ValueKind> {
        Some(match byte {
            0 => ValueKind::Null,
            1 => ValueKind::False,
            2 => ValueKind::True,
            3 => ValueKind::I64,
            4 => ValueKind::F64,
            5 => ValueKind::Str,
            6 => ValueKind::Bytes,
            _ => return None,
        })
    }

    /// The byte that stands for this kind.
    #[inline]
    pub const fn byte(self) -> u8 {
        self as u8
    }

    /// The kind of `value`.
    #[inline]
    pub const fn of(value: ValueRef<'_>) -> ValueKind {
        match value {
            ValueRef::Null => ValueKind::Null,
            ValueRef::Bool(false) => ValueKind::False,
            ValueRef::Bool(true) => ValueKind::True,
            ValueRef::I64(_) => ValueKind::I64,
            ValueRef::F64(_) => ValueKind::F64,
            ValueRef::Str(_) => ValueKind::Str,
            ValueRef::Bytes(_) => ValueKind::Bytes,
        }
    }
}

impl Value {
    /// Borrows this value.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Bool(b) => ValueRef::Bool(*b),
            Value::I64(i) => ValueRef::I64(*i),
            Value::F64(f) => ValueRef::F64(*f),
            Value::Str(s) => ValueRef::Str(s),
            Value::Bytes(b) => ValueRef::Bytes(b),
        }
    }
}

impl ValueRef<'_> {
    /// Copies this value into an owned one.
    pub fn to_owned(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Bool(b) => Value::Bool(b),
            ValueRef::I64(i) => Value::I64(i),
            ValueRef::F64(f) => Value::F64(f),
            ValueRef::Str(s) => Value::Str(s.to_owned()),
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
        }
    }

    /// The name of this value's type, for error messages.
    pub fn type_name(self) -> &'static str {
        match self {
            ValueRef::Null => "null",
            ValueRef::Bool(_) => "bool",
            ValueRef::I64(_) => "i64",
            ValueRef::F64(_) => "f64",
            ValueRef::Str(_) => "string",
            ValueRef::Bytes(_) => "bytes",
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident($conv:expr)),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value { Value::$variant($conv(v)) }
        }
    )*};
}
value_from!(bool => Bool(|v| v), i64 => I64(|v| v), i32 => I64(i64::from), u32 => I64(i64::from),
    f64 => F64(|v| v), String => Str(|v| v), &str => Str(str::to_owned), Vec<u8> => Bytes(|v| v));

macro_rules! value_ref_from {
    ($($t:ty => $variant:ident($conv:expr)),* $(,)?) => {$(
        impl<'a> From<$t> for ValueRef<'a> {
            fn from(v: $t) -> ValueRef<'a> { ValueRef::$variant($conv(v)) }
        }
    )*};
}
value_ref_from!(bool => Bool(|v| v), i64 => I64(|v| v), i32 => I64(i64::from),
    u32 => I64(i64::from), f64 => F64(|v| v), &'a str => Str(|v| v), &'a [u8] => Bytes(|v| v),
    &'a String => Str(String::as_str));

impl<'a> From<&'a Value> for ValueRef<'a> {
    fn from(v: &'a Value) -> ValueRef<'a> {
        v.as_ref()
    }
}

/// Why a buffer is not a valid packed batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed batch at byte {offset}: {reason}")]
pub struct DecodeError {
    /// Byte offset at which decoding failed.
    pub offset: usize,
    /// What was wrong there.
    pub reason: String,
}

/// What an encoding of values writes after a kind byte; the kind bytes
/// ([`ValueKind`]) are shared by every encoding, so [`write_value_as`]
/// writes them and leaves the rest to the encoding.
pub trait ValueEncoding {
    /// Writes an integer's bytes.
    fn int(out: &mut Vec<u8>, i: i64);
    /// Writes a float's bytes.
    fn float(out: &mut Vec<u8>, f: f64);
    /// Writes `kind` (a string's or bytes') and then `bytes` as the
    /// encoding keeps them; together, so that an encoding can write its
    /// head in one copy.
    fn bytes(out: &mut Vec<u8>, kind: ValueKind, bytes: &[u8]);
}

/// Appends `value` to `out` in encoding `E`.
#[inline]
pub fn write_value_as<E: ValueEncoding>(out: &mut Vec<u8>, value: ValueRef<'_>) {
    match value {
        ValueRef::Null => out.push(ValueKind::Null.byte()),
        ValueRef::Bool(false) => out.push(ValueKind::False.byte()),
        ValueRef::Bool(true) => out.push(ValueKind::True.byte()),
        ValueRef::I64(i) => {
            out.push(ValueKind::I64.byte());
            E::int(out, i);
        }
        ValueRef::F64(f) => {
            out.push(ValueKind::F64.byte());
            E::float(out, f);
        }
        ValueRef::Str(s) => E::bytes(out, ValueKind::Str, s.as_bytes()),
        ValueRef::Bytes(b) => E::bytes(out, ValueKind::Bytes, b),
    }
}

/// The batch encoding: fixed-width little-endian numbers, strings and
/// bytes after a 4-byte length.
pub struct BatchEncoding;

impl ValueEncoding for BatchEncoding {
    #[inline]
    fn int(out: &mut Vec<u8>, i: i64) {
        out.extend_from_slice(&i.to_le_bytes());
    }

    #[inline]
    fn float(out: &mut Vec<u8>, f: f64) {
        out.extend_from_slice(&f.to_le_bytes());
    }

    #[inline]
    fn bytes(out: &mut Vec<u8>, kind: ValueKind, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).expect("a value is at most 4 GiB");
        let mut head = [0u8; 5];
        head[0] = kind.byte();
        head[1..].copy_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&head);
        extend_short(out, bytes);
    }
}

/// Appends one value to `out` in the batch encoding.
#[inline]
pub fn write_value(out: &mut Vec<u8>, value: ValueRef<'_>) {
    write_value_as::<BatchEncoding>(out, value)
}

/// `out.extend_from_slice(bytes)`, with strings of up to 16 bytes (most
/// words, keys and numbers) copied as fixed-size chunks that overlap. A
/// copy of varying size is a call to `memcpy`, and in a Wasm guest a call
/// out of the sandbox into the runtime, which costs more than the copy.
#[inline]
fn extend_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if n > 16 {
        out.extend_from_slice(bytes);
        return;
    }
    let at = out.len();
    out.extend_from_slice(&[0u8; 16]);
    let dst = &mut out[at..at + 16];
    match n {
        8..=16 => {
            dst[..8].copy_from_slice(&bytes[..8]);
            dst[n - 8..n].copy_from_slice(&bytes[n - 8..]);
        }
        4..=7 => {
            dst[..4].copy_from_slice(&bytes[..4]);
            dst[n - 4..n].copy_from_slice(&bytes[n - 4..]);
        }
        1..=3 => {
            dst[0] = bytes[0];
            dst[n / 2] = bytes[n / 2];
            dst[n - 1] = bytes[n - 1];
        }
        _ => {}
    }
    out.truncate(at + n);
}

/// `bytes` as a string if they are UTF-8. Most strings are short and
/// ASCII: checking that inline is several times cheaper than the general
/// check, a call per string.
#[inline]
pub fn utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    if is_ascii(bytes) {
        // SAFETY: ASCII is UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes)
    }
}

/// Whether `bytes` are ASCII, checked eight bytes at a time, the last
/// eight overlapping the others: `<[u8]>::is_ascii` reads words of a
/// `usize`, four bytes in a Wasm guest, and walks a short string's ends a
/// byte at a time.
#[inline]
fn is_ascii(bytes: &[u8]) -> bool {
    let Some(last) = bytes.last_chunk::<8>() else { return bytes.is_ascii() };
    let (chunks, _) = bytes.as_chunks::<8>();
    let high = chunks.iter().fold(u64::from_le_bytes(*last), |high, chunk| high | u64::from_le_bytes(*chunk));
    high & 0x8080_8080_8080_8080 == 0
}

/// Decodes the value at the start of `buf`, returning it and the bytes after it.
pub fn read_value(buf: &[u8]) -> Result<(ValueRef<'_>, &[u8]), DecodeError> {
    let mut cursor = Cursor { buf, pos: 0 };
    let value = cursor.value()?;
    Ok((value, &buf[cursor.pos..]))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError { offset: self.pos, reason: reason.into() }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.err(format!("needs {n} more bytes, {} left", self.buf.len() - self.pos)))?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    #[inline]
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    #[inline]
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    #[inline]
    fn value(&mut self) -> Result<ValueRef<'a>, DecodeError> {
        let kind = self.take(1)?[0];
        Ok(match ValueKind::from_byte(kind) {
            Some(ValueKind::Null) => ValueRef::Null,
            Some(ValueKind::False) => ValueRef::Bool(false),
            Some(ValueKind::True) => ValueRef::Bool(true),
            Some(ValueKind::I64) => ValueRef::I64(self.u64()? as i64),
            Some(ValueKind::F64) => ValueRef::F64(f64::from_bits(self.u64()?)),
            Some(ValueKind::Str) => {
                let len = self.u32()? as usize;
                let start = self.pos;
                let bytes = self.take(len)?;
                ValueRef::Str(utf8(bytes).map_err(|e| DecodeError {
                    offset: start + e.valid_up_to(),
                    reason: "string is not valid UTF-8".into(),
                })?)
            }
            Some(ValueKind::Bytes) => {
                let len = self.u32()? as usize;
                ValueRef::Bytes(self.take(len)?)
            }
            None => {
                self.pos -= 1;
                return Err(self.err(format!("unknown value kind {kind}")));
            }
        })
    }
}

/// A row had a different number of values than its batch's arity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a row of {found} values where {expected} are declared")]
pub struct ArityError {
    /// Values each row must hold.
    pub expected: usize,
    /// Values the row had.
    pub found: usize,
}

/// One value's encoded bytes, taken from a valid batch's row, to copy into
/// another batch without decoding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodedValue<'a>(&'a [u8]);

impl<'a> EncodedValue<'a> {
    /// The encoded bytes.
    #[inline]
    pub fn bytes(self) -> &'a [u8] {
        self.0
    }
}

/// Builds a packed batch row by row, with no allocation per row.
#[derive(Debug)]
pub struct BatchWriter {
    buf: Vec<u8>,
    arity: u32,
    rows: u32,
    /// Where each row starts, for [`BatchWriter::finish_batch`]; `None`
    /// where only the bytes are wanted ([`BatchWriter::for_bytes`]).
    row_starts: Option<Vec<u32>>,
    values_in_row: u32,
}

impl BatchWriter {
    /// Starts a batch whose rows hold `arity` values each.
    pub fn new(arity: usize) -> BatchWriter {
        BatchWriter::with_capacity(arity, 0)
    }

    /// Starts a batch with room for `bytes` bytes.
    pub fn with_capacity(arity: usize, bytes: usize) -> BatchWriter {
        BatchWriter::reusing(arity, bytes, Buffers::default())
    }

    /// Starts a batch with room for `bytes` bytes, written into `buffers`
    /// (a dropped batch's, [`Batch::into_buffers`]), as [`Concat::reusing`].
    pub fn reusing(arity: usize, bytes: usize, Buffers { bytes: buf, row_starts }: Buffers) -> BatchWriter {
        BatchWriter::starting(arity, bytes, buf, Some(row_starts))
    }

    /// Starts a batch that will be sent as bytes ([`BatchWriter::finish`]),
    /// with room for `bytes` bytes: where rows start is not kept as they
    /// are written (a guest function writes a row per word it emits).
    pub fn for_bytes(arity: usize, bytes: usize) -> BatchWriter {
        BatchWriter::starting(arity, bytes, Vec::new(), None)
    }

    fn starting(arity: usize, bytes: usize, mut buf: Vec<u8>, mut row_starts: Option<Vec<u32>>) -> BatchWriter {
        buf.clear();
        buf.reserve(HEADER_LEN + bytes);
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&(arity as u32).to_le_bytes());
        if let Some(row_starts) = &mut row_starts {
            row_starts.clear();
        }
        BatchWriter { buf, arity: arity as u32, rows: 0, row_starts, values_in_row: arity as u32 }
    }

    /// Number of values each row holds.
    pub fn arity(&self) -> usize {
        self.arity as usize
    }

    /// Number of rows started so far.
    pub fn rows(&self) -> usize {
        self.rows as usize
    }

    /// Starts a row with `tag`; push exactly `arity` values after it.
    #[inline]
    pub fn begin_row(&mut self, tag: u32) {
        assert_eq!(self.values_in_row, self.arity, "previous row is incomplete");
        self.row_started(self.buf.len());
        self.buf.extend_from_slice(&tag.to_le_bytes());
        self.values_in_row = 0;
    }

    #[inline]
    fn row_started(&mut self, at: usize) {
        self.rows += 1;
        if let Some(row_starts) = &mut self.row_starts {
            row_starts.push(at as u32);
        }
    }

    /// Appends a value to the current row.
    #[inline]
    pub fn push(&mut self, value: ValueRef<'_>) {
        assert!(self.values_in_row < self.arity, "row has more values than the batch's arity");
        write_value(&mut self.buf, value);
        self.values_in_row += 1;
    }

    /// Appends a value copied from another batch's row.
    #[inline]
    pub fn push_encoded(&mut self, value: EncodedValue<'_>) {
        assert!(self.values_in_row < self.arity, "row has more values than the batch's arity");
        self.buf.extend_from_slice(value.0);
        self.values_in_row += 1;
    }

    /// Appends a whole row. A row with the wrong number of values is not
    /// written, and the error says how many it had.
    #[inline]
    pub fn push_row<'v>(&mut self, tag: u32, values: impl IntoIterator<Item = ValueRef<'v>>) -> Result<(), ArityError> {
        assert_eq!(self.values_in_row, self.arity, "previous row is incomplete");
        let row_start = self.buf.len();
        self.buf.extend_from_slice(&tag.to_le_bytes());
        let mut found = 0usize;
        for value in values {
            found += 1;
            if found <= self.arity as usize {
                write_value(&mut self.buf, value);
            }
        }
        if found != self.arity as usize {
            self.buf.truncate(row_start);
            return Err(ArityError { expected: self.arity as usize, found });
        }
        self.row_started(row_start);
        Ok(())
    }

    /// Finishes the batch and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        assert_eq!(self.values_in_row, self.arity, "last row is incomplete");
        self.buf[..4].copy_from_slice(&self.rows.to_le_bytes());
        self.buf
    }

    /// Finishes the batch, ready to read without decoding it again.
    pub fn finish_batch(mut self) -> Batch<'static> {
        let row_starts = self.row_starts.take().unwrap_or_else(|| self.find_row_starts());
        let arity = self.arity as usize;
        Batch { buf: Cow::Owned(self.finish()), arity, row_starts }
    }

    /// Where each row written starts, found by walking them.
    fn find_row_starts(&self) -> Vec<u32> {
        let mut pos = HEADER_LEN;
        let mut row_starts = Vec::with_capacity(self.rows as usize);
        for _ in 0..self.rows {
            row_starts.push(pos as u32);
            pos += 4;
            for _ in 0..self.arity {
                pos += encoded_len(&self.buf[pos..]);
            }
        }
        row_starts
    }
}

/// Rows of a batch, from its row `first`, to be encoded as a batch of
/// their own ([`Batch::run_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The index of its first row in the batch.
    pub first: usize,
    /// How many rows it holds.
    pub rows: usize,
    /// Where its rows' bytes lie in the batch's.
    start: usize,
    end: usize,
}

/// The rows of several batches in order, in one, each batch's tags raised
/// by the offset it comes with: the rows several calls emitted, each for a
/// run of the input (see [`Batch::runs`]).
pub struct Concat {
    buf: Vec<u8>,
    arity: usize,
    row_starts: Vec<u32>,
}

impl Concat {
    /// An empty batch of rows of `arity` values.
    pub fn new(arity: usize) -> Concat {
        Concat::reusing(arity, Buffers::default())
    }

    /// An empty batch of rows of `arity` values, written into `buffers`
    /// (a dropped batch's, [`Batch::into_buffers`]): a buffer of megabytes
    /// allocated afresh for each batch has its pages faulted in again.
    pub fn reusing(arity: usize, Buffers { mut bytes, mut row_starts }: Buffers) -> Concat {
        bytes.clear();
        row_starts.clear();
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&(arity as u32).to_le_bytes());
        Concat { buf: bytes, arity, row_starts }
    }

    /// Appends `part`'s rows, their tags raised by `offset`. When it does
    /// not fit, room is made for it and `parts_left` more parts of its size,
    /// and an eighth more: parts differ a little, and each time a large
    /// buffer grows it is copied into fresh pages.
    pub fn push(&mut self, part: &Batch<'_>, offset: u32, parts_left: usize) {
        assert_eq!(part.arity, self.arity, "a part of another arity");
        let bytes = part.buf.len() - HEADER_LEN;
        reserve_for_parts(&mut self.buf, bytes, parts_left);
        reserve_for_parts(&mut self.row_starts, part.len(), parts_left);
        let base = self.buf.len() - HEADER_LEN;
        self.buf.extend_from_slice(&part.buf[HEADER_LEN..]);
        for &start in &part.row_starts {
            let at = base + start as usize;
            let tag = u32::from_le_bytes(self.buf[at..at + 4].try_into().expect("a row's tag")) + offset;
            self.buf[at..at + 4].copy_from_slice(&tag.to_le_bytes());
            self.row_starts.push(at as u32);
        }
    }

    /// The batch of every part's rows.
    pub fn finish(mut self) -> Batch<'static> {
        let rows = self.row_starts.len() as u32;
        self.buf[..4].copy_from_slice(&rows.to_le_bytes());
        Batch { buf: Cow::Owned(self.buf), arity: self.arity, row_starts: self.row_starts }
    }
}

/// Makes room in `vec` for `items` and, when they do not fit, for
/// `parts_left` more parts of as many, and an eighth more.
fn reserve_for_parts<T>(vec: &mut Vec<T>, items: usize, parts_left: usize) {
    if vec.capacity() - vec.len() < items {
        let wanted = items * (1 + parts_left);
        vec.reserve_exact(wanted + wanted / 8);
    }
}

/// The buffers of a batch that is no longer read, to write another into.
#[derive(Debug, Default)]
pub struct Buffers {
    bytes: Vec<u8>,
    row_starts: Vec<u32>,
}

impl Buffers {
    /// The room they have, in bytes.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity() + 4 * self.row_starts.capacity()
    }
}

/// A valid packed batch, read in place. Every way to get one checks the
/// encoding (or writes it), so reading rows never fails.
#[derive(Clone, Debug)]
pub struct Batch<'a> {
    buf: Cow<'a, [u8]>,
    arity: usize,
    row_starts: Vec<u32>,
}

/// Checks a whole batch, each row's tag below `tags_below`; returns its
/// arity and where each row starts.
fn validate(buf: &[u8], tags_below: u64) -> Result<(usize, Vec<u32>), DecodeError> {
    if buf.len() > u32::MAX as usize {
        return Err(DecodeError { offset: 0, reason: "batch is larger than 4 GiB".into() });
    }
    let mut cursor = Cursor { buf, pos: 0 };
    let rows = cursor.u32()? as usize;
    let arity = cursor.u32()? as usize;
    // Each row takes at least its tag and one byte per value: refuse a row
    // count the buffer cannot hold before allocating for it.
    let min_row = 4 + arity;
    if rows.saturating_mul(min_row) > buf.len() - HEADER_LEN {
        return Err(
            cursor.err(format!("header claims {rows} rows of {arity} values, the buffer holds {} bytes", buf.len()))
        );
    }
    // The position lives in a register: the cursor only builds errors.
    let mut pos = cursor.pos;
    let mut row_starts = Vec::with_capacity(rows);
    for _ in 0..rows {
        row_starts.push(pos as u32);
        let Some(tag) = buf.get(pos..pos + 4) else { return Err(Cursor { buf, pos }.take(4).unwrap_err()) };
        let tag = u32::from_le_bytes(tag.try_into().expect("4 bytes"));
        if u64::from(tag) >= tags_below {
            return Err(Cursor { buf, pos }.err(format!("a row extends input row {tag} of {tags_below}")));
        }
        pos += 4;
        for _ in 0..arity {
            match value_end(buf, pos) {
                Some(end) => pos = end,
                None => return Err(invalid_value(buf, pos)),
            }
        }
    }
    if pos != buf.len() {
        return Err(Cursor { buf, pos }.err(format!("{} bytes after the last row", buf.len() - pos)));
    }
    Ok((arity, row_starts))
}

impl<'a> Batch<'a> {
    /// Checks `buf` as a packed batch. Every later read borrows from it.
    pub fn decode(buf: &'a [u8]) -> Result<Batch<'a>, DecodeError> {
        let (arity, row_starts) = validate(buf, ANY_TAG)?;
        Ok(Batch { buf: Cow::Borrowed(buf), arity, row_starts })
    }

    /// Checks `buf` as a packed batch, keeping it.
    pub fn decode_owned(buf: Vec<u8>) -> Result<Batch<'static>, DecodeError> {
        Batch::decode_extending(buf, ANY_TAG)
    }

    /// Checks `buf` as the rows a function emitted for `parents` input
    /// rows: a packed batch whose every row's tag is the index of one.
    pub fn decode_extending(buf: Vec<u8>, parents: u64) -> Result<Batch<'static>, DecodeError> {
        let (arity, row_starts) = validate(&buf, parents)?;
        Ok(Batch { buf: Cow::Owned(buf), arity, row_starts })
    }

    /// The encoded batch.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The encoded batch, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf.into_owned()
    }

    /// Its buffers, where it owns them, for another batch to be written
    /// into ([`Concat::reusing`]).
    pub fn into_buffers(self) -> Option<Buffers> {
        match self.buf {
            Cow::Owned(bytes) => Some(Buffers { bytes, row_starts: self.row_starts }),
            Cow::Borrowed(_) => None,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.row_starts.len()
    }

    /// True when the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.row_starts.is_empty()
    }

    /// Number of values in each row.
    pub fn arity(&self) -> usize {
        self.arity
    }

    /// The rows cut into runs of whole rows, each to be encoded as a batch
    /// of at most `max_bytes` (a larger row alone): a batch that fits is
    /// one run.
    pub fn runs(&self, max_bytes: usize) -> Vec<Run> {
        if self.buf.len() <= max_bytes || self.len() <= 1 {
            return vec![Run { first: 0, rows: self.len(), start: HEADER_LEN, end: self.buf.len() }];
        }
        let end_of = |row: usize| self.row_starts.get(row + 1).map_or(self.buf.len(), |&e| e as usize);
        let room = max_bytes.saturating_sub(HEADER_LEN);
        let mut runs = Vec::new();
        let mut first = 0;
        while first < self.len() {
            let start = self.row_starts[first] as usize;
            let mut end = first + 1;
            while end < self.len() && end_of(end) - start <= room {
                end += 1;
            }
            runs.push(Run { first, rows: end - first, start, end: end_of(end - 1) });
            first = end;
        }
        runs
    }

    /// The rows of `run` encoded as a batch: the batch itself where the run
    /// is all of it, else written into `scratch`, which the next run reuses
    /// (a copy of each run at once would be a second batch, in fresh pages).
    pub fn run_bytes<'s>(&'s self, run: &Run, scratch: &'s mut Vec<u8>) -> &'s [u8] {
        if run.rows == self.len() {
            return &self.buf;
        }
        scratch.clear();
        scratch.extend_from_slice(&(run.rows as u32).to_le_bytes());
        scratch.extend_from_slice(&(self.arity as u32).to_le_bytes());
        scratch.extend_from_slice(&self.buf[run.start..run.end]);
        scratch
    }

    /// Rewrites every row's tag in place: row `index`, tagged `tag`, gets
    /// `f(index, tag)`.
    pub fn retag(&mut self, mut f: impl FnMut(usize, u32) -> u32) {
        let buf = self.buf.to_mut();
        for (index, &start) in self.row_starts.iter().enumerate() {
            let at = start as usize;
            let tag = u32::from_le_bytes(buf[at..at + 4].try_into().expect("a row's tag"));
            buf[at..at + 4].copy_from_slice(&f(index, tag).to_le_bytes());
        }
    }

    /// The row at `index`.
    #[inline]
    pub fn row(&self, index: usize) -> Row<'_> {
        let start = self.row_starts[index] as usize;
        let end = self.row_starts.get(index + 1).map_or(self.buf.len(), |&e| e as usize);
        Row { bytes: &self.buf[start..end], arity: self.arity }
    }

    /// The rows, in order.
    #[inline]
    pub fn rows(&self) -> impl ExactSizeIterator<Item = Row<'_>> + '_ {
        (0..self.len()).map(|i| self.row(i))
    }
}

/// One row of a [`Batch`].
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    bytes: &'a [u8],
    arity: usize,
}

impl<'a> Row<'a> {
    /// The row's tag.
    #[inline]
    pub fn tag(self) -> u32 {
        u32::from_le_bytes(self.bytes[..4].try_into().expect("valid row"))
    }

    /// The row's values, in order.
    #[inline]
    pub fn values(self) -> impl Iterator<Item = ValueRef<'a>> + 'a {
        self.encoded_values().map(EncodedValue::decode)
    }

    /// The value at `index`.
    #[inline]
    pub fn get(self, index: usize) -> Option<ValueRef<'a>> {
        self.encoded_values().nth(index).map(EncodedValue::decode)
    }

    /// Each value's encoded bytes, in order, to copy into another batch as is.
    #[inline]
    pub fn encoded_values(self) -> impl Iterator<Item = EncodedValue<'a>> + 'a {
        let mut rest = &self.bytes[4..];
        (0..self.arity).map(move |_| {
            let len = encoded_len(rest);
            let (value, tail) = rest.split_at(len);
            rest = tail;
            EncodedValue(value)
        })
    }
}

impl<'a> EncodedValue<'a> {
    /// The value, without checking it again: it comes from a valid batch.
    #[inline]
    pub fn decode(self) -> ValueRef<'a> {
        let payload = &self.0[1..];
        match ValueKind::from_byte(self.0[0]) {
            Some(ValueKind::Null) => ValueRef::Null,
            Some(ValueKind::False) => ValueRef::Bool(false),
            Some(ValueKind::True) => ValueRef::Bool(true),
            Some(ValueKind::I64) => ValueRef::I64(i64::from_le_bytes(payload.try_into().expect("valid i64"))),
            Some(ValueKind::F64) => ValueRef::F64(f64::from_le_bytes(payload.try_into().expect("valid f64"))),
            Some(ValueKind::Str) => {
                // SAFETY: an `EncodedValue` only comes from a row of a
                // `Batch`, whose strings were checked to be UTF-8 when it was
                // decoded, or were written from a `&str` by `BatchWriter`.
                ValueRef::Str(unsafe { std::str::from_utf8_unchecked(&payload[4..]) })
            }
            _ => ValueRef::Bytes(&payload[4..]),
        }
    }
}

/// Where the value at `pos` ends, if it is a valid one: the check of
/// [`Cursor::value`] without building the value or an error, so that it
/// stays in registers.
#[inline(always)]
fn value_end(buf: &[u8], pos: usize) -> Option<usize> {
    let end = match ValueKind::from_byte(*buf.get(pos)?)? {
        ValueKind::Null | ValueKind::False | ValueKind::True => pos + 1,
        ValueKind::I64 | ValueKind::F64 => pos + 9,
        kind @ (ValueKind::Str | ValueKind::Bytes) => {
            let len = u32::from_le_bytes(*buf.get(pos + 1..)?.first_chunk::<4>()?) as usize;
            let start = pos + 5;
            let payload = buf.get(start..start.checked_add(len)?)?;
            if kind == ValueKind::Str && !ascii_within(buf, start, len) && utf8(payload).is_err() {
                return None;
            }
            start + len
        }
    };
    (end <= buf.len()).then_some(end)
}

/// Why the value at `pos` is not valid, in [`Cursor::value`]'s words.
#[cold]
fn invalid_value(buf: &[u8], pos: usize) -> DecodeError {
    let mut cursor = Cursor { buf, pos };
    match cursor.value() {
        Err(e) => e,
        Ok(_) => Cursor { buf, pos }.err("invalid value"),
    }
}

/// Whether the `len` bytes at `start` of `buf` are ASCII, for a string of
/// up to 8 bytes checked as one word read from `buf` (the bytes past the
/// string masked off); `false` where that does not apply.
#[inline(always)]
fn ascii_within(buf: &[u8], start: usize, len: usize) -> bool {
    if !(1..=8).contains(&len) {
        return len == 0;
    }
    let Some(word) = buf.get(start..).and_then(|rest| rest.first_chunk::<8>()) else { return false };
    let high_bits = (u64::MAX >> (64 - 8 * len)) & 0x8080_8080_8080_8080;
    u64::from_le_bytes(*word) & high_bits == 0
}

/// Length of the (valid) value encoded at the start of `buf`.
#[inline]
fn encoded_len(buf: &[u8]) -> usize {
    match ValueKind::from_byte(buf[0]) {
        Some(ValueKind::Null | ValueKind::False | ValueKind::True) => 1,
        Some(ValueKind::I64 | ValueKind::F64) => 9,
        _ => 5 + u32::from_le_bytes(buf[1..5].try_into().expect("valid value")) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_past_ascii_anywhere_in_a_string_of_any_length_is_found() {
        for len in 0..40 {
            let plain = vec![b'a'; len];
            assert!(is_ascii(&plain), "{len} bytes of ASCII");
            for at in 0..len {
                let mut one_high = plain.clone();
                one_high[at] = 0x80;
                assert!(!is_ascii(&one_high), "a high byte at {at} of {len}");
            }
        }
        assert!(utf8("é".repeat(9).as_bytes()).is_ok());
        assert!(utf8(&[b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h', 0xff]).is_err());
    }

    fn sample_values() -> Vec<Value> {
        vec![
            Value::Null,
            Value::Bool(true),
            Value::Bool(false),
            Value::I64(-42),
            Value::I64(i64::MAX),
            Value::F64(2.5),
            Value::Str("héllo".into()),
            Value::Str(String::new()),
            Value::Bytes(vec![0, 255, 7]),
        ]
    }

    #[test]
    fn each_kind_reads_back_from_its_byte_and_no_other_byte_is_a_kind() {
        for value in sample_values() {
            let kind = ValueKind::of(value.as_ref());
            assert_eq!(ValueKind::from_byte(kind.byte()), Some(kind));
            let mut encoded = Vec::new();
            write_value(&mut encoded, value.as_ref());
            assert_eq!(encoded[0], kind.byte(), "{value:?}");
        }
        let kinds: Vec<u8> = (0..=u8::MAX).filter(|&b| ValueKind::from_byte(b).is_some()).collect();
        assert_eq!(kinds, [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn rows_round_trip_with_tags_and_every_value_kind() {
        let values = sample_values();
        let mut writer = BatchWriter::new(3);
        for (i, chunk) in values.chunks(3).enumerate() {
            writer.push_row(i as u32 * 10, chunk.iter().map(Value::as_ref)).unwrap();
        }
        let bytes = writer.finish();
        let batch = Batch::decode(&bytes).unwrap();
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.arity(), 3);
        let decoded: Vec<Value> = batch.rows().flat_map(|r| r.values().map(ValueRef::to_owned)).collect();
        assert_eq!(decoded, values);
        let tags: Vec<u32> = batch.rows().map(|r| r.tag()).collect();
        assert_eq!(tags, [0, 10, 20]);
        assert_eq!(batch.row(1).get(2), Some(ValueRef::F64(2.5)));
    }

    #[test]
    fn a_writer_for_bytes_writes_the_same_batch_and_finds_its_rows_when_asked() {
        let values = sample_values();
        let (mut kept, mut bytes_only) = (BatchWriter::new(3), BatchWriter::for_bytes(3, 0));
        for writer in [&mut kept, &mut bytes_only] {
            for (i, chunk) in values.chunks(3).enumerate() {
                writer.push_row(i as u32, chunk.iter().map(Value::as_ref)).unwrap();
            }
            assert!(writer.push_row(9, [ValueRef::Null]).is_err());
            assert_eq!(writer.rows(), 3);
        }
        let (kept, bytes_only) = (kept.finish_batch(), bytes_only.finish_batch());
        assert_eq!(bytes_only.bytes(), kept.bytes());
        assert_eq!(bytes_only.row_starts, kept.row_starts);
        assert_eq!(Batch::decode(bytes_only.bytes()).unwrap().row_starts, kept.row_starts);
    }

    #[test]
    fn a_batch_joined_or_written_into_a_dropped_batchs_buffers_holds_only_its_own_rows() {
        let write = |mut writer: BatchWriter, words: &[&str]| {
            for (i, word) in words.iter().enumerate() {
                writer.push_row(i as u32, [ValueRef::Str(word)]).unwrap();
            }
            writer.finish_batch()
        };
        let batch_of = |words: &[&str]| write(BatchWriter::new(1), words);
        let dropped = || batch_of(&["a long word left over"; 50]).into_buffers().expect("an owned batch");
        let written = write(BatchWriter::reusing(1, 0, dropped()), &["x", "y"]);
        assert_eq!(written.bytes(), batch_of(&["x", "y"]).bytes());
        assert_eq!(written.row_starts, batch_of(&["x", "y"]).row_starts);
        let parts = [batch_of(&["x", "y"]), batch_of(&["z"])];
        let join = |mut joined: Concat| {
            for (i, part) in parts.iter().enumerate() {
                joined.push(part, 10 * i as u32, parts.len() - i - 1);
            }
            joined.finish()
        };
        let buffers = dropped();
        assert!(buffers.capacity() > 1000);
        let (fresh, reused) = (join(Concat::new(1)), join(Concat::reusing(1, buffers)));
        assert_eq!(reused.bytes(), fresh.bytes());
        assert_eq!(reused.row_starts, fresh.row_starts);
        let rows: Vec<(u32, Option<ValueRef<'_>>)> = reused.rows().map(|r| (r.tag(), r.get(0))).collect();
        assert_eq!(
            rows,
            [(0, Some(ValueRef::Str("x"))), (1, Some(ValueRef::Str("y"))), (10, Some(ValueRef::Str("z")))]
        );
        assert!(Batch::decode(&[0, 0, 0, 0, 1, 0, 0, 0]).unwrap().into_buffers().is_none(), "a borrowed batch");
    }

    #[test]
    fn encoded_values_copy_into_another_batch_unchanged() {
        let mut writer = BatchWriter::new(2);
        writer.push_row(0, [ValueRef::Str("a"), ValueRef::I64(1)]).unwrap();
        let bytes = writer.finish();
        let batch = Batch::decode(&bytes).unwrap();
        let mut copy = BatchWriter::new(2);
        copy.begin_row(0);
        for encoded in batch.row(0).encoded_values() {
            copy.push_encoded(encoded);
        }
        let copy = copy.finish_batch();
        assert_eq!(copy.row(0).get(0), Some(ValueRef::Str("a")));
        assert_eq!(copy.into_bytes(), bytes);
    }

    #[test]
    fn a_row_of_the_wrong_arity_is_refused_and_not_written() {
        let mut writer = BatchWriter::new(2);
        writer.push_row(0, [ValueRef::I64(1), ValueRef::I64(2)]).unwrap();
        let err = writer.push_row(1, [ValueRef::I64(3)]).unwrap_err();
        assert_eq!(err, ArityError { expected: 2, found: 1 });
        let err = writer.push_row(1, [ValueRef::Null; 3]).unwrap_err();
        assert_eq!(err, ArityError { expected: 2, found: 3 });
        let bytes = writer.finish();
        assert_eq!(Batch::decode(&bytes).unwrap().len(), 1);
    }

    #[test]
    fn empty_batch_is_valid() {
        let bytes = BatchWriter::new(2).finish();
        assert_eq!(bytes, [0, 0, 0, 0, 2, 0, 0, 0]);
        assert!(Batch::decode(&bytes).unwrap().is_empty());
    }

    #[test]
    fn malformed_buffers_are_errors_naming_the_offset() {
        let mut writer = BatchWriter::new(1);
        writer.push_row(0, [ValueRef::Str("abc")]).unwrap();
        let good = writer.finish();

        let truncated = &good[..good.len() - 1];
        let err = Batch::decode(truncated).unwrap_err();
        assert!(err.reason.contains("more bytes"), "{err}");

        let mut trailing = good.clone();
        trailing.push(0);
        assert!(Batch::decode(&trailing).unwrap_err().reason.contains("after the last row"));

        let mut bad_kind = good.clone();
        bad_kind[12] = 99;
        let err = Batch::decode(&bad_kind).unwrap_err();
        assert_eq!(err.offset, 12);
        assert!(err.reason.contains("unknown value kind 99"));

        let mut bad_utf8 = good.clone();
        let last = bad_utf8.len() - 1;
        bad_utf8[last] = 0xff;
        assert!(Batch::decode(&bad_utf8).unwrap_err().reason.contains("UTF-8"));

        // Short strings with more rows after them are checked a word at a time.
        let mut writer = BatchWriter::new(1);
        for word in ["abc", "héé", "abcdefgh", "x"] {
            writer.push_row(0, [ValueRef::Str(word)]).unwrap();
        }
        let words = writer.finish();
        assert_eq!(Batch::decode(&words).unwrap().len(), 4);
        let mut bad_middle = words.clone();
        bad_middle[8 + 4 + 5 + 1] = 0xff;
        let err = Batch::decode(&bad_middle).unwrap_err();
        assert_eq!(err.offset, 8 + 4 + 5 + 1, "{err}");
        assert!(err.reason.contains("UTF-8"), "{err}");

        let huge_rows = [255, 255, 255, 255, 1, 0, 0, 0];
        assert!(Batch::decode(&huge_rows).unwrap_err().reason.contains("claims"));
        assert!(Batch::decode(&[1, 2]).is_err());
    }

    #[test]
    fn strings_of_every_short_length_are_written_whole() {
        let text = "abcdefghijklmnopqrstu";
        let mut writer = BatchWriter::new(2);
        for n in 0..=text.len() {
            writer.push_row(n as u32, [ValueRef::Str(&text[..n]), ValueRef::Bytes(&text.as_bytes()[n..])]).unwrap();
        }
        let batch = Batch::decode_owned(writer.finish()).unwrap();
        for (n, row) in batch.rows().enumerate() {
            let values: Vec<_> = row.values().collect();
            assert_eq!(values, [ValueRef::Str(&text[..n]), ValueRef::Bytes(&text.as_bytes()[n..])]);
        }
    }

    #[test]
    fn emitted_rows_must_extend_an_input_row() {
        let mut writer = BatchWriter::new(1);
        writer.push_row(0, [ValueRef::I64(1)]).unwrap();
        writer.push_row(2, [ValueRef::I64(2)]).unwrap();
        let emitted = writer.finish();
        assert_eq!(Batch::decode_extending(emitted.clone(), 3).unwrap().len(), 2);
        let err = Batch::decode_extending(emitted, 2).unwrap_err();
        assert_eq!((err.offset, err.reason.as_str()), (21, "a row extends input row 2 of 2"));
    }

    #[test]
    fn shared_vectors_decode_to_their_documented_rows() {
        for (name, bytes, rows) in crate::vectors::all() {
            let batch = Batch::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let decoded: Vec<(u32, Vec<Value>)> =
                batch.rows().map(|r| (r.tag(), r.values().map(ValueRef::to_owned).collect())).collect();
            assert_eq!(decoded, rows, "{name}");
            let mut writer = BatchWriter::new(batch.arity());
            for (tag, values) in &rows {
                writer.push_row(*tag, values.iter().map(Value::as_ref)).unwrap();
            }
            assert_eq!(writer.finish(), bytes, "{name} re-encodes byte for byte");
        }
    }
    #[test]
    fn runs_of_a_batch_concatenated_give_back_its_rows_and_tags() {
        let mut writer = BatchWriter::new(2);
        for i in 0..50u32 {
            writer.push_row(i % 7, [ValueRef::I64(i64::from(i)), ValueRef::Str(&"w".repeat(i as usize))]).unwrap();
        }
        let batch = writer.finish_batch();
        let mut scratch = Vec::new();
        let whole = batch.runs(batch.bytes().len());
        assert!(matches!(whole.as_slice(), [Run { first: 0, rows: 50, .. }]));
        assert_eq!(batch.run_bytes(&whole[0], &mut scratch), batch.bytes());
        assert!(scratch.is_empty(), "one run is the batch, not a copy");
        let runs = batch.runs(200);
        assert!(runs.len() > 5, "{} runs", runs.len());
        let mut parts = Vec::new();
        for run in &runs {
            // A long row alone may pass the bound; two rows never do.
            let bytes = batch.run_bytes(run, &mut scratch);
            let decoded = Batch::decode_owned(bytes.to_vec()).unwrap();
            assert_eq!(decoded.len(), run.rows);
            assert!(bytes.len() <= 200 || decoded.len() == 1, "a run of {} bytes", bytes.len());
            parts.push((run.first as u32, decoded));
        }
        assert_eq!(parts.iter().map(|(_, p)| p.len()).sum::<usize>(), 50);
        // The tags each run's rows would carry as a call's output: their
        // index in the run; raised by the run's first row, the batch's.
        let mut joined = Concat::new(2);
        for (at, (first, run)) in parts.iter().enumerate() {
            let mut out = BatchWriter::new(2);
            for (i, row) in run.rows().enumerate() {
                out.push_row(i as u32, row.values()).unwrap();
            }
            joined.push(&out.finish_batch(), *first, parts.len() - at - 1);
        }
        let joined = joined.finish();
        assert_eq!(joined.len(), 50);
        for (i, (row, original)) in joined.rows().zip(batch.rows()).enumerate() {
            assert_eq!(row.tag() as usize, i);
            assert_eq!(row.values().collect::<Vec<_>>(), original.values().collect::<Vec<_>>());
        }
        assert_eq!(Batch::decode(joined.bytes()).unwrap().len(), 50);
    }

    #[test]
    fn retagging_rewrites_each_tag_in_place_and_nothing_else() {
        let mut writer = BatchWriter::new(1);
        for i in 0..5u32 {
            writer.push_row(i, [ValueRef::I64(i64::from(i) * 10)]).unwrap();
        }
        let mut batch = writer.finish_batch();
        batch.retag(|index, tag| tag * 100 + index as u32);
        let rows: Vec<(u32, Option<ValueRef<'_>>)> = batch.rows().map(|r| (r.tag(), r.get(0))).collect();
        let want: Vec<(u32, Option<ValueRef<'_>>)> =
            (0..5u32).map(|i| (i * 101, Some(ValueRef::I64(i64::from(i) * 10)))).collect();
        assert_eq!(rows, want);
        assert_eq!(Batch::decode(batch.bytes()).unwrap().len(), 5, "still a valid batch");
    }
}
