use super::*;
use crate::writes::Combines;
use weir_sdk::operator::Builtin;
use weir_sdk::topology::TopologyDef;

/// The states a topology `t` counting lines into `counts` of `kind` declares.
fn plan(kind: StateKind) -> BTreeMap<String, StateDef> {
    let kind = serde_json::to_string(&kind).unwrap();
    let def: TopologyDef = serde_json::from_str(&format!(
        r#"{{"name":"t","nodes":[
            {{"id":"spout","op":{{"op":"spout","spout":{{"kind":"file-lines","field":"line"}}}}}},
            {{"id":"count","inputs":[0],"op":{{"op":"persistent-aggregate",
              "state":{{"name":"counts","kind":{kind}}},"group":["line"],
              "aggregator":{{"id":"count","kind":{{"kind":"builtin","name":"count"}},"input":[],"output":["count"]}}}}}}]}}"#
    ))
    .unwrap();
    def.states().into_iter().map(|s| (s.name.clone(), s.clone())).collect()
}

pub(crate) fn key(word: &str) -> Vec<u8> {
    keys::encode([weir_sdk::codec::ValueRef::Str(word)])
}

fn counts(kind: StateKind) -> Vec<StateWrites> {
    counts_of(kind, &["a"])
}

/// A count of one for each of `words`, in the order given.
pub(crate) fn counts_of(kind: StateKind, words: &[&str]) -> Vec<StateWrites> {
    let partials = words.iter().map(|w| (key(w), Value::I64(1))).collect();
    vec![StateWrites {
        state: "counts".into(),
        records: Vec::new(),
        removed: Vec::new(),
        removed_ranges: Vec::new(),
        combines: Some(Combines { kind, builtin: Builtin::Count, partials }),
    }]
}

fn record() -> BatchRecord {
    BatchRecord { attempt: 0, time_ms: 0, spout: Vec::new() }
}

fn kind_changed(stored: StateKind, declared: StateKind) -> StateError {
    StateError::KindChanged { topology: "t".into(), state: "counts".into(), stored, declared }
}

#[test]
fn a_state_is_paged_through_in_key_order_in_either_layout() {
    for kind in [StateKind::Transactional, StateKind::Opaque] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        // Written out of order.
        db.commit("t", 1, &record(), &counts_of(kind, &["b", "a0", "c", "a", "bb"])).unwrap();
        let mut seen = Vec::new();
        let mut after: Option<Vec<Value>> = None;
        loop {
            let page = db.page("t", "counts", after.as_deref(), 2).unwrap();
            assert!(page.len() <= 2);
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            seen.extend(page.into_iter().map(|(key, stored)| (key, stored.value().clone())));
        }
        let want: Vec<(Vec<Value>, Value)> =
            ["a", "a0", "b", "bb", "c"].iter().map(|w| (vec![Value::Str(w.to_string())], Value::I64(1))).collect();
        assert_eq!(seen, want, "{kind:?}");
        // After a key that is not stored: from the next one that is.
        let page = db.page("t", "counts", Some(&[Value::Str("ab".into())]), 10).unwrap();
        assert_eq!(page.first().map(|(k, _)| k.clone()), Some(vec![Value::Str("b".into())]));
    }
}

#[test]
fn a_page_ends_before_the_key_that_would_take_it_past_its_bytes_but_never_before_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    // Counts under keys of 1, 100 and 1,000 bytes.
    let words: Vec<String> = [1, 100, 1000].iter().map(|n| "k".repeat(*n)).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    db.commit("t", 1, &record(), &counts_of(StateKind::Transactional, &words)).unwrap();
    let page = |max_bytes| {
        let (entries, cut) = db.page_within("t", "counts", None, 10, max_bytes).unwrap();
        (entries.len(), cut)
    };
    assert_eq!(page(usize::MAX), (3, false));
    assert_eq!(page(500), (2, true));
    assert_eq!(page(1), (1, true), "the first key is always given");
    assert!(!db.page_within("t", "counts", None, 2, 500).unwrap().1, "the limit, not the bytes, ended it");
}

#[test]
fn a_state_keeps_the_kind_of_its_first_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.check_state_kinds("t", &plan(StateKind::Opaque)).unwrap();
    db.commit("t", 1, &record(), &counts(StateKind::Transactional)).unwrap();
    db.check_state_kinds("t", &plan(StateKind::Transactional)).unwrap();
    for other in [StateKind::Opaque, StateKind::NonTransactional] {
        let err = db.check_state_kinds("t", &plan(other)).unwrap_err();
        let changed = kind_changed(StateKind::Transactional, other);
        assert!(matches!(&err, StoreError::State(e) if *e == changed), "{err:#}");
    }
    let err = db.check_state_kinds("t", &plan(StateKind::Opaque)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "topology t: state counts holds transactional values, but the topology declares it opaque: a state \
         keeps the kind it was first committed with (run the topology under another name or on another data dir)"
    );
    // A commit of another kind is refused too, as one a replay cannot cure.
    let err = db.commit("t", 2, &record(), &counts(StateKind::Opaque)).unwrap_err();
    assert!(!err.is_retryable(), "{err:#}");
    let changed = kind_changed(StateKind::Transactional, StateKind::Opaque);
    assert!(matches!(err.root(), StoreError::State(e) if *e == changed), "{err:#}");
    assert_eq!(db.progress("t").unwrap().last_committed, 1);
}

#[test]
fn a_data_dir_written_before_kinds_were_recorded_is_judged_by_its_records() {
    for (kind, layout) in [(StateKind::Transactional, "counts"), (StateKind::Opaque, "records")] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.commit("t", 1, &record(), &counts(kind)).unwrap();
        let txn = db.db.begin_write().unwrap();
        assert!(txn.delete_table(kinds_def(&kinds_table("t"))).unwrap(), "{layout}: the kinds were recorded");
        txn.commit().unwrap();
        db.check_state_kinds("t", &plan(kind)).unwrap();
        let other = if kind == StateKind::Opaque { StateKind::Transactional } else { StateKind::Opaque };
        let err = db.check_state_kinds("t", &plan(other)).unwrap_err();
        assert!(matches!(&err, StoreError::State(e) if *e == kind_changed(kind, other)), "{layout}: {err:#}");
        // The next commit records the kind.
        db.commit("t", 2, &record(), &counts(kind)).unwrap();
        let txn = db.begin_read().unwrap();
        let kinds = txn.open_table(kinds_def(&kinds_table("t"))).unwrap();
        assert_eq!(kinds.get("counts").unwrap().unwrap().value(), kind_name(kind));
    }
}

#[test]
fn a_commit_out_of_order_cannot_be_cured_by_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let err = db.commit("t", 2, &record(), &[]).unwrap_err();
    assert!(!err.is_retryable());
    assert!(matches!(err.root(), StoreError::State(StateError::NotNext { txid: 2, last: 0 })), "{err:#}");
    assert_eq!(format!("{err:#}"), "topology t: cannot commit txid 2: the last committed txid is 0");
}

#[test]
fn reading_a_missing_topology_or_state_names_what_there_is() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let err = db.scan("t", "counts").unwrap_err();
    assert_eq!(err.to_string(), "this data dir holds no topology t (it holds: none)");
    db.commit("t", 1, &record(), &counts(StateKind::Transactional)).unwrap();
    db.record_batch("u", 1, &record()).unwrap();
    assert_eq!(db.topologies().unwrap(), ["t", "u"]);
    let err = db.get("nope", "counts", &[Value::from("a")]).unwrap_err();
    assert_eq!(err.to_string(), "this data dir holds no topology nope (it holds: t, u)");
    let err = db.scan("t", "words").unwrap_err();
    assert_eq!(err.to_string(), "topology t has no state words (its states: counts)");
    let err = db.scan("u", "counts").unwrap_err();
    assert_eq!(err.to_string(), "topology u has no state counts (its states: none)");
}

#[test]
fn dropping_a_topologys_state_drops_its_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.commit("t", 1, &record(), &counts(StateKind::Transactional)).unwrap();
    let txn = db.database().begin_write().unwrap();
    Db::drop_topology(&txn, "t").unwrap();
    txn.commit().unwrap();
    assert!(db.topologies().unwrap().is_empty());
    db.check_state_kinds("t", &plan(StateKind::Opaque)).unwrap();
}

#[test]
fn keys_in_messages_are_json() {
    assert_eq!(describe_key(&key("a\"b")), r#"["a\"b"]"#);
    assert_eq!(describe_key(&[0xff, 0x00]), r#"{"bytes":"ff00"}"#);
}
