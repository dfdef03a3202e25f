//! A log message's payload (a JetStream message's, a Kafka record's value)
//! as a tuple's leading fields: one bytes or string field, or a JSON
//! object's named members.

use anyhow::{Result, bail};
use serde_json::{Map, Value};
use weir_sdk::codec::ValueRef;
use weir_sdk::topology::PayloadDef;

/// The fields `payload` makes.
pub fn arity(payload: &PayloadDef) -> usize {
    match payload {
        PayloadDef::Json { fields } => fields.len(),
        PayloadDef::Bytes { .. } | PayloadDef::String { .. } => 1,
    }
}

/// Appends to `values` the fields `payload` makes of `bytes`; `object`
/// holds a JSON payload's members for them. An error says what is wrong,
/// calling the bytes `what` ("payload", "value"), and appends nothing.
pub fn push<'a>(
    payload: &PayloadDef,
    bytes: &'a [u8],
    what: &str,
    object: &'a mut Map<String, Value>,
    values: &mut Vec<ValueRef<'a>>,
) -> Result<()> {
    match payload {
        PayloadDef::Bytes { .. } => values.push(ValueRef::Bytes(bytes)),
        PayloadDef::String { field } => match weir_sdk::codec::utf8(bytes) {
            Ok(text) => values.push(ValueRef::Str(text)),
            Err(e) => bail!("the {what} is not UTF-8 text for field {field} ({e})"),
        },
        PayloadDef::Json { fields } => {
            *object = match serde_json::from_slice(bytes) {
                Ok(object) => object,
                Err(e) => bail!("the {what} is not a JSON object ({e})"),
            };
            let object: &'a Map<String, Value> = object;
            let from = values.len();
            for field in fields {
                match member(object, field) {
                    Ok(value) => values.push(value),
                    Err(e) => {
                        values.truncate(from);
                        return Err(e);
                    }
                }
            }
        }
    }
    Ok(())
}

/// The value of `object`'s member `field`: null when it is absent.
fn member<'a>(object: &'a Map<String, Value>, field: &str) -> Result<ValueRef<'a>> {
    Ok(match object.get(field) {
        None | Some(Value::Null) => ValueRef::Null,
        Some(Value::Bool(b)) => ValueRef::Bool(*b),
        Some(Value::String(s)) => ValueRef::Str(s),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => ValueRef::I64(i),
            None => ValueRef::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Some(Value::Array(_)) => bail!("member {field:?} is an array; a field takes a string, number, boolean or null"),
        Some(Value::Object(_)) => {
            bail!("member {field:?} is an object; a field takes a string, number, boolean or null")
        }
    })
}

/// The first row `push` writes into a batch of `arity` fields, each value
/// as `Debug` shows it, space-separated: what the shapes' tests compare.
#[cfg(test)]
pub fn first_row(arity: usize, push: impl FnOnce(&mut weir_sdk::codec::BatchWriter) -> Result<()>) -> Result<String> {
    let mut writer = weir_sdk::codec::BatchWriter::new(arity);
    push(&mut writer)?;
    let batch = writer.finish_batch();
    Ok(batch.row(0).values().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(" "))
}
