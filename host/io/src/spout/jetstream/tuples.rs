//! How a JetStream message becomes a tuple: its payload as one bytes or
//! string field, or a JSON object's named members, then the subject,
//! sequence and timestamp fields the topology asks for.

use super::super::payload;
use anyhow::Result;
use weir_sdk::codec::{BatchWriter, ValueRef};
use weir_sdk::topology::{JetStreamDef, PayloadDef};

/// What the spout reads of one message.
pub struct Message<'a> {
    /// Its subject.
    pub subject: &'a str,
    /// Its payload.
    pub payload: &'a [u8],
    /// Its stream sequence.
    pub sequence: u64,
    /// When the server stored it, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

/// The shape of the spout's tuples.
pub struct TupleShape {
    payload: PayloadDef,
    subject: bool,
    sequence: bool,
    timestamp: bool,
}

impl TupleShape {
    /// The shape `def` declares.
    pub fn of(def: &JetStreamDef) -> TupleShape {
        TupleShape {
            payload: def.payload.clone(),
            subject: def.subject_field.is_some(),
            sequence: def.sequence_field.is_some(),
            timestamp: def.timestamp_field.is_some(),
        }
    }

    /// Fields per tuple.
    pub fn arity(&self) -> usize {
        payload::arity(&self.payload)
            + usize::from(self.subject)
            + usize::from(self.sequence)
            + usize::from(self.timestamp)
    }

    /// Appends `message` as a row; an error says what is wrong with its
    /// payload (the caller names the message), and appends nothing.
    pub fn push(&self, writer: &mut BatchWriter, message: &Message<'_>) -> Result<()> {
        let mut object = serde_json::Map::new();
        let mut values = Vec::with_capacity(self.arity());
        payload::push(&self.payload, message.payload, "payload", &mut object, &mut values)?;
        if self.subject {
            values.push(ValueRef::Str(message.subject));
        }
        if self.sequence {
            values.push(ValueRef::I64(message.sequence.min(i64::MAX as u64) as i64));
        }
        if self.timestamp {
            values.push(ValueRef::I64(message.timestamp_ms));
        }
        writer.push_row(0, values).expect("a value per field");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::topology::JetStreamKind;

    fn def(payload: PayloadDef) -> JetStreamDef {
        JetStreamDef {
            promise: JetStreamKind::Transactional,
            stream: "s".into(),
            subjects: vec!["s.*".into()],
            payload,
            subject_field: Some("subject".into()),
            sequence_field: Some("seq".into()),
            timestamp_field: Some("at".into()),
            max_per_partition: None,
        }
    }

    fn row(shape: &TupleShape, payload: &[u8]) -> Result<String> {
        let message = Message { subject: "s.1", payload, sequence: 9, timestamp_ms: 1234 };
        payload::first_row(shape.arity(), |writer| shape.push(writer, &message))
    }

    #[test]
    fn a_json_payload_gives_its_members_then_the_message_fields() {
        let shape = TupleShape::of(&def(PayloadDef::Json { fields: vec!["user".into(), "n".into(), "x".into()] }));
        assert_eq!(shape.arity(), 6);
        let got = row(&shape, br#"{"user":"ann","n":3,"other":[1]}"#).unwrap();
        assert_eq!(got, r#"Str("ann") I64(3) Null Str("s.1") I64(9) I64(1234)"#);
        assert!(row(&shape, b"not json").unwrap_err().to_string().contains("the payload is not a JSON object"));
        assert!(row(&shape, b"[1]").unwrap_err().to_string().contains("not a JSON object"));
        let err = row(&shape, br#"{"user":{"a":1}}"#).unwrap_err().to_string();
        assert!(err.contains("member \"user\" is an object"), "{err}");
    }

    #[test]
    fn a_string_payload_must_be_utf8_and_bytes_are_taken_as_they_are() {
        let shape = TupleShape::of(&def(PayloadDef::String { field: "line".into() }));
        assert_eq!(row(&shape, b"the man").unwrap(), r#"Str("the man") Str("s.1") I64(9) I64(1234)"#);
        assert!(row(&shape, b"\xff").unwrap_err().to_string().contains("not UTF-8 text for field line"));
        let shape = TupleShape::of(&def(PayloadDef::Bytes { field: "raw".into() }));
        assert!(row(&shape, b"\xff").unwrap().starts_with("Bytes([255])"));
    }
}
