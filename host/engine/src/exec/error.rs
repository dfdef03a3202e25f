//! Building a batch's errors from a state's failure or a malformed result.

use std::fmt;
use weir_runtime::{BatchError, Origin};
use weir_state::StoreError;

/// A state's error, come from `origin`: fatal when replaying the batch
/// cannot cure it (see [`StoreError::is_retryable`]).
pub(super) fn state_failure(operator: &str, message: String, error: &StoreError, origin: Origin) -> BatchError {
    BatchError { retryable: error.is_retryable(), ..BatchError::retry(operator, message) }.with_origin(origin)
}

pub(super) fn malformed(operator: &str, what: impl fmt::Display) -> BatchError {
    BatchError::retry(operator, format!("returned a malformed batch: {what}"))
}
