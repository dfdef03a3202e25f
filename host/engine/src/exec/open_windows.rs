//! How many windows each window operation holds open, read from what is
//! committed: one per window and group whose partial (or, for a general
//! aggregator, whose tuples) its state keeps. Window keys start with the
//! window's end, an integer; what else a window's state keeps (its
//! watermark, late tuples, counts, session indexes) sorts before them.

use super::window_state::closed_range;
use super::window_tuples::TXID_LEN;
use std::collections::BTreeMap;
use weir_plan::{Op, Plan};
use weir_sdk::topology::AggregatorKind;
use weir_state::{Db, StoreError};

/// Keys one window's count reads at most: a count of this many means at
/// least as many, so that a status costs a bounded read whatever a state
/// holds.
pub const MAX_COUNTED_WINDOWS: u64 = 100_000;

/// Each window operation's open windows in `plan`'s committed state, by
/// node id (at most [`MAX_COUNTED_WINDOWS`] each).
pub fn open_windows(db: &Db, plan: &Plan) -> Result<BTreeMap<String, u64>, StoreError> {
    let (from, to) = closed_range(i64::MIN, i64::MAX);
    let mut open = BTreeMap::new();
    for node in &plan.nodes {
        let Op::Window { state, aggregator, .. } = &node.op else { continue };
        // A general aggregator's window keeps a chunk of tuples a batch,
        // under the window's key and the batch's txid.
        let chunked = aggregator.kind == AggregatorKind::General;
        let (mut windows, mut read) = (0u64, 0u64);
        let mut last: Vec<u8> = Vec::new();
        db.keys_in(&plan.stored_as, state, &from, &to, |key| {
            read += 1;
            let window = if chunked { &key[..key.len().saturating_sub(TXID_LEN)] } else { key };
            if !chunked || windows == 0 || window != last.as_slice() {
                windows += 1;
                if chunked {
                    last = window.to_vec();
                }
            }
            read < MAX_COUNTED_WINDOWS
        })?;
        open.insert(node.id.clone(), windows);
    }
    Ok(open)
}
