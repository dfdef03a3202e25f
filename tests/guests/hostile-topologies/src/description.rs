//! What the hostile component describes, as JSON, built without the SDK so
//! that nothing stands between the attack and the host. The tests include
//! this file too, to bundle exactly what the component describes.

/// Nodes of the `deep-chain` topology.
pub const DEPTH: usize = 15_000;

const SPOUT: &str = r#"{"id":"spout","op":{"op":"spout","spout":{"kind":"file-lines","field":"sentence"}}}"#;

/// A word count: its spout, `split` (with `split_extra` spliced into its
/// node), and `count` into `state`.
fn word_count(name: &str, split_extra: &str, state: &str) -> String {
    format!(
        r#"{{"name":"{name}","nodes":[{SPOUT},
        {{"id":"split","inputs":[0]{split_extra},"op":{{"op":"each","input":["sentence"],"output":["word"]}}}},
        {{"id":"count","inputs":[1],"op":{{"op":"persistent-aggregate",
         "state":{{"name":"{state}","kind":"transactional"}},"group":["word"],
         "aggregator":{{"id":"count","kind":{{"kind":"builtin","name":"count"}},"input":[],"output":["count"]}}}}}}]}}"#
    )
}

/// `DEPTH` nodes in one line, each listed before the node it reads: a
/// recursive walk from the first node goes `DEPTH` calls deep. Written into
/// `out` in place: the guest's 64 MiB hold few copies of it.
fn deep_chain(out: &mut String) {
    use std::fmt::Write;
    out.push_str(r#"{"name":"deep-chain","nodes":["#);
    out.push_str(concat!(
        r#"{"id":"count","inputs":[1],"op":{"op":"persistent-aggregate","#,
        r#""state":{"name":"counts","kind":"transactional"},"group":["sentence"],"#,
        r#""aggregator":{"id":"count","kind":{"kind":"builtin","name":"count"},"input":[],"output":["count"]}}},"#
    ));
    for i in 1..DEPTH - 1 {
        let _ = write!(out, r#"{{"id":"f{i}","inputs":[{}],"op":{{"op":"filter","input":["sentence"]}}}},"#, i + 1);
    }
    out.push_str(SPOUT);
    out.push_str("]}");
}

/// Every topology the component describes, as `describe` returns them.
pub fn description() -> String {
    let mut out = String::with_capacity(DEPTH * 72);
    out.push('[');
    deep_chain(&mut out);
    out.push(',');
    out.push_str(&word_count("huge-parallelism", r#","parallelism":4294967295"#, "counts"));
    out.push(',');
    out.push_str(&word_count("state-escapes", "", "../../escape"));
    out.push(']');
    out
}
