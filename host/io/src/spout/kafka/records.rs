//! How a Kafka record becomes a tuple: its value as one bytes or string
//! field, or a JSON object's named members (the JetStream spout's rules),
//! then the key, partition, offset, timestamp and headers fields the
//! topology asks for.

use super::super::payload;
use anyhow::Result;
use rskafka::record::Record;
use weir_sdk::codec::{BatchWriter, ValueRef};
use weir_sdk::topology::{KafkaDef, PayloadDef};

/// The shape of the spout's tuples.
pub struct RecordShape {
    /// The value's fields, by the JetStream spout's payload rules.
    value: PayloadDef,
    key: bool,
    partition: bool,
    offset: bool,
    timestamp: bool,
    headers: bool,
}

impl RecordShape {
    /// The shape `def` declares.
    pub fn of(def: &KafkaDef) -> RecordShape {
        RecordShape {
            value: def.value.clone(),
            key: def.key_field.is_some(),
            partition: def.partition_field.is_some(),
            offset: def.offset_field.is_some(),
            timestamp: def.timestamp_field.is_some(),
            headers: def.headers_field.is_some(),
        }
    }

    /// Fields per tuple.
    pub fn arity(&self) -> usize {
        payload::arity(&self.value)
            + [self.key, self.partition, self.offset, self.timestamp, self.headers].iter().filter(|b| **b).count()
    }

    /// Appends `record` of `partition` at `offset` as a row; an error says
    /// what is wrong with its value (the caller names the record), and
    /// appends nothing.
    pub fn push(&self, writer: &mut BatchWriter, partition: i32, offset: i64, record: &Record) -> Result<()> {
        let value = record.value.as_deref().unwrap_or_default();
        let mut object = serde_json::Map::new();
        let mut values = Vec::with_capacity(self.arity());
        payload::push(&self.value, value, "value", &mut object, &mut values)?;
        let headers = self.headers.then(|| headers_json(record));
        if self.key {
            values.push(record.key.as_deref().map_or(ValueRef::Null, ValueRef::Bytes));
        }
        if self.partition {
            values.push(ValueRef::I64(i64::from(partition)));
        }
        if self.offset {
            values.push(ValueRef::I64(offset));
        }
        if self.timestamp {
            values.push(ValueRef::I64(record.timestamp.timestamp_millis()));
        }
        if let Some(headers) = &headers {
            values.push(ValueRef::Str(headers));
        }
        writer.push_row(0, values).expect("a value per field");
        Ok(())
    }
}

/// A record's headers as a JSON object; a value that is not UTF-8 is
/// written with replacement characters.
fn headers_json(record: &Record) -> String {
    let object: serde_json::Map<String, serde_json::Value> = record
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(String::from_utf8_lossy(v).into_owned())))
        .collect();
    serde_json::Value::Object(object).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::topology::JetStreamKind;

    fn def(value: PayloadDef) -> KafkaDef {
        KafkaDef {
            promise: JetStreamKind::Transactional,
            topic: "t".into(),
            partitions: None,
            value,
            key_field: Some("key".into()),
            partition_field: Some("partition".into()),
            offset_field: Some("offset".into()),
            timestamp_field: Some("at".into()),
            headers_field: Some("headers".into()),
            max_per_partition: None,
        }
    }

    fn row(shape: &RecordShape, value: &[u8]) -> Result<String> {
        let record = Record {
            key: Some(b"k1".to_vec()),
            value: Some(value.to_vec()),
            headers: [("h".to_owned(), b"v".to_vec())].into_iter().collect(),
            timestamp: chrono_millis(1234),
        };
        payload::first_row(shape.arity(), |writer| shape.push(writer, 2, 9, &record))
    }

    fn chrono_millis(ms: i64) -> rskafka::chrono::DateTime<rskafka::chrono::Utc> {
        rskafka::chrono::DateTime::from_timestamp_millis(ms).unwrap()
    }

    #[test]
    fn a_json_value_gives_its_members_then_the_record_fields() {
        let shape = RecordShape::of(&def(PayloadDef::Json { fields: vec!["user".into(), "n".into()] }));
        assert_eq!(shape.arity(), 7);
        let got = row(&shape, br#"{"user":"ann","n":3}"#).unwrap();
        assert_eq!(got, r#"Str("ann") I64(3) Bytes([107, 49]) I64(2) I64(9) I64(1234) Str("{\"h\":\"v\"}")"#);
        let e = row(&shape, b"not json").unwrap_err().to_string();
        assert!(e.contains("the value is not a JSON object"), "{e}");
    }

    #[test]
    fn a_string_value_must_be_utf8() {
        let shape = RecordShape::of(&def(PayloadDef::String { field: "line".into() }));
        assert!(row(&shape, b"the man").unwrap().starts_with(r#"Str("the man") Bytes"#));
        let e = row(&shape, b"\xff").unwrap_err().to_string();
        assert!(e.contains("the value is not UTF-8 text for field line"), "{e}");
    }
}
