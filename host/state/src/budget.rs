//! What guests read and write through states, counted against the host's
//! limits per call and per batch: every entry a guest reads is copied out
//! by the host, and every entry it writes is held until the batch commits.

use std::fmt;
use weir_config::StateQuota;

/// A read or a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `multi-get`.
    Read,
    /// `multi-put`.
    Write,
}

/// Which quota a limit belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One operator call.
    Call,
    /// Every call of one batch (or one query) together.
    Batch,
}

/// What a call or a batch read and wrote so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    read_entries: u64,
    read_bytes: u64,
    write_entries: u64,
    write_bytes: u64,
}

/// The measure a limit bounds, its limit and the figure that passed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun {
    access: Access,
    bytes: bool,
    limit: u64,
    figure: u64,
}

impl Usage {
    /// Counts one more entry of `bytes` (key and value) against `quota`;
    /// refused, and not counted, when it would pass a limit.
    pub fn charge(&mut self, quota: &StateQuota, access: Access, bytes: u64) -> Result<(), Overrun> {
        let (entries, total, max_entries, max_bytes) = match access {
            Access::Read => (&mut self.read_entries, &mut self.read_bytes, quota.read_entries, quota.read_bytes),
            Access::Write => (&mut self.write_entries, &mut self.write_bytes, quota.write_entries, quota.write_bytes),
        };
        let (new_entries, new_total) = (*entries + 1, total.saturating_add(bytes));
        if new_entries > max_entries {
            return Err(Overrun { access, bytes: false, limit: max_entries, figure: new_entries });
        }
        if new_total > max_bytes {
            return Err(Overrun { access, bytes: true, limit: max_bytes, figure: new_total });
        }
        (*entries, *total) = (new_entries, new_total);
        Ok(())
    }
}

/// A guest read or wrote more through a state than the host allows. The
/// call traps with it: a guest cannot catch it and go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateLimitExceeded {
    /// The state.
    pub state: String,
    /// Whose quota.
    pub scope: Scope,
    /// What passed it.
    pub overrun: Overrun,
}

impl Overrun {
    /// The error, for `state`'s quota of `scope`.
    pub fn on(self, state: &str, scope: Scope) -> StateLimitExceeded {
        StateLimitExceeded { state: state.to_owned(), scope, overrun: self }
    }
}

impl StateLimitExceeded {
    /// The flag that sets the limit.
    pub fn flag(&self) -> &'static str {
        match (self.scope, self.overrun.access, self.overrun.bytes) {
            (Scope::Call, Access::Read, false) => "--max-call-state-reads",
            (Scope::Call, Access::Read, true) => "--max-call-state-read-mib",
            (Scope::Call, Access::Write, false) => "--max-call-state-writes",
            (Scope::Call, Access::Write, true) => "--max-call-state-write-mib",
            (Scope::Batch, Access::Read, false) => "--max-batch-state-reads",
            (Scope::Batch, Access::Read, true) => "--max-batch-state-read-mib",
            (Scope::Batch, Access::Write, false) => "--max-batch-state-writes",
            (Scope::Batch, Access::Write, true) => "--max-batch-state-write-mib",
        }
    }
}

impl fmt::Display for StateLimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Overrun { access, bytes, limit, figure } = self.overrun;
        let (verb, done) = match access {
            Access::Read => ("read", "read"),
            Access::Write => ("write", "written"),
        };
        let scope = match self.scope {
            Scope::Call => "call",
            Scope::Batch => "batch",
        };
        let state = &self.state;
        if bytes {
            write!(
                f,
                "state {verb} limit of {} MiB per {scope} exceeded: {figure} bytes {done} through state {state}",
                limit >> 20
            )?;
        } else {
            write!(
                f,
                "state {verb} limit of {limit} entries per {scope} exceeded: {figure} {done} through state {state}"
            )?;
        }
        write!(f, " (see {})", self.flag())
    }
}

impl std::error::Error for StateLimitExceeded {}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTA: StateQuota = StateQuota { read_entries: 3, read_bytes: 100, write_entries: 2, write_bytes: 1 << 20 };

    #[test]
    fn entries_and_bytes_are_counted_until_a_limit_would_pass() {
        let mut usage = Usage::default();
        usage.charge(&QUOTA, Access::Write, 1 << 19).unwrap();
        let over = usage.charge(&QUOTA, Access::Write, (1 << 19) + 1).unwrap_err();
        let err = over.on("big", Scope::Call);
        assert_eq!(
            err.to_string(),
            "state write limit of 1 MiB per call exceeded: 1048577 bytes written through state big \
             (see --max-call-state-write-mib)"
        );
        usage.charge(&QUOTA, Access::Write, 1).unwrap();
        let err = usage.charge(&QUOTA, Access::Write, 1).unwrap_err().on("big", Scope::Batch);
        assert_eq!(
            err.to_string(),
            "state write limit of 2 entries per batch exceeded: 3 written through state big \
             (see --max-batch-state-writes)"
        );
        for _ in 0..3 {
            usage.charge(&QUOTA, Access::Read, 10).unwrap();
        }
        let err = usage.charge(&QUOTA, Access::Read, 10).unwrap_err().on("s", Scope::Call);
        assert_eq!(err.flag(), "--max-call-state-reads");
        assert_eq!(
            err.to_string(),
            "state read limit of 3 entries per call exceeded: 4 read through state s (see --max-call-state-reads)"
        );
    }
}
