//! Which batch a guest call runs on ([`BatchId`], [`PartitionId`]), and why a
//! batch failed, in types a caller can match: where the failure came from
//! ([`Origin`]), what went wrong in a guest's call ([`Cause`]), and whether a
//! replay may cure it.

use super::{CallError, Limit};
use std::fmt;

/// Which batch, and which try at it: a replay keeps the txid and takes the
/// next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchId {
    /// The batch's txid, the order it commits in.
    pub txid: u64,
    /// How many times it was tried before, 0 the first time.
    pub attempt: u32,
}

impl BatchId {
    /// The same batch, tried once more.
    pub fn next_attempt(self) -> BatchId {
        BatchId { attempt: self.attempt + 1, ..self }
    }

    /// One partition of this batch.
    pub fn partition(self, partition: u32) -> PartitionId {
        PartitionId { batch: self, partition }
    }
}

/// One partition of a batch: what each guest call runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionId {
    /// The batch.
    pub batch: BatchId,
    /// The partition, from 0.
    pub partition: u32,
}

/// Why a batch failed, where the failure came from, and whether replaying
/// the batch may help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchError {
    /// The operator at fault (or the state, for storage errors).
    pub operator: String,
    /// Where the failure came from.
    pub origin: Origin,
    /// False when the topology must halt at once.
    pub retryable: bool,
    /// What went wrong.
    pub message: String,
}

/// Where a batch failure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A call into an operator, or what it returned.
    Operator(Cause),
    /// A call into the guest spout, or what it emitted.
    Spout(Cause),
    /// Reading or writing a state.
    State,
    /// The batch was not processed within the batch deadline.
    Deadline,
    /// The batch's write transaction.
    Commit,
}

/// What went wrong in a guest's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The guest returned an error, or a result the host refused.
    Returned,
    /// The guest's instance trapped, its call was abandoned at its deadline,
    /// or its output passed a limit; `Some` names the limit it hit.
    Trapped(Option<Limit>),
}

impl Cause {
    /// The cause of a failed call.
    pub fn of(error: &CallError) -> Cause {
        match error {
            CallError::Retry(_) | CallError::Fatal(_) => Cause::Returned,
            CallError::Trap { limit, .. } => Cause::Trapped(*limit),
        }
    }
}

impl BatchError {
    /// An error of `operator` that replaying the batch may cure.
    pub fn retry(operator: &str, message: impl Into<String>) -> BatchError {
        BatchError {
            operator: operator.to_owned(),
            origin: Origin::Operator(Cause::Returned),
            retryable: true,
            message: message.into(),
        }
    }

    /// An error of `operator` that halts the topology.
    pub fn fatal(operator: &str, message: impl Into<String>) -> BatchError {
        BatchError { retryable: false, ..BatchError::retry(operator, message) }
    }

    /// The same error, come from `origin`.
    pub fn with_origin(self, origin: Origin) -> BatchError {
        BatchError { origin, ..self }
    }

    /// The error of a failed call into `operator`: a retry or a trap is
    /// retried, a fatal error is not.
    pub fn of_call(operator: &str, error: &CallError) -> BatchError {
        BatchError {
            operator: operator.to_owned(),
            origin: Origin::Operator(Cause::of(error)),
            retryable: !matches!(error, CallError::Fatal(_)),
            message: error.to_string(),
        }
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.origin {
            // A spout's message names it.
            Origin::Spout(_) => f.write_str(&self.message),
            _ => write!(f, "operator {}: {}", self.operator, self.message),
        }
    }
}

impl std::error::Error for BatchError {}
