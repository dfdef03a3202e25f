//! What a batch writes to its states, as the store commits it: records,
//! removals and partials to combine, per state.

use super::keyed::KeyedValues;
use super::rules::Stored;
use weir_sdk::operator::Builtin;

/// Partials for keys no operator reads during the batch, to combine with
/// the stored values in the commit itself: one lookup per key.
pub struct Combines {
    /// The state's kind, for Trident's rules.
    pub kind: weir_sdk::topology::StateKind,
    /// How a partial meets a stored value.
    pub builtin: Builtin,
    /// Encoded key and partial, sorted by key.
    pub partials: KeyedValues,
}

/// What a batch wrote to one state, ready to store.
pub struct StateWrites {
    /// The state.
    pub state: String,
    /// Encoded key to the record to store, sorted by key.
    pub records: Vec<(Vec<u8>, Stored)>,
    /// Encoded keys to remove, sorted.
    pub removed: Vec<Vec<u8>>,
    /// Key ranges `[from, to)` to remove, before the records are stored.
    pub removed_ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Partials to combine in place at commit.
    pub combines: Option<Combines>,
}

impl StateWrites {
    /// The kind of state the writes are for; `None` when there are none.
    pub fn kind(&self) -> Option<weir_sdk::topology::StateKind> {
        self.combines.as_ref().map(|c| c.kind).or_else(|| self.records.first().map(|r| r.1.kind()))
    }
}
