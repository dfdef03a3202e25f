//! The compact encoding of values at rest: integers and lengths as LEB128
//! varints (integers zigzagged first), so that a count or a txid takes the
//! one to three bytes it needs rather than eight. Smaller records mean
//! fewer redb pages to copy, write and sync at every commit.
//!
//! ```text
//! value := 0 | 1 | 2                 null | false | true
//!        | 3 zigzag-varint           signed integer
//!        | 4 f64 (8 bytes LE)        float
//!        | 5 varint utf8-bytes       string (length first)
//!        | 6 varint bytes            bytes (length first)
//! ```
//!
//! The kinds are the batch encoding's ([`ValueKind`]); what follows them
//! is this encoding's own.

use super::DecodeError;
use weir_sdk::codec::{self, ValueEncoding, ValueKind, ValueRef};

/// Appends `n` as a LEB128 varint.
#[inline]
pub fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a LEB128 varint from the start of `bytes`.
#[inline]
pub fn read_varint(bytes: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    let mut n = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((n, &bytes[i + 1..]));
        }
    }
    Err(DecodeError::new("truncated or overlong varint in stored value"))
}

/// The compact encoding, for [`codec::write_value_as`].
pub struct Compact;

impl ValueEncoding for Compact {
    #[inline]
    fn int(out: &mut Vec<u8>, i: i64) {
        write_varint(out, ((i << 1) ^ (i >> 63)) as u64);
    }

    #[inline]
    fn float(out: &mut Vec<u8>, f: f64) {
        out.extend_from_slice(&f.to_le_bytes());
    }

    #[inline]
    fn bytes(out: &mut Vec<u8>, kind: ValueKind, bytes: &[u8]) {
        out.push(kind.byte());
        write_varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }
}

/// Appends one value.
#[inline]
pub fn write_value(out: &mut Vec<u8>, value: ValueRef<'_>) {
    codec::write_value_as::<Compact>(out, value)
}

/// Reads the value at the start of `bytes`, returning it and the bytes after it.
#[inline]
pub fn read_value(bytes: &[u8]) -> Result<(ValueRef<'_>, &[u8]), DecodeError> {
    let Some((&byte, rest)) = bytes.split_first() else { return Err(DecodeError::new("truncated stored value")) };
    let Some(kind) = ValueKind::from_byte(byte) else {
        return Err(DecodeError::new(format!("unknown value kind {byte} in stored value")));
    };
    Ok(match kind {
        ValueKind::Null => (ValueRef::Null, rest),
        ValueKind::False => (ValueRef::Bool(false), rest),
        ValueKind::True => (ValueRef::Bool(true), rest),
        ValueKind::I64 => {
            let (n, rest) = read_varint(rest)?;
            (ValueRef::I64((n >> 1) as i64 ^ -((n & 1) as i64)), rest)
        }
        ValueKind::F64 => {
            let Some((bits, rest)) = rest.split_first_chunk::<8>() else {
                return Err(DecodeError::new("truncated float in stored value"));
            };
            (ValueRef::F64(f64::from_le_bytes(*bits)), rest)
        }
        ValueKind::Str | ValueKind::Bytes => {
            let (len, rest) = read_varint(rest)?;
            let Some((payload, rest)) = usize::try_from(len).ok().and_then(|len| rest.split_at_checked(len)) else {
                let what = if kind == ValueKind::Str { "string" } else { "bytes" };
                return Err(DecodeError::new(format!("truncated {what} in stored value")));
            };
            if kind == ValueKind::Bytes {
                (ValueRef::Bytes(payload), rest)
            } else {
                let Ok(s) = codec::utf8(payload) else {
                    return Err(DecodeError::new("stored string is not valid UTF-8"));
                };
                (ValueRef::Str(s), rest)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_in_few_bytes() {
        let values = [
            ValueRef::Null,
            ValueRef::Bool(false),
            ValueRef::Bool(true),
            ValueRef::I64(0),
            ValueRef::I64(-1),
            ValueRef::I64(63),
            ValueRef::I64(-64),
            ValueRef::I64(64),
            ValueRef::I64(i64::MAX),
            ValueRef::I64(i64::MIN),
            ValueRef::F64(-2.5),
            ValueRef::Str(""),
            ValueRef::Str("héllo"),
            ValueRef::Bytes(&[0, 255, 7]),
        ];
        let mut out = Vec::new();
        for value in values {
            write_value(&mut out, value);
        }
        let mut rest = out.as_slice();
        for value in values {
            let (read, tail) = read_value(rest).unwrap();
            assert_eq!(read, value);
            rest = tail;
        }
        assert!(rest.is_empty());
        let mut small = Vec::new();
        write_value(&mut small, ValueRef::I64(-64));
        assert_eq!(small.len(), 2, "a small integer takes its kind and one byte");
    }

    #[test]
    fn truncated_and_unknown_values_are_errors() {
        let [i64, f64, str] = [ValueKind::I64, ValueKind::F64, ValueKind::Str].map(ValueKind::byte);
        for bad in [&[][..], &[i64, 0x80], &[f64, 1, 2], &[str, 3, b'a'], &[str, 1, 0xff], &[9]] {
            assert!(read_value(bad).is_err(), "{bad:?}");
        }
        assert!(read_varint(&[0xff; 11]).is_err());
    }
}
