//! One function per fuzz target, each feeding arbitrary bytes to a parser of
//! untrusted input: what guests return (the batch codec), what redb hands
//! back (stored records, ordered keys), what users upload (bundles, the
//! topology definitions a guest describes), what requests carry (JSON
//! keys) and what hosts of a cluster send each other (a slot's partials). None may panic on any input, and what one accepts must round-trip.
//!
//! `scripts/fuzz` runs each under libFuzzer (`cargo fuzz`) from its seed
//! corpus in `fuzz/corpus/<target>`; the test below runs each over that
//! corpus on every `cargo test`.

use std::path::Path;
use weir_config::SandboxConfig;
use weir_engine::bundle::Bundle;
use weir_plan as plan;
use weir_sdk::codec::{Batch, BatchWriter, Value};
use weir_sdk::topology::parse_description;
use weir_state::json;
use weir_state::rules::Stored;
use weir_state::{compact, keys};

/// A fuzz target: takes any bytes, panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("batch_codec", batch_codec),
    ("stored_record", stored_record),
    ("ordered_key", ordered_key),
    ("bundle", bundle),
    ("topology", topology),
    ("json_key", json_key),
    ("slot_partials", slot_partials),
];

/// A packed batch, as a guest returns it: one that decodes re-encodes byte
/// for byte, and every value reads in place.
pub fn batch_codec(data: &[u8]) {
    let Ok(batch) = Batch::decode(data) else { return };
    let mut writer = BatchWriter::new(batch.arity());
    for (index, row) in batch.rows().enumerate() {
        assert_eq!(row.encoded_values().count(), batch.arity());
        assert_eq!(row.get(batch.arity()), None);
        writer.push_row(row.tag(), row.values()).expect("a decoded row has its batch's arity");
        assert_eq!(batch.row(index).tag(), row.tag());
    }
    assert_eq!(writer.finish(), data, "a decoded batch re-encodes as it was");
    assert!(Batch::decode_owned(data.to_vec()).is_ok());
}

/// A value as redb holds it: a record that decodes encodes to a record that
/// decodes the same; values in the compact encoding likewise.
pub fn stored_record(data: &[u8]) {
    if let Ok(stored) = Stored::decode(data) {
        let encoded = stored.encode();
        let again = Stored::decode(&encoded).expect("an encoded record decodes");
        assert_eq!(again.encode(), encoded, "a record's encoding is stable");
        let _ = stored.value();
    }
    let mut rest = data;
    while let Ok((value, tail)) = compact::read_value(rest) {
        let mut encoded = Vec::new();
        compact::write_value(&mut encoded, value);
        let (again, left) = compact::read_value(&encoded).expect("an encoded value decodes");
        assert!(left.is_empty());
        let mut twice = Vec::new();
        compact::write_value(&mut twice, again);
        assert_eq!(twice, encoded, "a value's encoding is stable");
        rest = tail;
    }
}

/// A state key as redb holds it: one that decodes re-encodes as it was
/// (the encoding is canonical, so that equal keys are equal bytes).
pub fn ordered_key(data: &[u8]) {
    let Ok(values) = keys::decode(data) else { return };
    assert_eq!(keys::encode(values.iter().map(Value::as_ref)), data, "a decoded key re-encodes as it was");
}

/// An uploaded bundle: one that reads writes a bundle that reads the same.
pub fn bundle(data: &[u8]) {
    let name = Path::new("fuzz.weir");
    let Ok(read) = Bundle::from_bytes(name, data) else { return };
    let bytes = read.to_bytes().expect("a bundle that was read can be written");
    let again = Bundle::from_bytes(name, &bytes).expect("a written bundle reads");
    assert_eq!(again.manifest, read.manifest);
    assert_eq!(again.components, read.components);
}

/// The topology definitions a guest describes: checked and planned (or
/// refused with an error), never a panic.
pub fn topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(definitions) = parse_description(text) else { return };
    for definition in &definitions {
        let checked = plan::check_stream(definition, &SandboxConfig::default().topology);
        let Ok(planned) = plan::plan(definition, &SandboxConfig::default()) else { continue };
        assert!(checked.is_ok(), "a topology that plans passes the stream check");
        let _ = planned.data_nodes();
        for query in planned.queries.keys() {
            assert!(planned.query_nodes(query).is_some());
        }
        let _ = planned.with_parallelism(3).max_parallelism();
    }
}

/// A key as `weir state get --key` and `GET .../states/..?key=` read it:
/// one that reads prints back as itself, and encodes as a store key that
/// decodes to it.
pub fn json_key(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str(text) else { return };
    let Ok(key) = items.iter().map(json::from_json).collect::<anyhow::Result<Vec<Value>>>() else { return };
    let printed: Vec<serde_json::Value> = key.iter().map(json::to_json).collect();
    let again: Vec<Value> = printed.iter().map(|v| json::from_json(v).expect("a printed value reads")).collect();
    assert_eq!(again, key, "a key prints back as itself");
    let encoded = keys::encode(key.iter().map(Value::as_ref));
    assert_eq!(keys::decode(&encoded).expect("an encoded key decodes"), key);
}

/// A slot's partials, as another host of a cluster sends them: what decodes
/// re-encodes byte for byte.
pub fn slot_partials(data: &[u8]) {
    let Ok(partials) = weir_cluster::slots::decode(data) else { return };
    assert_eq!(weir_cluster::slots::encode(&partials), data, "decoded partials re-encode as they were");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each fuzzer starts from, run on every `cargo test`: a parser that
    /// starts panicking on a real example fails here first.
    #[test]
    fn every_target_takes_its_seed_corpus() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        for (name, target) in TARGETS {
            let dir = root.join(name);
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let mut seeds = 0;
            for entry in entries {
                let path = entry.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&bytes));
                assert!(outcome.is_ok(), "target {name} panicked on {}", path.display());
                seeds += 1;
            }
            assert!(seeds > 0, "target {name} has no seed corpus in {}", dir.display());
        }
    }
}
