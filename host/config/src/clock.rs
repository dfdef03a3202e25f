//! The time a batch is emitted at, which its processing-time windows go
//! by: the host's clock, or, for tests, a clock pinned by `WEIR_CLOCK` (see
//! [`CLOCK_ENV`]) that reads `START + STEP × n` the n-th time it is read,
//! so that a test knows every batch's time. The coordinator reads it once
//! for each batch it emits afresh, in txid order; a replay keeps the time
//! its batch was first emitted at.

use crate::CLOCK_ENV;
use anyhow::{Result, anyhow};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A clock pinned to read `start + step × n` milliseconds the n-th time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pinned {
    start: u64,
    step: u64,
}

fn parse(text: &str) -> Result<Pinned> {
    let number = |s: &str| s.parse::<u64>().map_err(|_| anyhow!("{CLOCK_ENV}={text:?}: {s:?} is not a number"));
    let (start, step) = text.split_once(':').ok_or_else(|| anyhow!("{CLOCK_ENV}={text:?}: expected <start>:<step>"))?;
    Ok(Pinned { start: number(start)?, step: number(step)? })
}

/// The clock `WEIR_CLOCK` pins, read once.
fn pinned() -> &'static Result<Option<Pinned>, String> {
    static PINNED: OnceLock<Result<Option<Pinned>, String>> = OnceLock::new();
    PINNED.get_or_init(|| match std::env::var(CLOCK_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{CLOCK_ENV} is not UTF-8")),
        Ok(text) => parse(&text).map(Some).map_err(|e| format!("{e:#}")),
    })
}

/// Refuses a `WEIR_CLOCK` that pins no clock.
pub fn check() -> Result<()> {
    pinned().as_ref().map(|_| ()).map_err(|e| anyhow!("{e}"))
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    static READS: AtomicU64 = AtomicU64::new(0);
    if let Ok(Some(Pinned { start, step })) = pinned() {
        let n = READS.fetch_add(1, Ordering::Relaxed) + 1;
        return start.saturating_add(step.saturating_mul(n));
    }
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_clock_reads_back_and_a_bad_one_is_refused() {
        assert_eq!(parse("1000:250").unwrap(), Pinned { start: 1000, step: 250 });
        for (text, want) in [("1000", "expected <start>:<step>"), ("a:1", "\"a\" is not a number")] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.starts_with("WEIR_CLOCK=") && error.contains(want), "{error}");
        }
    }
}
