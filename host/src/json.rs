//! Values and state entries to and from JSON, as the CLI prints and reads
//! them and the server's API answers with them.

use crate::state::rules::Stored;
use anyhow::{Result, bail};
use serde_json::{Value as Json, json};
use weir_sdk::codec::Value;

/// A value as JSON: bytes become `{"bytes": "<hex>"}`.
pub fn to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::I64(i) => json!(i),
        Value::F64(f) => json!(f),
        Value::Str(s) => json!(s),
        Value::Bytes(b) => json!({ "bytes": b.iter().map(|x| format!("{x:02x}")).collect::<String>() }),
    }
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
            let hex = o["bytes"].as_str().unwrap_or_default();
            if hex.len() % 2 != 0 {
                bail!("bytes {hex:?} must be an even number of hex digits");
            }
            let bytes: Result<Vec<u8>, _> =
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16)).collect();
            Value::Bytes(bytes.map_err(|_| anyhow::anyhow!("bytes {hex:?} is not hex"))?)
        }
        other => {
            bail!("{other} is not a key value: use null, a boolean, a number, a string or {{\"bytes\": \"<hex>\"}}")
        }
    })
}

/// A state entry as JSON: `{"key": [...], "value": ...}`; with `raw`, also
/// the stored txid (and prev, for opaque state).
pub fn entry(key: &[Value], stored: &Stored, raw: bool) -> Json {
    let key: Vec<_> = key.iter().map(to_json).collect();
    let mut out = json!({ "key": key, "value": to_json(stored.value()) });
    if raw {
        match stored {
            Stored::Transactional { txid, .. } => out["txid"] = json!(txid),
            Stored::Opaque { txid, prev, .. } => {
                out["txid"] = json!(txid);
                out["prev"] = prev.as_ref().map_or(Json::Null, to_json);
            }
            Stored::Plain(_) => {}
        }
    }
    out
}
