//! State keys: group-by values in an order-preserving encoding, so that a
//! redb range scan returns keys sorted by their values.
//!
//! Each value is a kind byte followed by bytes that compare, as bytes, in the
//! value's order: integers big-endian with the sign bit flipped, floats in
//! IEEE total order, strings and bytes with 0x00 escaped as 0x00 0xFF and
//! ended by 0x00 0x00 (so a prefix sorts first). The kinds are the batch
//! encoding's ([`ValueKind`]), which sort in the order of their values'
//! types.

use super::DecodeError;
use weir_sdk::codec::{self, Value, ValueEncoding, ValueKind, ValueRef};

/// The order-preserving encoding, for [`codec::write_value_as`].
pub struct Ordered;

impl ValueEncoding for Ordered {
    #[inline]
    fn int(out: &mut Vec<u8>, i: i64) {
        out.extend_from_slice(&((i as u64) ^ (1 << 63)).to_be_bytes());
    }

    #[inline]
    fn float(out: &mut Vec<u8>, f: f64) {
        let bits = f.to_bits();
        let ordered = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
        out.extend_from_slice(&ordered.to_be_bytes());
    }

    #[inline]
    fn bytes(out: &mut Vec<u8>, kind: ValueKind, bytes: &[u8]) {
        out.push(kind.byte());
        // Most keys hold no zero byte: copy them whole.
        if !bytes.contains(&0) {
            out.extend_from_slice(bytes);
        } else {
            for &b in bytes {
                out.push(b);
                if b == 0 {
                    out.push(0xff);
                }
            }
        }
        out.extend_from_slice(&[0, 0]);
    }
}

/// Appends the order-preserving encoding of `value` to `out`.
#[inline]
pub fn encode_value(out: &mut Vec<u8>, value: ValueRef<'_>) {
    codec::write_value_as::<Ordered>(out, value)
}

/// Encodes a whole key.
pub fn encode<'v>(values: impl IntoIterator<Item = ValueRef<'v>>) -> Vec<u8> {
    let mut out = Vec::new();
    for value in values {
        encode_value(&mut out, value);
    }
    out
}

/// The first 16 bytes of an encoded key, zero-padded, as a big-endian
/// number: keys order as their prefixes do wherever those differ, so most
/// comparisons of keys are one comparison of numbers.
#[inline]
pub fn prefix(key: &[u8]) -> u128 {
    let mut first = [0; 16];
    let len = key.len().min(16);
    first[..len].copy_from_slice(&key[..len]);
    u128::from_be_bytes(first)
}

/// Decodes a key written by [`encode`].
pub fn decode(mut key: &[u8]) -> Result<Vec<Value>, DecodeError> {
    let mut values = Vec::new();
    while let Some((&byte, rest)) = key.split_first() {
        key = rest;
        let Some(kind) = ValueKind::from_byte(byte) else {
            return Err(DecodeError::new(format!("unknown value kind {byte} in key")));
        };
        values.push(match kind {
            ValueKind::Null => Value::Null,
            ValueKind::False => Value::Bool(false),
            ValueKind::True => Value::Bool(true),
            ValueKind::I64 | ValueKind::F64 => {
                let Some((bytes, rest)) = key.split_first_chunk::<8>() else {
                    return Err(DecodeError::new("truncated number in key"));
                };
                key = rest;
                let bits = u64::from_be_bytes(*bytes);
                if kind == ValueKind::I64 {
                    Value::I64((bits ^ (1 << 63)) as i64)
                } else {
                    let bits = if bits >> 63 == 1 { bits & !(1 << 63) } else { !bits };
                    Value::F64(f64::from_bits(bits))
                }
            }
            ValueKind::Str | ValueKind::Bytes => {
                let mut bytes = Vec::new();
                loop {
                    match key {
                        [0, 0, rest @ ..] => {
                            key = rest;
                            break;
                        }
                        [0, 0xff, rest @ ..] => {
                            bytes.push(0);
                            key = rest;
                        }
                        [b, rest @ ..] if *b != 0 => {
                            bytes.push(*b);
                            key = rest;
                        }
                        _ => return Err(DecodeError::new("unterminated string in key")),
                    }
                }
                if kind == ValueKind::Str {
                    Value::Str(String::from_utf8(bytes).map_err(|e| DecodeError::new(e.to_string()))?)
                } else {
                    Value::Bytes(bytes)
                }
            }
        });
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let key = vec![
            Value::Null,
            Value::Bool(true),
            Value::I64(-5),
            Value::F64(-0.25),
            Value::Str("a\0b".into()),
            Value::Bytes(vec![0, 0, 1]),
        ];
        assert_eq!(decode(&encode(key.iter().map(Value::as_ref))).unwrap(), key);
    }

    #[test]
    fn encoded_keys_sort_like_their_values() {
        let ordered = [
            vec![Value::I64(i64::MIN)],
            vec![Value::I64(-1)],
            vec![Value::I64(0)],
            vec![Value::I64(7)],
            vec![Value::F64(f64::NEG_INFINITY)],
            vec![Value::F64(-1.5)],
            vec![Value::F64(0.0)],
            vec![Value::F64(2.0)],
            vec![Value::Str("".into())],
            vec![Value::Str("a".into())],
            vec![Value::Str("a".into()), Value::I64(1)],
            vec![Value::Str("a\0".into())],
            vec![Value::Str("ab".into())],
            vec![Value::Str("b".into())],
        ];
        let encoded: Vec<Vec<u8>> = ordered.iter().map(|k| encode(k.iter().map(Value::as_ref))).collect();
        for pair in encoded.windows(2) {
            assert!(pair[0] < pair[1], "{:?} < {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn corrupt_keys_are_errors() {
        assert!(decode(&[ValueKind::Str.byte(), b'a']).is_err());
        assert!(decode(&[ValueKind::I64.byte(), 1, 2]).is_err());
        assert!(decode(&[42]).is_err());
    }
}
