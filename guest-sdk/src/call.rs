//! What every operator call carries: the batch it belongs to, and the error
//! it fails with. Tuples read both, so they sit below the operator traits.

/// Why an operator failed on a batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The batch fails and is replayed with the same txid and the next attempt.
    #[error("retry: {0}")]
    Retry(String),
    /// The topology halts with this message.
    #[error("fatal: {0}")]
    Fatal(String),
}

impl Error {
    /// A failure worth replaying the batch for.
    pub fn retry(message: impl Into<String>) -> Error {
        Error::Retry(message.into())
    }

    /// A failure that stops the topology.
    pub fn fatal(message: impl Into<String>) -> Error {
        Error::Fatal(message.into())
    }
}

/// The batch an operator call belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchInfo {
    /// Name of the topology.
    pub topology: String,
    /// Id of the operator being called.
    pub operator: String,
    /// Transaction id of the batch; a replay keeps it.
    pub txid: u64,
    /// Attempt number, from 0; each replay adds one.
    pub attempt: u32,
    /// Partition of the batch being processed.
    pub partition: u32,
    /// Names of the input fields, in order.
    pub fields: Vec<String>,
}

impl BatchInfo {
    /// The entry of `group` in `slots`, one per group of the call; a row
    /// tagged with a group past them fails the call.
    pub(crate) fn group_slot<'s, T>(&self, slots: &'s mut [T], group: u32) -> Result<&'s mut T, Error> {
        let groups = slots.len();
        slots.get_mut(group as usize).ok_or_else(|| {
            Error::fatal(format!("operator {}: row tagged with group {group} of {groups}", self.operator))
        })
    }
}
