//! How a call into an instance ends.
//!
//! Every call into an instance, its instantiation included, runs as a
//! future under two limits. Guest code is interrupted by the epoch at the
//! call's CPU time limit, as it passes loop heads and calls. A guest waiting
//! in a host call runs no code that could be interrupted, but WASI is linked
//! asynchronously, so such a wait is a pending future, and the thread that
//! runs the call stops waiting at the call's deadline, set past the CPU
//! limit, and abandons it. The abandoned future is dropped, which unwinds
//! the guest's stack, and so is the instance, whose store a trap or an
//! abandoned call leaves unusable.

use super::guest_output::{GuestOutput, LogLimitExceeded};
use super::host_state::HostState;
use super::limits::{Limit, call_deadline};
use crate::sandbox::OperatorSandbox;
use anyhow::Result;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{self, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use wasmtime::{Store, Trap};
use weir_state::budget::StateLimitExceeded;

/// Runs `call` on this thread to its end, or until `deadline` passes:
/// `None` then, and the call is abandoned (its future dropped).
///
/// The thread polls the call and sleeps while it is pending (its guest
/// waits in a host call), until woken or the deadline passes: no timer is
/// registered per call. What the call waits on (WASI's clocks, its
/// filesystem calls on the blocking pool) lives in WASI's ambient tokio
/// runtime: the caller's, where it is a runtime's blocking thread (the
/// server calls guests from `spawn_blocking`), else a runtime of WASI's
/// own. It must not be called from an async task, whose thread must not
/// block.
pub(super) fn within<F: Future>(deadline: Option<Duration>, call: F) -> Option<F::Output> {
    wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
        let until = deadline.map(|deadline| Instant::now() + deadline);
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut context = task::Context::from_waker(&waker);
        let mut call = pin!(call);
        loop {
            if let Poll::Ready(output) = call.as_mut().poll(&mut context) {
                return Some(output);
            }
            match until.map(|until| until.saturating_duration_since(Instant::now())) {
                Some(Duration::ZERO) => return None,
                Some(left) => std::thread::park_timeout(left),
                None => std::thread::park(),
            }
        }
    })
}

/// Wakes the thread that runs a call.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// What a call into `store` came back with, or why it did not: the limit
/// it hit first, what the guest said last (a panic's message), and the
/// wasm backtrace, in words a user can act on.
pub(super) fn settle<T>(
    store: &mut Store<HostState>,
    stderr: &GuestOutput,
    sandbox: &OperatorSandbox,
    result: Option<wasmtime::Result<T>>,
) -> Result<T, CallError> {
    let error = match result {
        Some(Ok(value)) => return Ok(value),
        Some(Err(error)) => Some(error),
        None => None,
    };
    let exceeded = store.data_mut().limiter.exceeded.take();
    let (limit, explained) = match (&error, exceeded) {
        (None, _) => (
            Some(Limit::Deadline),
            format!(
                "deadline of {} ms per call exceeded: the guest was blocked in a host call (a WASI sleep or \
                 poll, for example), and the call was abandoned",
                call_deadline(sandbox.call_ms).unwrap_or_default().as_millis()
            ),
        ),
        (Some(_), Some(exceeded)) => (Some(Limit::Memory), exceeded.to_string()),
        (Some(error), None) => match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => {
                (Some(Limit::Cpu), format!("CPU time limit of {} ms per call exceeded", sandbox.call_ms))
            }
            Some(Trap::StackOverflow) => {
                (Some(Limit::Stack), "stack overflow: the guest exhausted its call stack".to_owned())
            }
            _ => match (error.downcast_ref::<StateLimitExceeded>(), error.downcast_ref::<LogLimitExceeded>()) {
                (Some(exceeded), _) => (Some(Limit::State), exceeded.to_string()),
                (None, Some(exceeded)) => (Some(Limit::Log), exceeded.to_string()),
                (None, None) => (None, String::new()),
            },
        },
    };
    let mut message = if explained.is_empty() { String::new() } else { format!("{explained}\n") };
    let said: Vec<String> = stderr.take_recent().into_iter().filter(|l| !l.is_empty()).collect();
    if !said.is_empty() {
        message.push_str(&format!("guest stderr: {}\n", said.join("\n  ")));
    }
    if let Some(error) = error {
        message.push_str(&format!("{error:?}"));
    }
    Err(CallError::trap(limit, message.trim_end().to_owned()))
}

/// Why a call into a guest failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The guest asked for the batch to be replayed.
    Retry(String),
    /// The guest asked for the topology to halt.
    Fatal(String),
    /// The guest trapped (a panic, an out-of-bounds access, ...), hit one of
    /// its sandbox's limits (`limit`), or was abandoned at its deadline; the
    /// instance is dropped and the batch replayed.
    Trap {
        /// The limit the call hit, if that is why it trapped.
        limit: Option<Limit>,
        /// What happened, with what the guest wrote last and its backtrace.
        message: String,
    },
}

impl CallError {
    pub(super) fn trap(limit: Option<Limit>, message: impl Into<String>) -> CallError {
        CallError::Trap { limit, message: message.into() }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Retry(m) => write!(f, "retry: {m}"),
            CallError::Fatal(m) => write!(f, "fatal: {m}"),
            CallError::Trap { message, .. } => write!(f, "trap: {message}"),
        }
    }
}

impl std::error::Error for CallError {}
