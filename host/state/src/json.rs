//! Values and state entries to and from JSON, as the CLI prints and reads
//! them and the server's API answers with them.

use crate::keys;
use crate::rules::Stored;
use anyhow::{Result, bail};
use serde_json::{Value as Json, json};
use weir_sdk::codec::{Batch, Value, ValueRef};

/// A value as JSON: bytes become `{"bytes": "<hex>"}`.
pub fn to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::I64(i) => json!(i),
        Value::F64(f) => json!(f),
        Value::Str(s) => json!(s),
        Value::Bytes(b) => json!({ "bytes": hex::encode(b) }),
    }
}

/// Appends `value` to `out` as the JSON text of [`to_json`], written in
/// place: what a sink's JSON payloads are made of, row after row.
pub fn write_json(value: ValueRef<'_>, out: &mut Vec<u8>) {
    let written = match value {
        ValueRef::Null => {
            out.extend_from_slice(b"null");
            Ok(())
        }
        ValueRef::Bool(b) => serde_json::to_writer(&mut *out, &b),
        ValueRef::I64(n) => serde_json::to_writer(&mut *out, &n),
        // Not finite: JSON has no such number (`null`, as `to_json` gives).
        ValueRef::F64(f) => serde_json::to_writer(&mut *out, &Json::from(f)),
        ValueRef::Str(s) => serde_json::to_writer(&mut *out, s),
        ValueRef::Bytes(b) => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"{\"bytes\":\"");
            for byte in b {
                out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]]);
            }
            out.extend_from_slice(b"\"}");
            Ok(())
        }
    };
    written.expect("JSON values serialize");
}

/// A value from JSON, the inverse of [`to_json`].
pub fn from_json(json: &Json) -> Result<Value> {
    Ok(match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Str(s.clone()),
        Json::Object(o) if o.len() == 1 && o.get("bytes").is_some_and(Json::is_string) => {
            let digits = o["bytes"].as_str().unwrap_or_default();
            match hex::decode(digits) {
                Ok(bytes) => Value::Bytes(bytes),
                Err(hex::FromHexError::OddLength) => {
                    bail!("bytes {digits:?} must be an even number of hex digits")
                }
                Err(hex::FromHexError::InvalidHexCharacter { index, .. }) => {
                    // Every byte of a multi-byte character is a non-digit:
                    // the first one found starts the character.
                    let c = digits.get(index..).and_then(|rest| rest.chars().next()).unwrap_or('?');
                    bail!("bytes {digits:?} is not hex: {c:?} at byte {index} is not a hex digit")
                }
                Err(e) => bail!("bytes {digits:?} is not hex: {e}"),
            }
        }
        other => {
            bail!("{other} is not a key value: use null, a boolean, a number, a string or {{\"bytes\": \"<hex>\"}}")
        }
    })
}

/// A state entry as JSON: `{"key": [...], "value": ...}`; with `raw`, also
/// the stored txid (and prev, for opaque state), and a bytes value (or
/// prev) that holds a packed batch of tuples decoded as `value_tuples`
/// (`prev_tuples`), see [`tuples_of`].
pub fn entry(key: &[Value], stored: &Stored, raw: bool) -> Json {
    let key: Vec<_> = key.iter().map(to_json).collect();
    let mut out = json!({ "key": key, "value": to_json(stored.value()) });
    if raw {
        if let Some(tuples) = tuples_of(stored.value()) {
            out["value_tuples"] = tuples;
        }
        match stored {
            Stored::Transactional { txid, .. } => out["txid"] = json!(txid),
            Stored::Opaque { txid, prev, .. } => {
                out["txid"] = json!(txid);
                out["prev"] = prev.as_ref().map_or(Json::Null, to_json);
                if let Some(tuples) = prev.as_ref().and_then(tuples_of) {
                    out["prev_tuples"] = tuples;
                }
            }
            Stored::Plain(_) => {}
        }
    }
    out
}

/// Most tuples of a packed batch [`tuples_of`] lists.
pub const TUPLES_LISTED: usize = 1_000;

/// A bytes value that is a whole, valid packed batch of tuples (what a
/// window of a general aggregator keeps of each batch) as those tuples:
/// `{"count": N, "tuples": [[...], ...]}`, the first [`TUPLES_LISTED`]
/// of them; `None` for any other value.
pub fn tuples_of(value: &Value) -> Option<Json> {
    let Value::Bytes(bytes) = value else { return None };
    let batch = Batch::decode(bytes).ok()?;
    if batch.is_empty() {
        return None;
    }
    let row = |row: weir_sdk::codec::Row<'_>| -> Json {
        Json::Array(row.encoded_values().map(|v| to_json(&v.decode().to_owned())).collect())
    };
    let tuples: Vec<Json> = batch.rows().take(TUPLES_LISTED).map(row).collect();
    Some(json!({ "count": batch.len(), "tuples": tuples }))
}

/// An encoded key for messages: its values as a JSON array (the bytes
/// themselves, as `{"bytes": ...}`, if they do not decode).
pub(crate) fn describe_key(key: &[u8]) -> String {
    let json = match keys::decode(key) {
        Ok(values) => serde_json::Value::Array(values.iter().map(to_json).collect()),
        Err(_) => to_json(&Value::Bytes(key.to_vec())),
    };
    json.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_as_hex() {
        let value = Value::Bytes(vec![0, 0xab, 0xff]);
        assert_eq!(to_json(&value), json!({"bytes": "00abff"}));
        assert_eq!(from_json(&to_json(&value)).unwrap(), value);
        assert_eq!(from_json(&json!({"bytes": "00ABFF"})).unwrap(), value);
    }

    #[test]
    fn values_written_in_place_are_the_json_text_of_to_json() {
        let values = [
            Value::Null,
            Value::Bool(true),
            Value::I64(i64::MIN),
            Value::F64(1.5),
            Value::F64(1e300),
            Value::F64(f64::NAN),
            Value::F64(f64::INFINITY),
            Value::Str("a \"quoted\" \u{e9}\n\u{1}".into()),
            Value::Bytes(vec![0, 0xab, 0xff]),
            Value::Bytes(vec![]),
        ];
        for value in values {
            let mut written = Vec::new();
            write_json(value.as_ref(), &mut written);
            assert_eq!(String::from_utf8(written).unwrap(), to_json(&value).to_string(), "{value:?}");
        }
    }

    #[test]
    fn bytes_holding_a_packed_batch_are_listed_as_its_tuples() {
        let mut writer = weir_sdk::codec::BatchWriter::new(2);
        for (word, n) in [("a", 1), ("b", 2)] {
            writer.begin_row(0);
            writer.push(weir_sdk::codec::ValueRef::Str(word));
            writer.push(weir_sdk::codec::ValueRef::I64(n));
        }
        let packed = Value::Bytes(writer.finish_batch().into_bytes());
        assert_eq!(tuples_of(&packed), Some(json!({"count": 2, "tuples": [["a", 1], ["b", 2]]})));
        assert_eq!(tuples_of(&Value::Bytes(b"plain text".to_vec())), None);
        assert_eq!(tuples_of(&Value::I64(3)), None);
        let stored = Stored::Opaque { txid: 4, curr: packed.clone(), prev: Some(packed) };
        let shown = entry(&[Value::I64(7)], &stored, true);
        assert_eq!(shown["value_tuples"]["count"], 2);
        assert_eq!(shown["prev_tuples"]["tuples"][1], json!(["b", 2]));
        assert!(entry(&[Value::I64(7)], &stored, false).get("value_tuples").is_none());
    }

    #[test]
    fn bytes_that_are_not_hex_are_refused_by_name() {
        let err = |digits: &str| from_json(&json!({ "bytes": digits })).unwrap_err().to_string();
        // A multi-byte character where a digit pair would be sliced.
        assert_eq!(err("aéb"), "bytes \"aéb\" is not hex: 'é' at byte 1 is not a hex digit");
        assert_eq!(err("abc"), "bytes \"abc\" must be an even number of hex digits");
        assert_eq!(err("0z"), "bytes \"0z\" is not hex: 'z' at byte 1 is not a hex digit");
    }
}
