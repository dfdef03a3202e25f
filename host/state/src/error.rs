//! The store seam's errors, in the manner of redb's: what went wrong as a
//! type, so that a caller asks the error itself whether replaying a batch
//! may cure it ([`StoreError::is_retryable`]) rather than searching a chain
//! of messages for one.
//!
//! Their texts are the ones the host has always printed: [`StoreError`]
//! displays its outermost context, as an `anyhow` error did, and with `{:#}`
//! the errors beneath it too, each after a colon.

use super::kind::kind_name;
use std::error::Error;
use std::fmt;
use weir_sdk::topology::StateKind;

/// What is wrong with a topology's state such that replaying the batch
/// cannot cure it: the same records meet the same batch again. A batch
/// failing with one halts its topology at once, and a topology whose
/// states are of another kind is refused when it loads.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// The topology declares a state with another kind than its stored
    /// values have.
    KindChanged {
        /// The topology.
        topology: String,
        /// The state.
        state: String,
        /// The kind of what is stored.
        stored: StateKind,
        /// The kind the topology declares.
        declared: StateKind,
    },
    /// A stored value is of another kind than its state's.
    ValueOfAnotherKind {
        /// The kind of the value.
        stored: StateKind,
        /// The kind of the state.
        declared: StateKind,
    },
    /// A stored value was written by a later batch than the one committing.
    Ahead {
        /// The txid stored with the value.
        stored: u64,
        /// The batch's txid.
        txid: u64,
    },
    /// The batch is not the one after the last committed.
    NotNext {
        /// The batch's txid.
        txid: u64,
        /// The last committed txid.
        last: u64,
    },
    /// A stored record cannot be read, or a state cannot hold a record.
    Malformed(String),
    /// A partial cannot be combined with the stored value.
    Combine(String),
    /// The topology has no such state.
    NoState {
        /// The topology.
        topology: String,
        /// The state asked for.
        state: String,
        /// The states it has.
        present: Vec<String>,
    },
    /// A commit would grow the states past a bound on their size: the
    /// same batch grows them again when replayed.
    OverSize {
        /// The topology committing.
        topology: String,
        /// The state it wrote that holds the most.
        state: String,
        /// The bytes that state would hold.
        state_bytes: u64,
        /// The bytes the bounded states would hold together (the
        /// topology's, or the whole data dir's).
        bytes: u64,
        /// The bound, in bytes.
        limit: u64,
        /// The flag that sets it.
        flag: &'static str,
    },
    /// The data dir holds no such topology.
    NoTopology {
        /// The topology asked for.
        topology: String,
        /// The topologies it holds.
        present: Vec<String>,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |names: &[String]| if names.is_empty() { "none".to_owned() } else { names.join(", ") };
        match self {
            StateError::KindChanged { topology, state, stored, declared } => write!(
                f,
                "topology {topology}: state {state} holds {} values, but the topology declares it {}: a state \
                 keeps the kind it was first committed with (run the topology under another name or on another \
                 data dir)",
                kind_name(*stored),
                kind_name(*declared)
            ),
            StateError::ValueOfAnotherKind { stored, declared } => write!(
                f,
                "the stored value is {} state, the topology declares {}",
                kind_name(*stored),
                kind_name(*declared)
            ),
            StateError::Ahead { stored, txid } => write!(
                f,
                "stored txid {stored} is ahead of batch txid {txid}: this state was written by a later batch than \
                 the one being committed, so applying it could count twice"
            ),
            StateError::NotNext { txid, last } => {
                write!(f, "cannot commit txid {txid}: the last committed txid is {last}")
            }
            StateError::Malformed(what) | StateError::Combine(what) => f.write_str(what),
            StateError::NoState { topology, state, present } => {
                write!(f, "topology {topology} has no state {state} (its states: {})", list(present))
            }
            StateError::OverSize { topology, state, state_bytes, bytes, limit, flag } => {
                let whose = if *flag == TOTAL_FLAG { "every topology's states together" } else { "its states" };
                write!(
                    f,
                    "topology {topology}: this commit would grow {whose} to {bytes} bytes, past {flag} {} \
                     ({limit} bytes): state {state} would hold {state_bytes} bytes; nothing of the commit was \
                     written (raise {flag}, or delete state)",
                    limit >> 20
                )
            }
            StateError::NoTopology { topology, present } => {
                write!(f, "this data dir holds no topology {topology} (it holds: {})", list(present))
            }
        }
    }
}

impl Error for StateError {}

/// The flag that bounds one topology's states.
pub const TOPOLOGY_FLAG: &str = "--max-state-mib";
/// The flag that bounds the states of every topology of a data dir.
pub const TOTAL_FLAG: &str = "--max-total-state-mib";

/// Bytes the store keeps for itself that do not decode: an encoded key, a
/// batch's record, the fields of a stored value. (A state's record that does
/// not decode is a [`StateError::Malformed`], which names it.)
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(String);

impl DecodeError {
    /// An error saying `what` is wrong with the bytes.
    pub fn new(what: impl Into<String>) -> DecodeError {
        DecodeError(what.into())
    }
}

impl From<weir_sdk::codec::DecodeError> for DecodeError {
    fn from(error: weir_sdk::codec::DecodeError) -> DecodeError {
        DecodeError(error.to_string())
    }
}

/// Why a read or a write of the store failed: what the traits of the seam
/// ([`store`](super::store)), the stores and a batch's views return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The topology's state is such that replaying the batch cannot cure
    /// it: the only error that is not [retryable](StoreError::is_retryable).
    #[error(transparent)]
    State(#[from] StateError),
    /// redb failed: the file, the disk, a transaction.
    #[error(transparent)]
    Storage(#[from] redb::Error),
    /// A store other than redb failed (etcd's commit log, another host's
    /// answer to a read), as that store words it, with its own context.
    #[error(transparent)]
    Backend(anyhow::Error),
    /// What the store keeps for itself does not decode.
    #[error(transparent)]
    Unreadable(#[from] DecodeError),
    /// The store refuses what it was asked: a query's write, a state
    /// written twice in one batch or a key of one read after its partial
    /// was left to the commit, partials out of key order, a commit group
    /// of two topologies.
    #[error("{0}")]
    Refused(String),
    /// Another of these, with what the store was doing when it happened.
    #[error(transparent)]
    Context(ContextError),
}

impl StoreError {
    /// Whether replaying the batch may succeed where this failed: it may,
    /// unless the error is a [`StateError`] (under whatever context).
    pub fn is_retryable(&self) -> bool {
        self.state().is_none()
    }

    /// The [`StateError`] this is, under whatever context it was given.
    pub fn state(&self) -> Option<&StateError> {
        match self.root() {
            StoreError::State(error) => Some(error),
            _ => None,
        }
    }

    /// This error without the context it was given: the variant that says
    /// what went wrong.
    pub fn root(&self) -> &StoreError {
        let mut error = self;
        while let StoreError::Context(context) = error {
            error = &context.error;
        }
        error
    }

    /// This error, with what the store was doing when it happened.
    pub fn context(self, context: impl Into<String>) -> StoreError {
        StoreError::Context(ContextError { context: context.into(), error: Box::new(self) })
    }
}

/// Every redb error is a [`StoreError::Storage`], with the text redb gives it.
macro_rules! storage_errors {
    ($($error:ident),*) => {$(
        impl From<redb::$error> for StoreError {
            fn from(error: redb::$error) -> StoreError {
                StoreError::Storage(error.into())
            }
        }
    )*};
}

storage_errors!(StorageError, TableError, TransactionError, CommitError, SetDurabilityError);

/// A [`StoreError`] under what the store was doing when it happened.
#[derive(Debug)]
pub struct ContextError {
    context: String,
    error: Box<StoreError>,
}

impl ContextError {
    /// What the store was doing.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The error it met.
    pub fn error(&self) -> &StoreError {
        &self.error
    }
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.context)?;
        // `{:#}` goes on down the chain, as anyhow's did: messages built
        // from a store's error print it whole.
        if f.alternate() { write!(f, ": {:#}", self.error) } else { Ok(()) }
    }
}

impl Error for ContextError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.error)
    }
}

/// Gives a result's error what the store was doing, as anyhow's `Context`
/// does, keeping its kind.
pub(crate) trait Context<T> {
    /// The error, under `context`, made when there is one.
    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, StoreError>;
}

impl<T, E: Into<StoreError>> Context<T> for Result<T, E> {
    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, StoreError> {
        self.map_err(|error| error.into().context(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_prints_as_anyhow_printed_it_and_keeps_its_kind_under_context() {
        let error = StoreError::from(StateError::NotNext { txid: 3, last: 1 }).context("topology t").context("outer");
        assert_eq!(error.to_string(), "outer");
        assert_eq!(format!("{error:#}"), "outer: topology t: cannot commit txid 3: the last committed txid is 1");
        let wrapped = anyhow::Error::from(error);
        assert_eq!(wrapped.to_string(), "outer");
        assert_eq!(format!("{wrapped:#}"), "outer: topology t: cannot commit txid 3: the last committed txid is 1");
        assert_eq!(wrapped.chain().map(|e| e.to_string()).collect::<Vec<_>>().len(), 3);
        let error = StoreError::from(StateError::NotNext { txid: 3, last: 1 }).context("topology t");
        assert!(matches!(error.root(), StoreError::State(StateError::NotNext { txid: 3, last: 1 })));
        assert!(!error.is_retryable());
        // Another store's error keeps its own chain.
        let etcd = anyhow::anyhow!("connection refused").context("reading the commit record");
        let error = StoreError::Backend(etcd).context("progress");
        assert_eq!(format!("{error:#}"), "progress: reading the commit record: connection refused");
        assert_eq!(
            format!("{:#}", anyhow::Error::from(error)),
            "progress: reading the commit record: connection refused"
        );
        assert!(StoreError::Refused("no".into()).context("x").is_retryable());
    }
}
