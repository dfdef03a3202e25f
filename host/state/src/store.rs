//! The seam between the coordinator and where things are kept: a commit
//! log (where each topology stands, and the batches recorded before they
//! are processed) and a state store (snapshots to read, the commit of a
//! batch). [`Db`](super::Db), over redb, is the one that runs; the
//! in-memory [`MemoryStore`](super::memory::MemoryStore) keeps the same
//! under the same rules ([`rules`](super::rules)), for unit tests.
//!
//! A batch commits its state writes, its progress and whatever records
//! other rooms keep per batch (a sink's outbox) at once: the commit log
//! and the state store are separate traits, the commit spans both. Several
//! batches ready together commit as a group, in one durable write, so that
//! they share its cost (its flush).
//!
//! Every method fails with a [`StoreError`], which says whether replaying
//! the batch may cure it ([`StoreError::is_retryable`]).

use super::DecodeError;
use super::StoreError;
use super::rules::Stored;
use super::writes::StateWrites;

/// What takes a state's records one at a time, in key order.
pub type EachRecord<'a> = dyn FnMut(&[u8], Stored) -> Result<(), StoreError> + 'a;

/// What the host recorded about a batch before processing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRecord {
    /// The attempt being processed.
    pub attempt: u32,
    /// When the batch was emitted, in milliseconds since the Unix epoch: the
    /// time its processing-time windows go by, the same on a replay.
    pub time_ms: u64,
    /// The spout's metadata for the batch (opaque to the store).
    pub spout: Vec<u8>,
}

impl BatchRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.attempt.to_le_bytes().to_vec();
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.extend_from_slice(&self.spout);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<BatchRecord, DecodeError> {
        let truncated = || DecodeError::new("truncated batch record");
        let (attempt, rest) = bytes.split_first_chunk::<4>().ok_or_else(truncated)?;
        let (time_ms, spout) = rest.split_first_chunk::<8>().ok_or_else(truncated)?;
        let (attempt, time_ms) = (u32::from_le_bytes(*attempt), u64::from_le_bytes(*time_ms));
        Ok(BatchRecord { attempt, time_ms, spout: spout.to_vec() })
    }
}

/// Where a topology stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Last committed txid; 0 before the first commit.
    pub last_committed: u64,
    /// Recorded batches from the last committed one on, in txid order.
    pub batches: Vec<(u64, BatchRecord)>,
}

/// Where each topology stands.
pub trait CommitLog {
    /// The topology's last committed txid and the batches recorded since.
    fn progress(&self, topology: &str) -> Result<Progress, StoreError>;

    /// Records a batch's attempt and spout metadata before it is
    /// processed; made durable by the batch's commit.
    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError>;
}

/// One state's committed records in a snapshot.
pub trait StateReader: Send {
    /// The record of `key` (encoded, see [`keys`](super::keys)).
    fn get(&self, key: &[u8]) -> Result<Option<Stored>, StoreError>;

    /// The keys from `from` up to (not including) `to`, with their
    /// records, sorted by key.
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>, StoreError>;

    /// [`StateReader::range`], each key and record handed to `each` in key
    /// order: a reader that can reads them one at a time rather than the
    /// whole range at once.
    fn each_in(&self, from: &[u8], to: &[u8], each: &mut EachRecord<'_>) -> Result<(), StoreError> {
        for (key, stored) in self.range(from, to)? {
            each(&key, stored)?;
        }
        Ok(())
    }
}

/// What is committed, as of one moment, for a batch's or a query's reads.
pub trait Snapshot {
    /// State `state` of `topology`; `None` when nothing was committed to it.
    fn state(&self, topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>, StoreError>;

    /// The records of table `table` of `topology` that other rooms commit
    /// with batches (see [`BatchCommit::others`]), sorted by key.
    fn others(&self, topology: &str, table: &str) -> Result<OtherEntries, StoreError>;
}

/// Keys and values of records another room keeps, as bytes, sorted by key.
pub type OtherEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// Records another room keeps per batch, committed with it: the store
/// knows only their table's name, their keys and their bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherRecords {
    /// The table they go in (one namespace per topology).
    pub table: String,
    /// Key and value of each, inserted over what the table holds.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Everything batch `txid` of `topology` commits, at once.
pub struct BatchCommit<'a> {
    /// The topology, by the name its progress is kept under.
    pub topology: &'a str,
    /// The batch; it must follow the last committed one.
    pub txid: u64,
    /// The batch's record, kept as the last committed batch's.
    pub record: &'a BatchRecord,
    /// What the batch wrote to each state, applied under Trident's rules.
    pub writes: &'a [StateWrites],
    /// Records of other rooms, committed with the batch.
    pub others: &'a [OtherRecords],
}

/// Told, by [`Store::commit_group_telling`], a state, an encoded key and
/// its record as a commit leaves it.
pub type Written<'a> = dyn FnMut(&str, &[u8], Option<&Stored>) + 'a;

/// A commit log and a state store that commit batches.
pub trait Store: CommitLog + Sync {
    /// A snapshot of everything committed.
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, StoreError>;

    /// Commits `batch` durably, or nothing of it: its state writes, its
    /// progress and its other records. Returns the number of keys written.
    /// A batch out of txid order is refused with
    /// [`StateError::NotNext`](super::StateError::NotNext).
    fn commit_batch(&self, batch: &BatchCommit<'_>) -> Result<usize, StoreError> {
        self.commit_group(std::slice::from_ref(batch))
    }

    /// Commits `group`, batches of consecutive txids of one topology, in
    /// one durable write, all or none: each batch's state writes applied
    /// in txid order under Trident's rules (each value keeps the txid of
    /// the batch that wrote it last), each batch's other records, and the
    /// last batch's progress. Returns the number of keys written, for the
    /// log (a key several batches combine in place counts once). A group
    /// that does not follow the last committed txid, or whose txids are
    /// not consecutive, is refused with
    /// [`StateError::NotNext`](super::StateError::NotNext).
    fn commit_group(&self, group: &[BatchCommit<'_>]) -> Result<usize, StoreError>;

    /// [`Store::commit_group`], telling `written` each key the group wrote
    /// or removed (by key; not those a range removed) with its record as
    /// the commit leaves it (`None`: removed), so that a
    /// caller passing the records on need not read them back. Told before
    /// the commit is durable: what it was told holds only once this
    /// returns `Ok`. A store that cannot tell as it writes reads them back.
    fn commit_group_telling(&self, group: &[BatchCommit<'_>], written: &mut Written<'_>) -> Result<usize, StoreError> {
        let count = self.commit_group(group)?;
        let snapshot = self.snapshot()?;
        let topology = group.first().map_or("", |b| b.topology);
        for writes in group.iter().flat_map(|b| b.writes) {
            let Some(reader) = snapshot.state(topology, &writes.state)? else { continue };
            let records = writes.records.iter().map(|(key, _)| key.as_slice());
            let partials = writes.combines.iter().flat_map(|c| c.partials.iter().map(|(key, _)| key));
            for key in records.chain(writes.removed.iter().map(Vec::as_slice)).chain(partials) {
                written(&writes.state, key, reader.get(key)?.as_ref());
            }
        }
        Ok(count)
    }

    /// Removes the records `keys` of table `table` of `topology` that
    /// batches committed (a sink's published outbox entries), durably, all
    /// or none; keys it does not hold are passed over.
    fn remove_others(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError>;

    /// [`Store::remove_others`], made durable by the next durable write
    /// (the next commit, or [`Store::remove_others`]) rather than by a
    /// flush of its own: a crash before it leaves the records in place.
    fn remove_others_lazily(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        self.remove_others(topology, table, keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use crate::view::Base;
    use crate::writes::Combines;
    use crate::{Db, StateError};
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;
    use weir_sdk::codec::Value;
    use weir_sdk::operator::Builtin;
    use weir_sdk::topology::StateKind;

    /// Runs `test` over each store: redb and memory.
    fn each_store(test: impl Fn(&dyn Store)) {
        test(&MemoryStore::new());
        let dir = tempfile::tempdir().unwrap();
        test(&Db::open(dir.path()).unwrap());
    }

    use crate::tests::{counts_of as counts, key};

    fn commit(
        store: &dyn Store,
        txid: u64,
        writes: &[StateWrites],
        others: &[OtherRecords],
    ) -> Result<usize, StoreError> {
        let record = BatchRecord { attempt: 0, time_ms: 0, spout: txid.to_le_bytes().to_vec() };
        store.commit_batch(&BatchCommit { topology: "t", txid, record: &record, writes, others })
    }

    fn stored(store: &dyn Store, word: &str) -> Option<Stored> {
        store.snapshot().unwrap().state("t", "counts").unwrap()?.get(&key(word)).unwrap()
    }

    fn outbox(entries: &[(&str, &str)]) -> OtherRecords {
        let entries = entries.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
        OtherRecords { table: "outbox".into(), entries }
    }

    #[test]
    fn other_records_commit_with_their_batch_and_not_without_it() {
        each_store(|store| {
            commit(store, 1, &counts(StateKind::Transactional, &["a"]), &[outbox(&[("1", "a=1")])]).unwrap();
            // Out of order: refused, and nothing of it is kept.
            let err = commit(store, 3, &[], &[outbox(&[("3", "lost")])]).unwrap_err();
            assert!(matches!(err.root(), StoreError::State(StateError::NotNext { txid: 3, last: 1 })), "{err:#}");
            // A commit whose state writes fail keeps none of its records.
            let err = commit(store, 2, &counts(StateKind::Opaque, &["a"]), &[outbox(&[("2", "lost")])]).unwrap_err();
            assert!(matches!(err.root(), StoreError::State(StateError::KindChanged { .. })), "{err:#}");
            assert_eq!(store.progress("t").unwrap().last_committed, 1);
            commit(store, 2, &counts(StateKind::Transactional, &["a"]), &[outbox(&[("2", "a=2")])]).unwrap();
            let snapshot = store.snapshot().unwrap();
            let kept: Vec<(Vec<u8>, Vec<u8>)> = [("1", "a=1"), ("2", "a=2")]
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect();
            assert_eq!(snapshot.others("t", "outbox").unwrap(), kept);
            assert!(snapshot.others("t", "elsewhere").unwrap().is_empty());
            // Removed records leave the others and the state as they were.
            store.remove_others("t", "outbox", &[b"1".to_vec(), b"9".to_vec()]).unwrap();
            store.remove_others("t", "elsewhere", &[b"1".to_vec()]).unwrap();
            let left = store.snapshot().unwrap().others("t", "outbox").unwrap();
            assert_eq!(left, [(b"2".to_vec(), b"a=2".to_vec())]);
            assert_eq!(stored(store, "a"), Some(Stored::Transactional { txid: 2, value: Value::I64(2) }));
        });
    }

    /// Batch `txid` of topology `t`, its record `records[txid]`.
    fn batch<'a>(
        txid: u64,
        records: &'a [BatchRecord],
        writes: &'a [StateWrites],
        others: &'a [OtherRecords],
    ) -> BatchCommit<'a> {
        BatchCommit { topology: "t", txid, record: &records[txid as usize], writes, others }
    }

    #[test]
    fn a_group_commits_its_batches_in_txid_order_all_at_once_or_none() {
        each_store(|store| {
            let records = batch_records(6);
            let transactional = |words: &[&str]| counts(StateKind::Transactional, words);
            let writes = [transactional(&["a", "b"]), transactional(&["a"]), transactional(&["a", "c"])];
            let others = [outbox(&[("1", "x")]), outbox(&[("2", "y")]), outbox(&[("3", "z")])];
            let group: Vec<BatchCommit<'_>> = (1..=3)
                .map(|txid| {
                    let at = txid as usize - 1;
                    batch(txid, &records, &writes[at], std::slice::from_ref(&others[at]))
                })
                .collect();
            assert_eq!(store.commit_group(&group).unwrap(), 3);
            // Each value carries the txid of the batch that wrote it last.
            assert_eq!(stored(store, "a"), Some(Stored::Transactional { txid: 3, value: Value::I64(3) }));
            assert_eq!(stored(store, "b"), Some(Stored::Transactional { txid: 1, value: Value::I64(1) }));
            assert_eq!(stored(store, "c"), Some(Stored::Transactional { txid: 3, value: Value::I64(1) }));
            let progress = store.progress("t").unwrap();
            assert_eq!((progress.last_committed, progress.batches), (3, vec![(3, records[3].clone())]));
            let kept = |store: &dyn Store| store.snapshot().unwrap().others("t", "outbox").unwrap().len();
            assert_eq!(kept(store), 3);
            // A gap in the group's txids is refused, and nothing of it kept.
            let lost = [outbox(&[("4", "lost")])];
            let gap = [batch(4, &records, &[], &lost), batch(6, &records, &[], &[])];
            let err = store.commit_group(&gap).unwrap_err();
            assert!(matches!(err.root(), StoreError::State(StateError::NotNext { txid: 6, last: 4 })), "{err:#}");
            // So is a group whose last batch fails: its first is not kept.
            let opaque = counts(StateKind::Opaque, &["a"]);
            let failing = [batch(4, &records, &writes[1], &lost), batch(5, &records, &opaque, &[])];
            let err = store.commit_group(&failing).unwrap_err();
            assert!(matches!(err.root(), StoreError::State(StateError::KindChanged { .. })), "{err:#}");
            assert_eq!(store.progress("t").unwrap().last_committed, 3);
            assert_eq!(stored(store, "a"), Some(Stored::Transactional { txid: 3, value: Value::I64(3) }));
            assert_eq!(kept(store), 3);
            assert_eq!(store.commit_group(&[]).unwrap(), 0);
        });
    }

    #[test]
    fn a_group_writing_a_state_both_ways_keeps_its_batches_order() {
        each_store(|store| {
            let records = batch_records(4);
            let tx = |txid, n| Stored::Transactional { txid, value: Value::I64(n) };
            let set = |pairs: &[(&str, Stored)]| {
                let records = pairs.iter().map(|(w, stored)| (key(w), stored.clone())).collect();
                vec![StateWrites {
                    state: "counts".into(),
                    records,
                    removed: Vec::new(),
                    removed_ranges: Vec::new(),
                    combines: None,
                }]
            };
            let writes = [
                set(&[("a", tx(1, 10)), ("b", tx(1, 1))]),
                set(&[("a", tx(2, 20))]),
                counts(StateKind::Transactional, &["a", "b"]),
                set(&[("b", tx(4, 7))]),
            ];
            let group: Vec<BatchCommit<'_>> =
                (1..=4).map(|txid| batch(txid, &records, &writes[txid as usize - 1], &[])).collect();
            // a and b set, both counted on, then b set again.
            store.commit_group(&group).unwrap();
            assert_eq!(stored(store, "a"), Some(tx(3, 21)));
            assert_eq!(stored(store, "b"), Some(tx(4, 7)));
        });
    }

    #[test]
    fn a_commit_tells_each_key_it_wrote_as_the_commit_left_it() {
        each_store(|store| {
            let records = batch_records(4);
            let tx = |txid, n| Stored::Transactional { txid, value: Value::I64(n) };
            // A state of each layout: counts, opaque counts, and sums (records).
            let combines = |state: &str, kind, builtin, words: &[(&str, i64)]| StateWrites {
                state: state.into(),
                records: Vec::new(),
                removed: Vec::new(),
                removed_ranges: Vec::new(),
                combines: Some(Combines {
                    kind,
                    builtin,
                    partials: words.iter().map(|(w, n)| (key(w), Value::I64(*n))).collect(),
                }),
            };
            let counts = |words: &[(&str, i64)]| combines("counts", StateKind::Transactional, Builtin::Count, words);
            let opaque = |words: &[(&str, i64)]| combines("opaque", StateKind::Opaque, Builtin::Count, words);
            let sums = |words: &[(&str, i64)]| combines("sums", StateKind::Transactional, Builtin::Sum, words);
            let first = [counts(&[("a", 1), ("b", 1)]), opaque(&[("a", 2)]), sums(&[("a", 5)])];
            commit(store, 1, &first, &[]).unwrap();
            let set_x_remove_b = StateWrites {
                state: "counts".into(),
                records: vec![(key("x"), tx(2, 5))],
                removed: vec![key("b")],
                removed_ranges: Vec::new(),
                combines: None,
            };
            let writes = [
                vec![set_x_remove_b],
                vec![counts(&[("a", 1), ("x", 1)]), opaque(&[("a", 3), ("c", 1)])],
                vec![counts(&[("a", 1)]), sums(&[("a", 2), ("d", 7)])],
            ];
            let group: Vec<BatchCommit<'_>> =
                (2..=4).map(|txid| batch_of(txid, &records, &writes[txid as usize - 2])).collect();
            let mut told: BTreeMap<(String, Vec<u8>), Option<Stored>> = BTreeMap::new();
            store
                .commit_group_telling(&group, &mut |state, key, stored| {
                    told.insert((state.to_owned(), key.to_vec()), stored.cloned());
                })
                .unwrap();
            let expected: BTreeMap<(String, Vec<u8>), Option<Stored>> = [
                ("counts", "a", Some(tx(4, 3))),
                ("counts", "b", None),
                ("counts", "x", Some(tx(3, 6))),
                ("opaque", "a", Some(Stored::Opaque { txid: 3, curr: Value::I64(5), prev: Some(Value::I64(2)) })),
                ("opaque", "c", Some(Stored::Opaque { txid: 3, curr: Value::I64(1), prev: None })),
                ("sums", "a", Some(tx(4, 7))),
                ("sums", "d", Some(tx(4, 7))),
            ]
            .into_iter()
            .map(|(state, word, stored)| ((state.to_owned(), key(word)), stored))
            .collect();
            assert_eq!(told, expected);
            // As the store holds them.
            let snapshot = store.snapshot().unwrap();
            for ((state, key), stored) in &told {
                let reader = snapshot.state("t", state).unwrap().unwrap();
                assert_eq!(&reader.get(key).unwrap(), stored, "{state} {key:?}");
            }
        });
    }

    #[test]
    fn a_batch_reads_ranges_and_removes_keys_over_its_groups_earlier_batches() {
        each_store(|store| {
            let records = batch_records(3);
            let (mut caches, _) = commit_first_batch(store, &[("a", 1), ("b", 2), ("c", 3), ("x", 9)], &|_| {});
            let second = Arc::new(run_batch(store, 2, Vec::new(), &mut caches, &|views| {
                views.remove("counts", &key("b")).unwrap();
                views.put("counts", key("d"), Value::I64(4)).unwrap();
                assert_eq!(range(views, "a", "x"), [(key("a"), count(1)), (key("c"), count(3)), (key("d"), count(4))]);
            }));
            // Batch 3 runs before batch 2 commits: it reads through it.
            let third = run_batch(store, 3, vec![(2, Arc::clone(&second))], &mut caches, &|views| {
                assert_eq!(range(views, "a", "x"), [(key("a"), count(1)), (key("c"), count(3)), (key("d"), count(4))]);
                assert_eq!(views.base("counts", &key("b")).unwrap(), Base::None, "removed by the batch before");
                views.remove("counts", &key("c")).unwrap();
                views.put("counts", key("b"), Value::I64(5)).unwrap();
                assert_eq!(range(views, "b", "d"), [(key("b"), count(5))], "to is not included");
            });
            let group = [batch_of(2, &records, &second), batch_of(3, &records, &third)];
            store.commit_group(&group).unwrap();
            let snapshot = store.snapshot().unwrap();
            let reader = snapshot.state("t", "counts").unwrap().unwrap();
            let kept: Vec<Vec<u8>> = reader.range(&key("a"), &key("z")).unwrap().into_iter().map(|(k, _)| k).collect();
            assert_eq!(kept, [key("a"), key("b"), key("d"), key("x")]);
            assert_eq!(stored(store, "c"), None);
        });
    }

    #[test]
    fn a_batch_reads_through_the_partials_its_groups_earlier_batches_left_to_the_commit() {
        each_store(|store| {
            let records = batch_records(3);
            // Once committed, the written records are what the caches hold.
            let committed = |caches: &mut HashMap<_, _>, writes: Vec<StateWrites>| {
                crate::view::refresh_caches(caches, writes);
            };
            let (mut caches, first) = commit_first_batch(store, &[("a", 1)], &|views| {
                assert_eq!(views.base("counts", &key("a")).unwrap(), count(1), "read into the cache");
            });
            committed(&mut caches, first);
            // Batch 2 leaves its partials to the commit, beside a record:
            // a, cached from batch 1, is read again through them.
            let second = Arc::new(run_batch(store, 2, Vec::new(), &mut caches, &|views| {
                views.put("counts", key("w"), Value::I64(7)).unwrap();
                views.combine_at_commit("counts", Builtin::Count, counts_of(&[("a", 2), ("b", 5)])).unwrap();
                let err = views.base("counts", &key("a")).unwrap_err();
                assert!(format!("{err:#}").contains("left to the commit"), "{err:#}");
                let err = views.range("counts", &key("a"), &key("c")).unwrap_err();
                assert!(format!("{err:#}").contains("left to the commit"), "{err:#}");
                let twice = views.combine_at_commit("counts", Builtin::Count, counts_of(&[("c", 1)]));
                assert!(twice.is_err(), "one set of partials a batch");
            }));
            // Batch 3 runs before batch 2 commits: it reads the combined values.
            let third = run_batch(store, 3, vec![(2, Arc::clone(&second))], &mut caches, &|views| {
                assert_eq!(views.base("counts", &key("a")).unwrap(), count(3));
                assert_eq!(views.base("counts", &key("b")).unwrap(), count(5));
                let all = views.range("counts", &key("a"), &key("z")).unwrap();
                assert_eq!(all, [(key("a"), count(3)), (key("b"), count(5)), (key("w"), count(7))]);
                let taken = views.take_range("counts", &key("a"), &key("c")).unwrap();
                assert_eq!(taken, [(key("a"), count(3)), (key("b"), count(5))]);
                assert_eq!(views.range("counts", &key("a"), &key("z")).unwrap(), [(key("w"), count(7))]);
                views.combine_at_commit("counts", Builtin::Count, counts_of(&[("c", 1), ("w", 1)])).unwrap();
            });
            store.commit_group(&[batch_of(2, &records, &second), batch_of(3, &records, &third)]).unwrap();
            committed(&mut caches, Arc::try_unwrap(second).ok().unwrap());
            committed(&mut caches, third);
            assert_eq!(stored(store, "a"), None);
            assert_eq!(stored(store, "b"), None);
            assert_eq!(stored(store, "c"), Some(opaque(3, 1, None)));
            assert_eq!(stored(store, "w"), Some(opaque(3, 8, Some(7))));
            let fourth = run_batch(store, 4, Vec::new(), &mut caches, &|views| {
                assert_eq!(views.base("counts", &key("a")).unwrap(), Base::None);
                assert_eq!(views.base("counts", &key("w")).unwrap(), count(8));
            });
            assert!(fourth.is_empty());
        });
    }

    #[test]
    fn a_taken_range_is_removed_whole_before_the_batchs_writes_and_later_batches_read_past_it() {
        each_store(|store| {
            let records = batch_records(3);
            let (mut caches, first) = commit_first_batch(store, &[("a", 1), ("b", 2), ("c", 3), ("d", 4)], &|views| {
                assert_eq!(views.base("counts", &key("b")).unwrap(), count(2));
            });
            crate::view::refresh_caches(&mut caches, first);
            // Batch 2 takes b and c (b cached), then writes c and bb anew.
            let second = Arc::new(run_batch(store, 2, Vec::new(), &mut caches, &|views| {
                assert_eq!(
                    views.take_range("counts", &key("b"), &key("d")).unwrap(),
                    [(key("b"), count(2)), (key("c"), count(3))]
                );
                assert_eq!(views.base("counts", &key("b")).unwrap(), Base::None, "taken, not read from the cache");
                views.put("counts", key("c"), Value::I64(9)).unwrap();
                views.put("counts", key("bb"), Value::I64(6)).unwrap();
                assert_eq!(
                    range(views, "a", "z"),
                    [(key("a"), count(1)), (key("bb"), count(6)), (key("c"), count(9)), (key("d"), count(4))]
                );
                let into_removed = views.combine_at_commit("counts", Builtin::Count, counts_of(&[("b", 1)]));
                assert!(into_removed.is_err(), "a partial for a removed key");
            }));
            assert_eq!(second[0].removed_ranges, [(key("b"), key("d"))]);
            // Batch 3 runs before batch 2 commits: it reads past the range.
            let third = run_batch(store, 3, vec![(2, Arc::clone(&second))], &mut caches, &|views| {
                assert_eq!(views.base("counts", &key("b")).unwrap(), Base::None);
                assert_eq!(views.base("counts", &key("c")).unwrap(), count(9));
                assert_eq!(
                    range(views, "a", "z"),
                    [(key("a"), count(1)), (key("bb"), count(6)), (key("c"), count(9)), (key("d"), count(4))]
                );
                views.combine_at_commit("counts", Builtin::Count, counts_of(&[("a", 1), ("b", 1)])).unwrap();
            });
            store.commit_group(&[batch_of(2, &records, &second), batch_of(3, &records, &third)]).unwrap();
            assert_eq!(stored(store, "a"), Some(opaque(3, 2, Some(1))));
            assert_eq!(stored(store, "b"), Some(opaque(3, 1, None)), "removed by batch 2, counted afresh by batch 3");
            assert_eq!(stored(store, "bb"), Some(opaque(2, 6, None)));
            assert_eq!(stored(store, "c"), Some(opaque(2, 9, None)), "written after the range was removed");
            assert_eq!(stored(store, "d"), Some(opaque(1, 4, None)));
        });
    }

    #[test]
    fn a_group_combines_partials_once_a_key_and_keeps_them_in_order_with_its_records() {
        each_store(|store| {
            let records = batch_records(6);
            // Batch 2 removes a key batch 1 combined; batch 3 combines
            // keys both combined; batch 5 combines a key batch 4 wrote;
            // batch 6 removes a range of keys batches 1 and 3 combined.
            let batches = [
                writes(&[("w", opaque(1, 7, None))], &[], &[], &[("a", 1), ("b", 1), ("bb", 1)]),
                writes(&[], &["a"], &[], &[("c", 1)]),
                writes(&[("x", opaque(3, 1, None))], &[], &[], &[("b", 1), ("c", 1)]),
                writes(&[("d", opaque(4, 5, None))], &[], &[], &[("e", 1)]),
                writes(&[], &[], &[], &[("d", 1), ("e", 1)]),
                writes(&[], &[], &[("b", "bz")], &[("e", 1)]),
            ];
            let group: Vec<BatchCommit<'_>> =
                (1..=6).map(|txid| batch_of(txid, &records, &batches[txid as usize - 1])).collect();
            store.commit_group(&group).unwrap();
            assert_eq!(stored(store, "a"), None, "combined, then removed");
            assert_eq!(stored(store, "b"), None, "combined, then removed with its range");
            assert_eq!(stored(store, "bb"), None);
            assert_eq!(stored(store, "c"), Some(opaque(3, 2, Some(1))));
            assert_eq!(stored(store, "d"), Some(opaque(5, 6, Some(5))), "written, then combined");
            assert_eq!(stored(store, "e"), Some(opaque(6, 3, Some(2))));
            assert_eq!(stored(store, "w"), Some(opaque(1, 7, None)));
            assert_eq!(stored(store, "x"), Some(opaque(3, 1, None)));
        });
    }

    #[test]
    fn a_group_s_pending_writes_are_read_one_key_at_a_time_as_the_whole_range_reads_them() {
        each_store(|store| {
            let committed: Vec<(&str, Stored)> =
                ["a", "b", "bb", "c", "d", "f"].iter().map(|w| (*w, opaque(1, 1, None))).collect();
            let first = writes(&committed, &[], &[], &[]);
            commit(store, 1, &first, &[]).unwrap();
            // Batch 2 removes b to c, writes e, removes d and combines a,
            // c and g; batch 3 writes b again and combines a and h.
            let layers = vec![
                (
                    2,
                    Arc::new(writes(
                        &[("e", opaque(2, 5, None))],
                        &["d"],
                        &[("b", "c")],
                        &[("a", 1), ("c", 2), ("g", 3)],
                    )),
                ),
                (3, Arc::new(writes(&[("b", opaque(3, 7, None))], &[], &[], &[("a", 1), ("h", 1)]))),
            ];
            let snapshot = store.snapshot().unwrap();
            let pending = crate::pending::Pending::new(&*snapshot, "t", layers);
            let reader = pending.state("t", "counts").unwrap().unwrap();
            for (from, to) in [("a", "z"), ("b", "d"), ("bb", "g"), ("h", "i"), ("x", "z")] {
                let mut each = Vec::new();
                reader
                    .each_in(&key(from), &key(to), &mut |k, stored| {
                        each.push((k.to_vec(), stored));
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(each, reader.range(&key(from), &key(to)).unwrap(), "from {from} to {to}");
            }
            let all: Vec<Vec<u8>> = reader.range(&key("a"), &key("z")).unwrap().into_iter().map(|(k, _)| k).collect();
            assert_eq!(all, ["a", "b", "c", "e", "f", "g", "h"].map(key));
        });
    }

    /// A batch's writes to the opaque state `counts`: `records`, the keys
    /// `removed`, the key `ranges` removed, and Count's `partials`.
    fn writes(
        records: &[(&str, Stored)],
        removed: &[&str],
        ranges: &[(&str, &str)],
        partials: &[(&str, i64)],
    ) -> Vec<StateWrites> {
        vec![StateWrites {
            state: "counts".into(),
            records: records.iter().map(|(w, s)| (key(w), s.clone())).collect(),
            removed: removed.iter().map(|w| key(w)).collect(),
            removed_ranges: ranges.iter().map(|(from, to)| (key(from), key(to))).collect(),
            combines: Some(Combines {
                kind: StateKind::Opaque,
                builtin: Builtin::Count,
                partials: counts_of(partials),
            }),
        }]
    }

    /// Count's partials for words.
    fn counts_of(pairs: &[(&str, i64)]) -> crate::keyed::KeyedValues {
        pairs.iter().map(|(w, n)| (key(w), Value::I64(*n))).collect()
    }

    /// An opaque record of a count: `curr` written by `txid`, over `prev`.
    fn opaque(txid: u64, curr: i64, prev: Option<i64>) -> Stored {
        Stored::Opaque { txid, curr: Value::I64(curr), prev: prev.map(Value::I64) }
    }

    /// A count as a batch reads it.
    fn count(n: i64) -> Base {
        Base::Value(Value::I64(n))
    }

    /// The keys of state `counts` from `from` up to `to`, as the batch sees them.
    fn range(views: &mut crate::view::Views, from: &str, to: &str) -> Vec<(Vec<u8>, crate::view::Base)> {
        views.range("counts", &key(from), &key(to)).unwrap()
    }

    /// The records of batches 0 to `last`, each its txid as its metadata.
    fn batch_records(last: u64) -> Vec<BatchRecord> {
        (0..=last).map(|txid| BatchRecord { attempt: 0, time_ms: 0, spout: txid.to_le_bytes().to_vec() }).collect()
    }

    /// Runs batch `txid` of topology `t`, whose one state `counts` is
    /// opaque, over what `store` holds and `layers`; returns its writes.
    fn run_batch(
        store: &dyn Store,
        txid: u64,
        layers: Vec<crate::pending::Layer>,
        caches: &mut std::collections::HashMap<String, crate::view::StateCache>,
        run: &dyn Fn(&mut crate::view::Views),
    ) -> Vec<StateWrites> {
        use weir_sdk::topology::StateDef;
        let def = StateDef { name: "counts".into(), kind: StateKind::Opaque, cache_size: None };
        let states = [("counts".to_owned(), def)].into();
        let limits = weir_config::StateLimits::default();
        let snapshot = store.snapshot().unwrap();
        let read = crate::pending::Pending::new(&*snapshot, "t", layers);
        let mut views = crate::view::Views::new(&read, "t", &states, caches, txid, true, &limits).unwrap();
        run(&mut views);
        views.finish(caches)
    }

    /// Batch 1 over fresh caches: puts `counts`, then runs `then`, and
    /// commits; returns the caches and the batch's writes.
    fn commit_first_batch(
        store: &dyn Store,
        counts: &[(&str, i64)],
        then: &dyn Fn(&mut crate::view::Views),
    ) -> (HashMap<String, crate::view::StateCache>, Vec<StateWrites>) {
        let mut caches = HashMap::new();
        let first = run_batch(store, 1, Vec::new(), &mut caches, &|views| {
            for &(word, v) in counts {
                views.put("counts", key(word), Value::I64(v)).unwrap();
            }
            then(views);
        });
        commit(store, 1, &first, &[]).unwrap();
        (caches, first)
    }

    fn batch_of<'a>(txid: u64, records: &'a [BatchRecord], writes: &'a [StateWrites]) -> BatchCommit<'a> {
        batch(txid, records, writes, &[])
    }

    #[test]
    fn both_stores_keep_the_commit_log_and_apply_tridents_rules_alike() {
        each_store(|store| {
            assert_eq!(store.progress("t").unwrap(), Progress::default());
            store
                .record_batch("t", 1, &BatchRecord { attempt: 2, time_ms: 1_764_000_000_123, spout: b"m".to_vec() })
                .unwrap();
            assert_eq!(
                store.progress("t").unwrap().batches,
                [(1, BatchRecord { attempt: 2, time_ms: 1_764_000_000_123, spout: b"m".to_vec() })]
            );
            assert_eq!(commit(store, 1, &counts(StateKind::Transactional, &["a", "b"]), &[]).unwrap(), 2);
            assert_eq!(stored(store, "a"), Some(Stored::Transactional { txid: 1, value: Value::I64(1) }));
            assert_eq!(commit(store, 2, &counts(StateKind::Transactional, &["a"]), &[]).unwrap(), 1);
            assert_eq!(stored(store, "a"), Some(Stored::Transactional { txid: 2, value: Value::I64(2) }));
            assert_eq!(stored(store, "b"), Some(Stored::Transactional { txid: 1, value: Value::I64(1) }));
            assert_eq!(stored(store, "c"), None);
            let progress = store.progress("t").unwrap();
            assert_eq!(progress.last_committed, 2);
            assert_eq!(
                progress.batches,
                [(2, BatchRecord { attempt: 0, time_ms: 0, spout: 2u64.to_le_bytes().to_vec() })]
            );
        });
    }
}
