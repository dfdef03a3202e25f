//! Trident's state rules: how a batch's partial meets a stored value so that
//! a replay of the same txid never counts twice.
//!
//! - transactional `{txid, value}`: stored txid == batch txid means the batch
//!   was applied already: skip. Otherwise combine and store the batch txid.
//! - opaque `{txid, curr, prev}`: stored txid == batch txid means a replay
//!   whose tuples may differ: recompute `curr = prev ⊕ partial`. Otherwise
//!   `prev = curr, curr = curr ⊕ partial`.
//! - non-transactional: combine blindly.
//!
//! A stored txid ahead of the batch's is an error, never a silent double count.

pub use super::kind::{kind_name, kind_named};
use super::{DecodeError, StateError, compact};
use weir_sdk::codec::{self, Value, ValueRef};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::StateKind;

/// A value as stored, with the bookkeeping its kind needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Stored {
    /// A transactional state's value.
    Transactional {
        /// Txid of the batch that wrote it.
        txid: u64,
        /// The value.
        value: Value,
    },
    /// An opaque state's value.
    Opaque {
        /// Txid of the batch that wrote `curr`.
        txid: u64,
        /// The value as of `txid`.
        curr: Value,
        /// The value before `txid`, if there was one.
        prev: Option<Value>,
    },
    /// A non-transactional state's value.
    Plain(Value),
}

/// What a batch's partial does to one key.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The batch was applied to this key already.
    Skip,
    /// The new value is the partial itself.
    Fresh,
    /// The new value is `combine(base, partial)`.
    Combine(Value),
}

// Tags of stored values. The first three wrote the txid in eight bytes
// and values in the batch encoding; they are still read, never written.
const LEGACY_TRANSACTIONAL: u8 = 1;
const LEGACY_OPAQUE: u8 = 2;
const LEGACY_PLAIN: u8 = 3;
const TAG_TRANSACTIONAL: u8 = 4;
const TAG_OPAQUE: u8 = 5;
const TAG_PLAIN: u8 = 6;

impl Stored {
    /// The kind of state this value belongs to.
    pub fn kind(&self) -> StateKind {
        match self {
            Stored::Transactional { .. } => StateKind::Transactional,
            Stored::Opaque { .. } => StateKind::Opaque,
            Stored::Plain(_) => StateKind::NonTransactional,
        }
    }

    /// The current value.
    pub fn value(&self) -> &Value {
        match self {
            Stored::Transactional { value, .. } | Stored::Opaque { curr: value, .. } | Stored::Plain(value) => value,
        }
    }

    /// The txid of the batch that wrote it last; `None` for a plain value.
    pub fn txid(&self) -> Option<u64> {
        match self {
            Stored::Transactional { txid, .. } | Stored::Opaque { txid, .. } => Some(*txid),
            Stored::Plain(_) => None,
        }
    }

    /// Bytes as written to redb: a kind tag, the txid as a varint, then
    /// values in the compact encoding (see [`compact`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8);
        self.encode_into(&mut out);
        out
    }

    /// Appends the bytes of [`Stored::encode`] to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Stored::Transactional { txid, value } => {
                out.push(TAG_TRANSACTIONAL);
                compact::write_varint(out, *txid);
                compact::write_value(out, value.as_ref());
            }
            Stored::Opaque { txid, curr, prev } => {
                out.push(TAG_OPAQUE);
                compact::write_varint(out, *txid);
                compact::write_value(out, curr.as_ref());
                if let Some(prev) = prev {
                    compact::write_value(out, prev.as_ref());
                }
            }
            Stored::Plain(value) => {
                out.push(TAG_PLAIN);
                compact::write_value(out, value.as_ref());
            }
        }
    }

    /// Reads what [`Stored::encode`] wrote, or a value of the legacy layout;
    /// the error is a [`StateError::Malformed`]: reading it again cannot help.
    pub fn decode(bytes: &[u8]) -> Result<Stored, StateError> {
        Self::decode_fields(bytes).map_err(|e| StateError::Malformed(format!("unreadable stored value: {e}")))
    }

    fn decode_fields(bytes: &[u8]) -> Result<Stored, DecodeError> {
        let Some((&tag, rest)) = bytes.split_first() else { return Err(DecodeError::new("empty stored value")) };
        let fields = match tag {
            TAG_TRANSACTIONAL | TAG_OPAQUE | TAG_PLAIN => Fields { legacy: false },
            LEGACY_TRANSACTIONAL | LEGACY_OPAQUE | LEGACY_PLAIN => Fields { legacy: true },
            other => return Err(DecodeError::new(format!("unknown stored value tag {other}"))),
        };
        Ok(match tag {
            TAG_TRANSACTIONAL | LEGACY_TRANSACTIONAL => {
                let (txid, rest) = fields.txid(rest)?;
                Stored::Transactional { txid, value: fields.last_value(rest)? }
            }
            TAG_OPAQUE | LEGACY_OPAQUE => {
                let (txid, rest) = fields.txid(rest)?;
                let (curr, tail) = fields.value(rest)?;
                let prev = if tail.is_empty() { None } else { Some(fields.last_value(tail)?) };
                Stored::Opaque { txid, curr: curr.to_owned(), prev }
            }
            _ => Stored::Plain(fields.last_value(rest)?),
        })
    }
}

/// Reads the fields of a stored value, in the current layout or the legacy one.
#[derive(Clone, Copy)]
struct Fields {
    legacy: bool,
}

impl Fields {
    fn txid(self, rest: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
        if !self.legacy {
            return compact::read_varint(rest);
        }
        let (txid, rest) = rest.split_first_chunk::<8>().ok_or_else(|| DecodeError::new("truncated stored value"))?;
        Ok((u64::from_le_bytes(*txid), rest))
    }

    fn value(self, rest: &[u8]) -> Result<(ValueRef<'_>, &[u8]), DecodeError> {
        if self.legacy { Ok(codec::read_value(rest)?) } else { compact::read_value(rest) }
    }

    /// The value that ends the record.
    fn last_value(self, rest: &[u8]) -> Result<Value, DecodeError> {
        let (value, tail) = self.value(rest)?;
        if !tail.is_empty() {
            return Err(DecodeError::new("trailing bytes in stored value"));
        }
        Ok(value.to_owned())
    }
}

/// A stored value of one kind of state met a topology that declares another.
pub fn kind_mismatch(stored: StateKind, declared: StateKind) -> StateError {
    StateError::ValueOfAnotherKind { stored, declared }
}

/// The new value of a key whose partial is combined in place by
/// `builtin`: `base ⊕ partial`, or the partial where there is no base. The
/// same stored value and partial fail the same way again: the error is a
/// [`StateError::Combine`].
pub fn with_partial(builtin: Builtin, base: Option<Value>, partial: &Value) -> Result<Value, StateError> {
    match base {
        Some(base) => builtin
            .combine(base, partial.clone())
            .map_err(|e| StateError::Combine(format!("cannot combine the batch's partial: {e}"))),
        None => Ok(partial.clone()),
    }
}

/// What a batch with `txid` does to `stored`, for a state of `kind`.
pub fn step(kind: StateKind, stored: Option<&Stored>, txid: u64) -> Result<Step, StateError> {
    let Some(stored) = stored else { return Ok(Step::Fresh) };
    if stored.kind() != kind {
        return Err(kind_mismatch(stored.kind(), kind));
    }
    Ok(match stored {
        Stored::Transactional { txid: at, value } => {
            if moves_on(*at, txid)? {
                Step::Combine(value.clone())
            } else {
                Step::Skip
            }
        }
        Stored::Opaque { txid: at, curr, prev } => {
            if moves_on(*at, txid)? {
                Step::Combine(curr.clone())
            } else {
                prev.clone().map_or(Step::Fresh, Step::Combine)
            }
        }
        Stored::Plain(value) => Step::Combine(value.clone()),
    })
}

/// Whether batch `txid` follows the batch `at` that wrote a value (false:
/// it is that batch, replayed); a value written by a later batch is an
/// error.
pub fn moves_on(at: u64, txid: u64) -> Result<bool, StateError> {
    match at.cmp(&txid) {
        std::cmp::Ordering::Greater => Err(StateError::Ahead { stored: at, txid }),
        std::cmp::Ordering::Equal => Ok(false),
        std::cmp::Ordering::Less => Ok(true),
    }
}

/// The value to store once the new value of a key is known.
pub fn updated(kind: StateKind, stored: Option<&Stored>, txid: u64, value: Value) -> Stored {
    match kind {
        StateKind::Transactional => Stored::Transactional { txid, value },
        StateKind::Opaque => {
            let prev = match stored {
                Some(Stored::Opaque { txid: at, prev, .. }) if *at == txid => prev.clone(),
                Some(Stored::Opaque { curr, .. }) => Some(curr.clone()),
                _ => None,
            };
            Stored::Opaque { txid, curr: value, prev }
        }
        StateKind::NonTransactional => Stored::Plain(value),
    }
}

/// The whole rule for one key: the record to store once batch `txid`
/// writes what `value_for` makes of the value it builds on (`None`: the key
/// has none to build on); `None` when the batch was applied to the key
/// already and nothing is written. Fails with the rule's [`StateError`] or
/// with what `value_for` fails with.
pub fn apply<E: From<StateError>>(
    kind: StateKind,
    stored: Option<&Stored>,
    txid: u64,
    value_for: impl FnOnce(Option<Value>) -> Result<Value, E>,
) -> Result<Option<Stored>, E> {
    let value = match step(kind, stored, txid)? {
        Step::Skip => return Ok(None),
        Step::Fresh => value_for(None)?,
        Step::Combine(base) => value_for(Some(base))?,
    };
    Ok(Some(updated(kind, stored, txid, value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// What a batch whose partial is `partial` makes of a key's base.
    fn plus(partial: i64) -> impl FnOnce(Option<Value>) -> Result<Value, StateError> {
        move |base| match base {
            Some(base) => {
                weir_sdk::operator::add(base, Value::I64(partial)).map_err(|e| StateError::Combine(e.to_string()))
            }
            None => Ok(Value::I64(partial)),
        }
    }

    fn tx(value: i64, txid: u64) -> Stored {
        Stored::Transactional { txid, value: Value::I64(value) }
    }

    fn opaque(curr: i64, prev: Option<i64>, txid: u64) -> Stored {
        Stored::Opaque { txid, curr: Value::I64(curr), prev: prev.map(Value::I64) }
    }

    /// A map state of one kind, updated the way a commit does: each key's
    /// batch partial (the sum of its updates) applied once.
    fn apply_batch(
        kind: StateKind,
        map: &mut BTreeMap<&'static str, Stored>,
        txid: u64,
        updates: &[(&'static str, i64)],
    ) {
        let mut partials: BTreeMap<&str, i64> = BTreeMap::new();
        for (key, amount) in updates {
            *partials.entry(key).or_default() += amount;
        }
        for (key, partial) in partials {
            if let Some(new) = apply(kind, map.get(key), txid, plus(partial)).unwrap() {
                map.insert(key, new);
            }
        }
    }

    #[test]
    fn transactional_batch_skips_keys_it_already_applied() {
        let mut map = BTreeMap::from([("man", tx(3, 1)), ("dog", tx(4, 3)), ("apple", tx(10, 2))]);
        apply_batch(StateKind::Transactional, &mut map, 3, &[("man", 1), ("man", 1), ("dog", 1)]);
        assert_eq!(map, BTreeMap::from([("man", tx(5, 3)), ("dog", tx(4, 3)), ("apple", tx(10, 2))]));
    }

    #[test]
    fn opaque_value_moves_forward_or_recomputes_from_prev() {
        let stored = opaque(4, Some(1), 2);
        let next = apply(StateKind::Opaque, Some(&stored), 3, plus(2)).unwrap();
        assert_eq!(next, Some(opaque(6, Some(4), 3)));
        let replay = apply(StateKind::Opaque, Some(&stored), 2, plus(2)).unwrap();
        assert_eq!(replay, Some(opaque(3, Some(1), 2)));
    }

    #[test]
    fn opaque_map_replay_replaces_the_first_attempt() {
        let mut map = BTreeMap::new();
        apply_batch(StateKind::Opaque, &mut map, 1, &[("k", 1), ("k", 2)]);
        assert_eq!(map["k"].value(), &Value::I64(3));
        apply_batch(StateKind::Opaque, &mut map, 1, &[("k", 2)]);
        assert_eq!(map["k"].value(), &Value::I64(2));
        apply_batch(StateKind::Opaque, &mut map, 2, &[("k", 3), ("k", 1)]);
        assert_eq!(map["k"].value(), &Value::I64(6));
    }

    #[test]
    fn transactional_map_replay_is_skipped() {
        let mut map = BTreeMap::new();
        apply_batch(StateKind::Transactional, &mut map, 1, &[("k", 1), ("k", 2)]);
        assert_eq!(map["k"].value(), &Value::I64(3));
        apply_batch(StateKind::Transactional, &mut map, 1, &[("k", 1), ("k", 2)]);
        assert_eq!(map["k"].value(), &Value::I64(3));
        apply_batch(StateKind::Transactional, &mut map, 2, &[("k", 3), ("k", 1)]);
        assert_eq!(map["k"].value(), &Value::I64(7));
    }

    #[test]
    fn stored_txid_ahead_of_the_batch_is_an_error() {
        for (kind, stored) in [(StateKind::Transactional, tx(1, 5)), (StateKind::Opaque, opaque(1, None, 5))] {
            let err = apply(kind, Some(&stored), 4, plus(1)).unwrap_err();
            assert_eq!(err, StateError::Ahead { stored: 5, txid: 4 });
        }
    }

    #[test]
    fn non_transactional_state_updates_blindly() {
        let once = apply(StateKind::NonTransactional, None, 1, plus(2)).unwrap();
        let twice = apply(StateKind::NonTransactional, once.as_ref(), 1, plus(2)).unwrap();
        assert_eq!(twice, Some(Stored::Plain(Value::I64(4))));
    }

    #[test]
    fn a_value_of_another_kind_is_refused() {
        let err = apply(StateKind::Opaque, Some(&tx(1, 1)), 2, plus(1)).unwrap_err();
        assert_eq!(
            err,
            StateError::ValueOfAnotherKind { stored: StateKind::Transactional, declared: StateKind::Opaque }
        );
        assert_eq!(err.to_string(), "the stored value is transactional state, the topology declares opaque");
        assert!(!crate::StoreError::from(err).context("state counts").is_retryable());
    }

    #[test]
    fn stored_values_round_trip() {
        for stored in [tx(3, 7), opaque(6, Some(4), 3), opaque(2, None, 1), Stored::Plain(Value::Str("x".into()))] {
            assert_eq!(Stored::decode(&stored.encode()).unwrap(), stored);
        }
        assert_eq!(tx(3, 7).encode(), [TAG_TRANSACTIONAL, 7, 3, 6], "a small count at rest takes four bytes");
        let err = Stored::decode(&[9]).unwrap_err();
        assert_eq!(err, StateError::Malformed("unreadable stored value: unknown stored value tag 9".into()));
        assert!(Stored::decode(&[1, 0]).is_err());
        assert!(Stored::decode(&[TAG_TRANSACTIONAL, 7, 3, 6, 0]).is_err(), "trailing bytes");
    }

    #[test]
    fn values_of_the_legacy_layout_are_still_read() {
        let legacy = |tag: u8, txid: u64, values: &[Value]| {
            let mut out = vec![tag];
            if tag != LEGACY_PLAIN {
                out.extend_from_slice(&txid.to_le_bytes());
            }
            for value in values {
                codec::write_value(&mut out, value.as_ref());
            }
            out
        };
        let decoded = |bytes: Vec<u8>| Stored::decode(&bytes).unwrap();
        assert_eq!(decoded(legacy(LEGACY_TRANSACTIONAL, 7, &[Value::I64(3)])), tx(3, 7));
        assert_eq!(decoded(legacy(LEGACY_OPAQUE, 3, &[Value::I64(6), Value::I64(4)])), opaque(6, Some(4), 3));
        assert_eq!(decoded(legacy(LEGACY_PLAIN, 0, &[Value::Str("x".into())])), Stored::Plain(Value::Str("x".into())));
    }
}
