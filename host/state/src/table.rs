//! A state's redb table, in one of three layouts. Most states keep
//! [`Stored`] records in their compact encoding, of any width. A
//! transactional count (a persistent aggregate of `Count`, the commonest
//! state) keeps fixed-width `(txid, count)` records instead, and an opaque
//! count (an opaque persistent aggregate of `Count`, or a window's open
//! counts beside its integer watermark) `(txid, count, previous count)`:
//! redb replaces a fixed-width value in place, where replacing a value of
//! varying width rewrites the end offset of every later value in its page.
//!
//! The layout is chosen when the table is created, by its first commit, and
//! redb records it as the table's value type, so readers open any. The
//! counts layouts also compare their keys a word at a time ([`StateKey`]).

use super::error::Context;
use super::merge::{self, BatchPartials};
use super::rules::{self, Stored};
use super::writes::Combines;
use super::{StateError, StoreError};
use redb::{
    ReadOnlyTable, ReadTransaction, ReadableTable, Table, TableDefinition, TableError, TypeName, WriteTransaction,
};
use std::ops::Bound;
use weir_sdk::codec::Value;
use weir_sdk::operator::Builtin;
use weir_sdk::topology::StateKind;

/// A transactional count as stored: the txid that wrote it, then the count,
/// 16 bytes.
#[derive(Debug)]
pub struct TransactionalCount;

impl redb::Value for TransactionalCount {
    type SelfType<'a> = (u64, i64);
    type AsBytes<'a> = [u8; 16];

    fn fixed_width() -> Option<usize> {
        Some(16)
    }

    fn from_bytes<'a>(data: &'a [u8]) -> (u64, i64)
    where
        Self: 'a,
    {
        let (txid, count) = data.split_at(8);
        (u64::from_le_bytes(txid.try_into().expect("8 bytes")), i64::from_le_bytes(count.try_into().expect("8 bytes")))
    }

    fn as_bytes<'a, 'b: 'a>(value: &'a (u64, i64)) -> [u8; 16]
    where
        Self: 'b,
    {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&value.0.to_le_bytes());
        out[8..].copy_from_slice(&value.1.to_le_bytes());
        out
    }

    fn type_name() -> TypeName {
        TypeName::new("weir::TransactionalCount")
    }
}

/// An opaque count as stored: the txid that wrote it, the count, and the
/// count before that txid (a flag byte, then the count), 25 bytes.
#[derive(Debug)]
pub struct OpaqueCount;

/// An opaque count's txid, current count and count before the txid.
pub type OpaqueRecord = (u64, i64, Option<i64>);

impl redb::Value for OpaqueCount {
    type SelfType<'a> = OpaqueRecord;
    type AsBytes<'a> = [u8; 25];

    fn fixed_width() -> Option<usize> {
        Some(25)
    }

    fn from_bytes<'a>(data: &'a [u8]) -> OpaqueRecord
    where
        Self: 'a,
    {
        let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        let prev = (data[24] != 0).then(|| word(16) as i64);
        (word(0), word(8) as i64, prev)
    }

    fn as_bytes<'a, 'b: 'a>(value: &'a OpaqueRecord) -> [u8; 25]
    where
        Self: 'b,
    {
        let mut out = [0u8; 25];
        out[..8].copy_from_slice(&value.0.to_le_bytes());
        out[8..16].copy_from_slice(&value.1.to_le_bytes());
        if let Some(prev) = value.2 {
            out[16..24].copy_from_slice(&prev.to_le_bytes());
            out[24] = 1;
        }
        out
    }

    fn type_name() -> TypeName {
        TypeName::new("weir::OpaqueCount")
    }
}

/// A state key, as [`super::keys`] encodes it, compared as bytes: first
/// its leading 8 bytes as one word, which orders most short keys without a
/// call to `memcmp`.
#[derive(Debug)]
pub struct StateKey;

impl redb::Value for StateKey {
    type SelfType<'a> = &'a [u8];
    type AsBytes<'a> = &'a [u8];

    fn fixed_width() -> Option<usize> {
        None
    }

    fn from_bytes<'a>(data: &'a [u8]) -> &'a [u8]
    where
        Self: 'a,
    {
        data
    }

    fn as_bytes<'a, 'b: 'a>(value: &'a &'b [u8]) -> &'a [u8]
    where
        Self: 'b,
    {
        value
    }

    fn type_name() -> TypeName {
        TypeName::new("weir::StateKey")
    }
}

impl redb::Key for StateKey {
    #[inline]
    fn compare(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>())
            && x != y
        {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        a.cmp(b)
    }
}

fn records_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

fn counts_def(name: &str) -> TableDefinition<'_, StateKey, TransactionalCount> {
    TableDefinition::new(name)
}

fn opaque_counts_def(name: &str) -> TableDefinition<'_, StateKey, OpaqueCount> {
    TableDefinition::new(name)
}

fn stored_count((txid, count): (u64, i64)) -> Stored {
    Stored::Transactional { txid, value: Value::I64(count) }
}

fn stored_opaque((txid, curr, prev): OpaqueRecord) -> Stored {
    Stored::Opaque { txid, curr: Value::I64(curr), prev: prev.map(Value::I64) }
}

/// The fixed-width record of an opaque `stored`, if it has one.
fn opaque_count_of(stored: &Stored) -> Option<OpaqueRecord> {
    match stored {
        Stored::Opaque { txid, curr: Value::I64(curr), prev: None } => Some((*txid, *curr, None)),
        Stored::Opaque { txid, curr: Value::I64(curr), prev: Some(Value::I64(prev)) } => {
            Some((*txid, *curr, Some(*prev)))
        }
        _ => None,
    }
}

/// The fixed-width record of `stored`, if it has one.
fn count_of(stored: &Stored) -> Option<(u64, i64)> {
    match stored {
        Stored::Transactional { txid, value: Value::I64(count) } => Some((*txid, *count)),
        _ => None,
    }
}

/// A state's table in a read transaction.
pub enum ReadTable {
    /// Compact records.
    Records(ReadOnlyTable<&'static [u8], &'static [u8]>),
    /// Transactional counts.
    Counts(ReadOnlyTable<StateKey, TransactionalCount>),
    /// Opaque counts.
    OpaqueCounts(ReadOnlyTable<StateKey, OpaqueCount>),
}

/// How a state's table lays its records out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Compact records of any width.
    Records,
    /// `(txid, count)`, 16 bytes.
    Counts,
    /// `(txid, count, previous count)`, 25 bytes.
    OpaqueCounts,
}

impl Layout {
    const ALL: [Layout; 3] = [Layout::Records, Layout::Counts, Layout::OpaqueCounts];
}

/// The records of a fixed-width table's entries, decoded by `record`.
fn decoded<'a, V: redb::Value + 'static>(
    entries: impl Iterator<
        Item = std::result::Result<(redb::AccessGuard<'a, StateKey>, redb::AccessGuard<'a, V>), redb::StorageError>,
    >,
    record: impl for<'v> Fn(V::SelfType<'v>) -> Stored,
    read: &mut Read,
) -> Result<(), StoreError> {
    for entry in entries {
        let (key, value) = entry?;
        if !read.has_room(key.value().len() + std::mem::size_of::<V::SelfType<'_>>()) {
            break;
        }
        read.entries.push((key.value().to_vec(), record(value.value())));
    }
    Ok(())
}

/// Records read from a table, up to a budget of bytes.
pub struct Read {
    pub entries: Vec<(Vec<u8>, Stored)>,
    /// Whether the budget ended the read before its bounds did.
    pub cut: bool,
    bytes_left: usize,
}

impl Read {
    fn within(max_bytes: usize, limit: usize) -> Read {
        Read { entries: Vec::with_capacity(limit.min(1024)), cut: false, bytes_left: max_bytes }
    }

    /// Whether a record of `bytes` fits what is left of the budget; the
    /// first always does.
    fn has_room(&mut self, bytes: usize) -> bool {
        if bytes > self.bytes_left && !self.entries.is_empty() {
            self.cut = true;
            return false;
        }
        self.bytes_left = self.bytes_left.saturating_sub(bytes);
        true
    }
}

impl ReadTable {
    /// The table `name`, in whichever layout it has; `None` when there is none.
    pub fn open(txn: &ReadTransaction, name: &str) -> Result<Option<ReadTable>, StoreError> {
        for layout in Layout::ALL {
            let opened = match layout {
                Layout::Records => txn.open_table(records_def(name)).map(ReadTable::Records),
                Layout::Counts => txn.open_table(counts_def(name)).map(ReadTable::Counts),
                Layout::OpaqueCounts => txn.open_table(opaque_counts_def(name)).map(ReadTable::OpaqueCounts),
            };
            match opened {
                Ok(table) => return Ok(Some(table)),
                Err(TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(TableError::TableTypeMismatch { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StateError::Malformed(format!("table {name} has a layout this host does not know")).into())
    }

    /// The record of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        match self {
            ReadTable::Records(table) => Ok(table.get(key)?.map(|v| Stored::decode(v.value())).transpose()?),
            ReadTable::Counts(table) => Ok(table.get(key)?.map(|v| stored_count(v.value()))),
            ReadTable::OpaqueCounts(table) => Ok(table.get(key)?.map(|v| stored_opaque(v.value()))),
        }
    }

    /// The kind of the first record, `None` when there is none.
    pub fn first_kind(&self) -> Result<Option<StateKind>, StoreError> {
        match self {
            ReadTable::Records(table) => match table.first()? {
                Some((_, value)) => Ok(Some(Stored::decode(value.value())?.kind())),
                None => Ok(None),
            },
            ReadTable::Counts(table) => Ok(table.first()?.map(|_| StateKind::Transactional)),
            ReadTable::OpaqueCounts(table) => Ok(table.first()?.map(|_| StateKind::Opaque)),
        }
    }

    /// At most `limit` keys after `after` (from the first, without one)
    /// with their records, sorted by key: a range scan that reads no more
    /// than it returns.
    pub fn page(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        Ok(self.page_within(after, limit, usize::MAX)?.entries)
    }

    /// [`ReadTable::page`], ending early, before the key that would take
    /// its keys and records past `max_bytes` (never before the first).
    pub fn page_within(&self, after: Option<&[u8]>, limit: usize, max_bytes: usize) -> Result<Read, StoreError> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.range_of((from, Bound::Unbounded), limit, max_bytes)
    }

    /// The keys from `from` up to (not including) `to` with their
    /// records, sorted by key.
    pub fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        Ok(self.range_of((Bound::Included(from), Bound::Excluded(to)), usize::MAX, usize::MAX)?.entries)
    }

    fn range_of(
        &self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        limit: usize,
        max_bytes: usize,
    ) -> Result<Read, StoreError> {
        let mut read = Read::within(max_bytes, limit);
        match self {
            ReadTable::Records(table) => {
                for entry in table.range::<&[u8]>(bounds)?.take(limit) {
                    let (key, value) = entry?;
                    if !read.has_room(key.value().len() + value.value().len()) {
                        break;
                    }
                    read.entries.push((key.value().to_vec(), Stored::decode(value.value())?));
                }
            }
            ReadTable::Counts(table) => decoded(table.range::<&[u8]>(bounds)?.take(limit), stored_count, &mut read)?,
            ReadTable::OpaqueCounts(table) => {
                decoded(table.range::<&[u8]>(bounds)?.take(limit), stored_opaque, &mut read)?
            }
        }
        Ok(read)
    }

    /// Each key from `from` up to (not including) `to` with its record, in
    /// key order, handed to `each` as it is read: a range of any size,
    /// never held whole.
    pub fn each_in(
        &self,
        from: &[u8],
        to: &[u8],
        mut each: impl FnMut(&[u8], Stored) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let bounds = (Bound::Included(from), Bound::Excluded(to));
        match self {
            ReadTable::Records(table) => {
                for entry in table.range::<&[u8]>(bounds)? {
                    let (key, value) = entry?;
                    each(key.value(), Stored::decode(value.value())?)?;
                }
            }
            ReadTable::Counts(table) => {
                for entry in table.range::<&[u8]>(bounds)? {
                    let (key, value) = entry?;
                    each(key.value(), stored_count(value.value()))?;
                }
            }
            ReadTable::OpaqueCounts(table) => {
                for entry in table.range::<&[u8]>(bounds)? {
                    let (key, value) = entry?;
                    each(key.value(), stored_opaque(value.value()))?;
                }
            }
        }
        Ok(())
    }

    /// Each key from `from` up to (not including) `to`, in key order,
    /// handed to `each` until it says to stop (returns false); no record
    /// is decoded.
    pub fn keys_in(&self, from: &[u8], to: &[u8], mut each: impl FnMut(&[u8]) -> bool) -> Result<(), StoreError> {
        let bounds = (Bound::Included(from), Bound::Excluded(to));
        match self {
            ReadTable::Records(table) => {
                for entry in table.range::<&[u8]>(bounds)? {
                    if !each(entry?.0.value()) {
                        break;
                    }
                }
            }
            ReadTable::Counts(table) => {
                for entry in table.range::<&[u8]>(bounds)? {
                    if !each(entry?.0.value()) {
                        break;
                    }
                }
            }
            ReadTable::OpaqueCounts(table) => {
                for entry in table.range::<&[u8]>(bounds)? {
                    if !each(entry?.0.value()) {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every key with its record, sorted by key.
    pub fn entries(&self) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        Ok(self.range_of((Bound::Unbounded, Bound::Unbounded), usize::MAX, usize::MAX)?.entries)
    }
}

/// A state's table in a write transaction.
pub enum WriteTable<'t> {
    /// Compact records.
    Records(Table<'t, &'static [u8], &'static [u8]>),
    /// Transactional counts.
    Counts(Table<'t, StateKey, TransactionalCount>),
    /// Opaque counts.
    OpaqueCounts(Table<'t, StateKey, OpaqueCount>),
}

/// Told, by [`WriteTable::combine_in_place_except`], a key and its record.
pub type Told<'a> = dyn FnMut(&[u8], &Stored) + 'a;

impl<'t> WriteTable<'t> {
    /// The table `name`, in whichever layout it has; created in `layout`
    /// when it does not exist yet.
    pub fn open(txn: &'t WriteTransaction, name: &str, layout: Layout) -> Result<WriteTable<'t>, StoreError> {
        // Opening creates a missing table in the layout asked for first.
        let others = Layout::ALL.into_iter().filter(|l| *l != layout);
        for layout in std::iter::once(layout).chain(others) {
            let opened = match layout {
                Layout::Records => txn.open_table(records_def(name)).map(WriteTable::Records),
                Layout::Counts => txn.open_table(counts_def(name)).map(WriteTable::Counts),
                Layout::OpaqueCounts => txn.open_table(opaque_counts_def(name)).map(WriteTable::OpaqueCounts),
            };
            match opened {
                Err(TableError::TableTypeMismatch { .. }) => continue,
                other => return Ok(other?),
            }
        }
        Err(StateError::Malformed(format!("table {name} has a layout this host does not know")).into())
    }

    /// The bytes the table's tree holds: keys, values and the pages'
    /// own records, without free space.
    pub fn size(&self) -> Result<u64, StoreError> {
        use redb::ReadableTableMetadata;
        let stats = match self {
            WriteTable::Records(table) => table.stats()?,
            WriteTable::Counts(table) => table.stats()?,
            WriteTable::OpaqueCounts(table) => table.stats()?,
        };
        Ok(stats.stored_bytes() + stats.metadata_bytes())
    }

    /// Stores `stored` as the record of `key`.
    pub fn insert(&mut self, key: &[u8], stored: &Stored, encoded: &mut Vec<u8>) -> Result<(), StoreError> {
        match self {
            WriteTable::Records(table) => {
                encoded.clear();
                stored.encode_into(encoded);
                table.insert(key, encoded.as_slice())?;
            }
            WriteTable::Counts(table) => {
                let count = count_of(stored).ok_or_else(|| not_a_count("transactional", stored))?;
                table.insert(key, count)?;
            }
            WriteTable::OpaqueCounts(table) => {
                let count = opaque_count_of(stored).ok_or_else(|| not_a_count("opaque", stored))?;
                table.insert(key, count)?;
            }
        }
        Ok(())
    }

    /// Removes every record from `from` up to (not including) `to`, in one
    /// pass over the tree. Returns how many it removed.
    pub fn remove_range(&mut self, from: &[u8], to: &[u8]) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut counted = |_: &[u8]| {
            removed += 1;
            false
        };
        if from < to {
            match self {
                WriteTable::Records(table) => table.retain_in::<&[u8], _>(from..to, |key, _| counted(key))?,
                WriteTable::Counts(table) => table.retain_in::<&[u8], _>(from..to, |key, _| counted(key))?,
                WriteTable::OpaqueCounts(table) => table.retain_in::<&[u8], _>(from..to, |key, _| counted(key))?,
            }
        }
        Ok(removed)
    }

    /// The greatest key the table holds.
    fn last_key(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(match self {
            WriteTable::Records(table) => table.last()?.map(|(key, _)| key.value().to_vec()),
            WriteTable::Counts(table) => table.last()?.map(|(key, _)| key.value().to_vec()),
            WriteTable::OpaqueCounts(table) => table.last()?.map(|(key, _)| key.value().to_vec()),
        })
    }

    /// Removes the record of `key`, if there is one.
    /// Every key of the table, in order.
    pub fn keys(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut out = Vec::new();
        match self {
            WriteTable::Records(table) => {
                for entry in table.iter()? {
                    out.push(entry?.0.value().to_vec());
                }
            }
            WriteTable::Counts(table) => {
                for entry in table.iter()? {
                    out.push(entry?.0.value().to_vec());
                }
            }
            WriteTable::OpaqueCounts(table) => {
                for entry in table.iter()? {
                    out.push(entry?.0.value().to_vec());
                }
            }
        }
        Ok(out)
    }

    pub fn remove(&mut self, key: &[u8]) -> Result<(), StoreError> {
        match self {
            WriteTable::Records(table) => drop(table.remove(key)?),
            WriteTable::Counts(table) => drop(table.remove(key)?),
            WriteTable::OpaqueCounts(table) => drop(table.remove(key)?),
        }
        Ok(())
    }

    /// Combines each batch's partials with the stored values, by Trident's
    /// rules applied batch by batch in txid order: one tree lookup and at
    /// most one write per key for the whole group, the value replaced in
    /// place. Returns the keys written.
    #[cfg(test)]
    pub fn combine_in_place(
        &mut self,
        batches: &[BatchPartials<'_>],
        encoded: &mut Vec<u8>,
    ) -> Result<usize, StoreError> {
        self.combine_in_place_except(batches, &[], encoded, None)
    }

    /// [`WriteTable::combine_in_place`], leaving out the keys in the
    /// ranges `[from, to)` of `except` (which a later write removes), and
    /// telling `told` (when given) each key it combined with the record it
    /// holds after, changed or not.
    pub fn combine_in_place_except(
        &mut self,
        batches: &[BatchPartials<'_>],
        except: &[(&[u8], &[u8])],
        encoded: &mut Vec<u8>,
        mut told: Option<&mut Told<'_>>,
    ) -> Result<usize, StoreError> {
        let Some((_, first)) = batches.first() else { return Ok(0) };
        let (kind, builtin) = (first.kind, first.builtin);
        if let Some((txid, _)) = batches.iter().find(|(_, c)| c.kind != kind || c.builtin != builtin) {
            let unlike = format!("batch {txid} combines the state unlike the batch before it");
            return Err(StateError::Malformed(unlike).into());
        }
        if matches!(self, WriteTable::Counts(_)) && kind != StateKind::Transactional {
            return Err(rules::kind_mismatch(StateKind::Transactional, kind).into());
        }
        if matches!(self, WriteTable::OpaqueCounts(_)) && kind != StateKind::Opaque {
            return Err(rules::kind_mismatch(StateKind::Opaque, kind).into());
        }
        let mut written = 0;
        // Keys come in order: those past the table's last (a new window's,
        // a new minute's) are new, and are inserted without a lookup.
        let last = self.last_key()?;
        merge::for_each_key(batches, |key, partials| {
            if except.iter().any(|(from, to)| *from <= key && key < *to) {
                return Ok(());
            }
            let context = || format!("key {}", super::describe_key(key));
            let may_exist = last.as_deref().is_some_and(|last| key <= last);
            let changed = match self {
                WriteTable::Records(table) => {
                    let guard = if may_exist { table.get_mut(key)? } else { None };
                    let stored = guard.as_ref().map(|g| Stored::decode(g.value())).transpose().with_context(context)?;
                    let partials = partials.for_stored(stored.as_ref().and_then(Stored::txid));
                    let (stored, changed) = combined(kind, builtin, stored, &partials).with_context(context)?;
                    if let (true, Some(stored)) = (changed, &stored) {
                        encoded.clear();
                        stored.encode_into(encoded);
                        // Replaced in place, or inserted when the key had no value.
                        if guard.map(|mut g| g.insert(encoded.as_slice())).transpose()?.is_none() {
                            table.insert(key, encoded.as_slice())?;
                        }
                    }
                    if let (Some(told), Some(stored)) = (told.as_mut(), &stored) {
                        told(key, stored);
                    }
                    changed
                }
                WriteTable::OpaqueCounts(table) => {
                    let guard = if may_exist { table.get_mut(key)? } else { None };
                    let stored = guard.as_ref().map(|g| stored_opaque(g.value()));
                    let partials = partials.for_stored(stored.as_ref().and_then(Stored::txid));
                    let (stored, changed) = combined(kind, builtin, stored, &partials).with_context(context)?;
                    if let (true, Some(stored)) = (changed, &stored) {
                        let count = opaque_count_of(stored).ok_or_else(|| not_a_count("opaque", stored))?;
                        if guard.map(|mut g| g.insert(count)).transpose()?.is_none() {
                            table.insert(key, count)?;
                        }
                    }
                    if let (Some(told), Some(stored)) = (told.as_mut(), &stored) {
                        told(key, stored);
                    }
                    changed
                }
                WriteTable::Counts(table) => {
                    // Trident's transactional rule, on the record as stored.
                    let guard = if may_exist { table.get_mut(key)? } else { None };
                    let mut record = guard.as_ref().map(|g| g.value());
                    let mut changed = false;
                    for &(txid, partial) in partials.for_stored(record.map(|(at, _)| at)).iter() {
                        let base = match record {
                            Some((at, count)) if rules::moves_on(at, txid).with_context(context)? => Some(count),
                            Some(_) => continue,
                            None => None,
                        };
                        // A count's partial is an integer: added here, unless
                        // it overflows or is not one, which the rule reports.
                        let sum = match (base, partial) {
                            (Some(base), Value::I64(n)) => base.checked_add(*n),
                            (None, Value::I64(n)) => Some(*n),
                            _ => None,
                        };
                        let new = match sum {
                            Some(count) => Value::I64(count),
                            None => {
                                rules::with_partial(builtin, base.map(Value::I64), partial).with_context(context)?
                            }
                        };
                        let Value::I64(count) = new else {
                            let not_a_count = format!("{}: the new value is not a count", context());
                            return Err(StateError::Malformed(not_a_count).into());
                        };
                        record = Some((txid, count));
                        changed = true;
                    }
                    if let (true, Some(record)) = (changed, record)
                        && guard.map(|mut g| g.insert(record)).transpose()?.is_none()
                    {
                        table.insert(key, record)?;
                    }
                    if let (Some(told), Some(record)) = (told.as_mut(), record) {
                        told(key, &stored_count(record));
                    }
                    changed
                }
            };
            written += usize::from(changed);
            Ok(())
        })?;
        Ok(written)
    }
}

/// `stored` with a key's `partials` (by txid, in order) combined into it by
/// Trident's rules, and whether any partial changed it.
fn combined(
    kind: StateKind,
    builtin: Builtin,
    mut stored: Option<Stored>,
    partials: &[(u64, &Value)],
) -> Result<(Option<Stored>, bool), StoreError> {
    let mut changed = false;
    for &(txid, partial) in partials {
        let value_for = |base| rules::with_partial(builtin, base, partial);
        if let Some(new) = rules::apply(kind, stored.as_ref(), txid, value_for)? {
            stored = Some(new);
            changed = true;
        }
    }
    Ok((stored, changed))
}

fn not_a_count(kind: &str, stored: &Stored) -> StateError {
    StateError::Malformed(format!(
        "this state holds {kind} counts, and the {} value {} is not one",
        rules::kind_name(stored.kind()),
        crate::json::to_json(stored.value())
    ))
}

impl Layout {
    /// The fixed-width layout of a state whose partials are `combines`:
    /// counts, transactional or opaque, by the built-in `Count`.
    pub fn for_combines(combines: &Combines) -> Layout {
        match (combines.kind, combines.builtin) {
            (StateKind::Transactional, Builtin::Count) => Layout::Counts,
            (StateKind::Opaque, Builtin::Count) => Layout::OpaqueCounts,
            _ => Layout::Records,
        }
    }

    /// Whether the layout holds `stored`.
    pub fn holds(self, stored: &Stored) -> bool {
        match self {
            Layout::Records => true,
            Layout::Counts => count_of(stored).is_some(),
            Layout::OpaqueCounts => opaque_count_of(stored).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::StateWrites;
    use crate::{BatchRecord, Db, keys};

    fn key(word: &str) -> Vec<u8> {
        keys::encode([weir_sdk::codec::ValueRef::Str(word)])
    }

    fn count_writes(kind: StateKind, partials: &[(&str, i64)]) -> Vec<StateWrites> {
        let partials = partials.iter().map(|(word, n)| (key(word), Value::I64(*n))).collect();
        let combines = Combines { kind, builtin: Builtin::Count, partials };
        vec![StateWrites {
            state: "counts".into(),
            records: Vec::new(),
            removed: Vec::new(),
            removed_ranges: Vec::new(),
            combines: Some(combines),
        }]
    }

    fn commit(db: &Db, txid: u64, writes: &[StateWrites]) -> Result<usize, StoreError> {
        db.commit("t", txid, &BatchRecord { attempt: 0, time_ms: 0, spout: vec![] }, writes)
    }

    fn layout(db: &Db) -> &'static str {
        let txn = db.begin_read().unwrap();
        match ReadTable::open(&txn, "state/t/counts").unwrap() {
            Some(ReadTable::Counts(_)) => "counts",
            Some(ReadTable::OpaqueCounts(_)) => "opaque counts",
            Some(ReadTable::Records(_)) => "records",
            None => "none",
        }
    }

    fn tx(txid: u64, count: i64) -> Stored {
        Stored::Transactional { txid, value: Value::I64(count) }
    }

    #[test]
    fn state_keys_compare_as_their_bytes() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\0",
            b"\0\0",
            b"\x05a",
            b"\x05a\0\0",
            b"\x05abcdefg",
            b"\x05abcdefg\0\0",
            b"\x05abcdefh",
            b"\x05abcdefgh\0\0",
            b"\x05abcdefgi",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(<StateKey as redb::Key>::compare(a, b), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn a_transactional_count_is_stored_in_fixed_width_records() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        commit(&db, 1, &count_writes(StateKind::Transactional, &[("a", 2), ("b", 1)])).unwrap();
        assert_eq!(layout(&db), "counts");
        commit(&db, 2, &count_writes(StateKind::Transactional, &[("a", 3), ("c", 1)])).unwrap();
        let scanned = db.scan("t", "counts").unwrap();
        let expected = [("a", tx(2, 5)), ("b", tx(1, 1)), ("c", tx(2, 1))];
        assert_eq!(scanned, expected.map(|(w, s)| (vec![Value::from(w)], s)));
        assert_eq!(db.get("t", "counts", &[Value::from("a")]).unwrap(), Some(tx(2, 5)));

        // A record that is not a transactional count is refused, naming the
        // state, and nothing of its batch is stored.
        let stray = StateWrites {
            state: "counts".into(),
            records: vec![(key("a"), Stored::Transactional { txid: 3, value: Value::from("x") })],
            removed: Vec::new(),
            removed_ranges: Vec::new(),
            combines: None,
        };
        let err = commit(&db, 3, &[stray]).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "state counts: this state holds transactional counts, and the transactional value \"x\" is not one"
        );
        assert!(matches!(err.root(), StoreError::State(StateError::Malformed(_))), "{err:#}");
        let err = commit(&db, 3, &count_writes(StateKind::Opaque, &[("a", 1)])).unwrap_err();
        assert!(format!("{err:#}").contains("state counts holds transactional values"), "{err:#}");
        // Without the recorded kind (a data dir of an earlier release), the
        // table's layout refuses it.
        let txn = db.db.begin_write().unwrap();
        txn.delete_table(TableDefinition::<&str, &str>::new("meta/t/states")).unwrap();
        txn.commit().unwrap();
        let err = commit(&db, 3, &count_writes(StateKind::Opaque, &[("a", 1)])).unwrap_err();
        assert!(
            format!("{err:#}").contains("the stored value is transactional state, the topology declares opaque"),
            "{err:#}"
        );
        let another_kind =
            StateError::ValueOfAnotherKind { stored: StateKind::Transactional, declared: StateKind::Opaque };
        assert!(matches!(err.root(), StoreError::State(e) if *e == another_kind), "{err:#}");
        assert_eq!(db.progress("t").unwrap().last_committed, 2);
        assert_eq!(db.get("t", "counts", &[Value::from("a")]).unwrap(), Some(tx(2, 5)));
    }

    #[test]
    fn keys_before_between_and_past_the_stored_ones_are_combined_in_every_layout() {
        let layouts = [
            (StateKind::Transactional, Builtin::Count, "counts"),
            (StateKind::Opaque, Builtin::Count, "opaque counts"),
            (StateKind::Transactional, Builtin::Sum, "records"),
        ];
        for (kind, builtin, expected_layout) in layouts {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(dir.path()).unwrap();
            let writes = |txid: u64, partials: &[(&str, i64)]| {
                let mut writes = count_writes(kind, partials);
                writes[0].combines.as_mut().unwrap().builtin = builtin;
                commit(&db, txid, &writes).unwrap()
            };
            writes(1, &[("b", 1), ("d", 2)]);
            assert_eq!(layout(&db), expected_layout);
            // "a" and "c" are new though not past the last key, "e" is past it.
            writes(2, &[("a", 1), ("b", 10), ("c", 1), ("d", 5), ("e", 7)]);
            let counts: Vec<(Vec<Value>, Value)> =
                db.scan("t", "counts").unwrap().into_iter().map(|(k, s)| (k, s.value().clone())).collect();
            let expected = [("a", 1), ("b", 11), ("c", 1), ("d", 7), ("e", 7)];
            assert_eq!(counts, expected.map(|(w, n)| (vec![Value::from(w)], Value::I64(n))), "{expected_layout}");
        }
    }

    #[test]
    fn in_place_counts_follow_tridents_rules_in_either_fixed_width_layout() {
        let kinds = [(StateKind::Transactional, "counts"), (StateKind::Opaque, "opaque counts")];
        for (kind, expected_layout) in kinds {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(dir.path()).unwrap();
            commit(&db, 1, &count_writes(kind, &[("a", 2)])).unwrap();
            assert_eq!(layout(&db), expected_layout, "{kind:?}");
            let txn = db.db.begin_write().unwrap();
            let combine = |table: &mut WriteTable<'_>, txid: u64, n: i64| {
                let partials = [(key("a"), Value::I64(n))].into_iter().collect();
                table
                    .combine_in_place(&[(txid, &Combines { kind, builtin: Builtin::Count, partials })], &mut Vec::new())
            };
            {
                let mut table = WriteTable::open(&txn, "state/t/counts", Layout::Records).unwrap();
                // The batch that wrote the value again: a transactional
                // state skips it, an opaque one recomputes from before it.
                assert_eq!(combine(&mut table, 1, 5).unwrap(), usize::from(kind == StateKind::Opaque));
                let err = combine(&mut table, 0, 1).unwrap_err();
                assert!(format!("{err:#}").contains("ahead of batch txid 0"), "{err:#}");
                combine(&mut table, 2, 3).unwrap();
                let stored = match &table {
                    WriteTable::Counts(t) => stored_count(t.get(key("a").as_slice()).unwrap().unwrap().value()),
                    WriteTable::OpaqueCounts(t) => stored_opaque(t.get(key("a").as_slice()).unwrap().unwrap().value()),
                    WriteTable::Records(t) => {
                        Stored::decode(t.get(key("a").as_slice()).unwrap().unwrap().value()).unwrap()
                    }
                };
                let expected = match kind {
                    StateKind::Opaque => Stored::Opaque { txid: 2, curr: Value::I64(8), prev: Some(Value::I64(5)) },
                    _ => tx(2, 5),
                };
                assert_eq!(stored, expected, "{kind:?}");
            }
        }
    }

    #[test]
    fn opaque_counts_with_integer_records_beside_them_are_stored_in_fixed_width_records() {
        let opaque =
            |txid, curr, prev: Option<i64>| Stored::Opaque { txid, curr: Value::I64(curr), prev: prev.map(Value::I64) };
        // A window's state: its partials, beside records of integers (its
        // watermark) or of anything else.
        let writes = |record: Stored| {
            let mut writes = count_writes(StateKind::Opaque, &[("a", 2), ("b", 1)]);
            writes[0].records.push((key("0-watermark"), record));
            writes
        };
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        commit(&db, 1, &writes(opaque(1, 900, None))).unwrap();
        assert_eq!(layout(&db), "opaque counts");
        commit(&db, 2, &count_writes(StateKind::Opaque, &[("a", 3)])).unwrap();
        assert_eq!(db.get("t", "counts", &[Value::from("a")]).unwrap(), Some(opaque(2, 5, Some(2))));
        assert_eq!(db.get("t", "counts", &[Value::from("b")]).unwrap(), Some(opaque(1, 1, None)));
        let txn = db.begin_read().unwrap();
        let entries = ReadTable::open(&txn, "state/t/counts").unwrap().unwrap().entries().unwrap();
        assert_eq!(entries[0], (key("0-watermark"), opaque(1, 900, None)));
        drop(txn);
        // What the layout cannot hold is refused with the reason, and
        // nothing of the batch is stored.
        let err = commit(&db, 3, &writes(Stored::Opaque { txid: 3, curr: Value::from("x"), prev: None })).unwrap_err();
        assert!(format!("{err:#}").contains("holds opaque counts"), "{err:#}");
        assert_eq!(db.get("t", "counts", &[Value::from("a")]).unwrap(), Some(opaque(2, 5, Some(2))));

        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        commit(&db, 1, &writes(Stored::Opaque { txid: 1, curr: Value::from("x"), prev: None })).unwrap();
        assert_eq!(layout(&db), "records", "a record no count holds");
        commit(&db, 2, &writes(opaque(2, 7, Some(1)))).unwrap();
        assert_eq!(db.get("t", "counts", &[Value::from("a")]).unwrap(), Some(opaque(2, 4, Some(2))));
    }

    #[test]
    fn a_count_state_first_stored_as_records_stays_records() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let records = StateWrites {
            state: "counts".into(),
            records: vec![(key("a"), tx(1, 4))],
            removed: Vec::new(),
            removed_ranges: Vec::new(),
            combines: None,
        };
        commit(&db, 1, &[records]).unwrap();
        assert_eq!(layout(&db), "records");
        commit(&db, 2, &count_writes(StateKind::Transactional, &[("a", 1)])).unwrap();
        assert_eq!(layout(&db), "records");
        assert_eq!(db.get("t", "counts", &[Value::from("a")]).unwrap(), Some(tx(2, 5)));
    }

    #[test]
    fn a_group_combined_at_once_stores_what_its_batches_would_one_by_one() {
        let kinds = [StateKind::Transactional, StateKind::Opaque, StateKind::NonTransactional];
        // Groups small (the batches' runs merged) and large (counts summed),
        // of words drawn with a fixed seed, some in most batches.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut draw = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let words: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
        let mut group_of = |batches: usize| -> Vec<Vec<(&str, i64)>> {
            (0..batches)
                .map(|_| {
                    let mut batch = Vec::new();
                    for word in &words {
                        if draw(3) > 0 {
                            batch.push((word.as_str(), 1 + draw(4) as i64));
                        }
                    }
                    batch.sort_by_key(|(w, _)| key(w));
                    batch
                })
                .collect()
        };
        let (small, large) = (group_of(4), group_of(24));
        // (the group's first txid, the txid that stored a value before it):
        // before the group; the group's first (a batch replayed after a
        // crash between a state's write and its progress); a later one.
        let cases = [(10, 7), (1, 1), (5, 9)];
        for (batches, (first, written)) in [&small, &large].into_iter().flat_map(|g| cases.map(|c| (g, c))) {
            for kind in kinds {
                let stored_after = |grouped: bool| {
                    let dir = tempfile::tempdir().unwrap();
                    let db = Db::open(dir.path()).unwrap();
                    let before = count_writes(kind, &[("w1", 2), ("w3", 7)]).remove(0).combines.unwrap();
                    let txn = db.db.begin_write().unwrap();
                    let layout = Layout::for_combines(&before);
                    let mut table = WriteTable::open(&txn, "state/t/counts", layout).unwrap();
                    table.combine_in_place(&[(written, &before)], &mut Vec::new()).unwrap();
                    drop(table);
                    txn.commit().unwrap();
                    let txn = db.db.begin_write().unwrap();
                    let combines: Vec<Combines> = batches
                        .iter()
                        .map(|partials| Combines {
                            kind,
                            builtin: Builtin::Count,
                            partials: partials.iter().map(|(word, n)| (key(word), Value::I64(*n))).collect(),
                        })
                        .collect();
                    let group: Vec<BatchPartials<'_>> = (first..).zip(&combines).collect();
                    let mut table = WriteTable::open(&txn, "state/t/counts", Layout::Records).unwrap();
                    let written = if grouped {
                        table.combine_in_place(&group, &mut Vec::new())
                    } else {
                        group.iter().map(|batch| table.combine_in_place(&[*batch], &mut Vec::new())).sum()
                    };
                    drop(table);
                    txn.commit().unwrap();
                    written.map(|written| (written, db.scan("t", "counts").unwrap()))
                };
                let (grouped, one_by_one) = (stored_after(true), stored_after(false));
                let case = format!("{kind:?}, {} batches from txid {first}, stored by {written}", batches.len());
                if written > first && kind != StateKind::NonTransactional {
                    // A value written after a batch of the group is refused.
                    let err = grouped.unwrap_err();
                    assert!(format!("{err:#}").contains("is ahead of batch txid"), "{case}: {err:#}");
                    assert!(one_by_one.is_err(), "{case}");
                    continue;
                }
                let (grouped, one_by_one) = (grouped.unwrap(), one_by_one.unwrap());
                assert_eq!(grouped.1, one_by_one.1, "{case}");
                let keys: std::collections::BTreeSet<&str> = batches.iter().flatten().map(|(w, _)| *w).collect();
                assert_eq!(grouped.1.len(), keys.union(&["w1", "w3"].into()).count(), "{case}");
                // Each key is written once for the group, but for the stored
                // ones a replayed batch leaves as they are.
                assert!(grouped.0 <= keys.len() && grouped.0 + 2 >= keys.len(), "{case}: {} written", grouped.0);
            }
        }
        let a = Combines { kind: StateKind::Opaque, builtin: Builtin::Count, partials: Default::default() };
        let b = Combines { kind: StateKind::Transactional, builtin: Builtin::Count, partials: Default::default() };
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let txn = db.db.begin_write().unwrap();
        let mut table = WriteTable::open(&txn, "state/t/counts", Layout::Records).unwrap();
        let err = table.combine_in_place(&[(1, &a), (2, &b)], &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("batch 2 combines the state unlike the batch before it"), "{err:#}");
    }
}
