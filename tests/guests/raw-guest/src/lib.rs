//! Implements the `topology` world without the SDK, to send the host
//! buffers the SDK would never produce. It splits sentences like word count
//! until one holds the word `attack`; then it returns its kind of garbage.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../../wit", world: "topology" });

    use exports::weir::topology::operators::Guest;
    use weir::topology::state::MapState;
    use weir::topology::types::{BatchContext, OperatorError, PartitionBatch, SpoutContext};

    const TOPOLOGY: &str = r#"{"name":"NAME","nodes":[
        {"id":"spout","op":{"op":"spout","spout":{"kind":"file-lines","field":"sentence"}}},
        {"id":"split","inputs":[0],"op":{"op":"each","input":["sentence"],"output":["word"]}},
        {"id":"count","inputs":[1],"op":{"op":"persistent-aggregate",
         "state":{"name":"counts","kind":"transactional"},"group":["word"],
         "aggregator":{"id":"count","kind":{"kind":"builtin","name":"count"},"input":[],"output":["count"]}}}]}"#;

    fn u32_at(buf: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
    }

    /// The sentences of a batch of one string field.
    fn sentences(input: &[u8]) -> Vec<&str> {
        let rows = u32_at(input, 0) as usize;
        let mut at = 8;
        let mut out = Vec::with_capacity(rows);
        for _ in 0..rows {
            let len = u32_at(input, at + 5) as usize;
            out.push(std::str::from_utf8(&input[at + 9..at + 9 + len]).unwrap());
            at += 9 + len;
        }
        out
    }

    /// Rows of `width` strings, each tagged with its parent.
    fn encode(width: u32, rows: &[(u32, Vec<&str>)]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        out.extend_from_slice(&width.to_le_bytes());
        for (parent, values) in rows {
            out.extend_from_slice(&parent.to_le_bytes());
            for value in values {
                out.push(5);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value.as_bytes());
            }
        }
        out
    }

    struct Raw;

    impl Guest for Raw {
        fn describe() -> String {
            let names = ["malformed-output", "extra-fields", "out-of-range-parent"];
            let defs: Vec<String> = names.iter().map(|n| TOPOLOGY.replace("NAME", n)).collect();
            format!("[{}]", defs.join(","))
        }

        fn run_function(ctx: BatchContext, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            let sentences = sentences(&input);
            if !sentences.iter().any(|s| s.split_whitespace().any(|w| w == "attack")) {
                let words: Vec<(u32, Vec<&str>)> = sentences
                    .iter()
                    .enumerate()
                    .flat_map(|(i, s)| s.split_whitespace().map(move |w| (i as u32, vec![w])))
                    .collect();
                return Ok(encode(1, &words));
            }
            Ok(match ctx.topology.as_str() {
                "malformed-output" => vec![7, 0, 0, 0, 1, 0, 0, 0, 0xff],
                "extra-fields" => encode(2, &[(0, vec!["word", "undeclared"])]),
                _ => encode(1, &[(4_000_000, vec!["word"])]),
            })
        }

        fn run_filter(_: BatchContext, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no filters here".into()))
        }

        fn reduce_groups(_: BatchContext, _: u32, _: Vec<u8>, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no reducers here".into()))
        }

        fn aggregate_groups(_: BatchContext, _: u32, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no aggregators here".into()))
        }

        fn update_state(_: BatchContext, _: &MapState, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no state updaters here".into()))
        }

        fn batch_retrieve(_: BatchContext, _: &MapState, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no query functions here".into()))
        }

        fn execute_query(_: BatchContext, _: Vec<u8>, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no query functions here".into()))
        }

        fn combine_groups(_: BatchContext, _: u32, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no combiners here".into()))
        }

        fn combine_pairs(_: BatchContext, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no combiners here".into()))
        }

        fn emit_batch(_: SpoutContext) -> Result<Option<Vec<u8>>, OperatorError> {
            Err(OperatorError::Fatal("no spouts here".into()))
        }

        fn spout_partitions(_: SpoutContext) -> Result<Vec<String>, OperatorError> {
            Err(OperatorError::Fatal("no spouts here".into()))
        }

        fn emit_partition(
            _: SpoutContext,
            _: String,
            _: Option<Vec<u8>>,
        ) -> Result<Option<PartitionBatch>, OperatorError> {
            Err(OperatorError::Fatal("no spouts here".into()))
        }

        fn reemit_partition(_: SpoutContext, _: String, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            Err(OperatorError::Fatal("no spouts here".into()))
        }
    }

    export!(Raw);
}
