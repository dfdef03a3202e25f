//! Fault injection for the kill-and-restart tests: with `WEIR_FAULT` set
//! (see [`FAULT_ENV`]) the host kills itself with SIGKILL the moment a batch
//! reaches the named point, so that a test stops a run at an exact place in
//! the commit path instead of racing a log line with a timer.
//!
//! The variable is read once; unset, a point costs one load of a cell
//! already filled.

use crate::FAULT_ENV;
use anyhow::{Result, anyhow};
use std::fmt;
use std::io::Write;
use std::sync::OnceLock;

/// A place in a batch's way through the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// The process phase has finished the batch; the coordinator has not
    /// seen its result.
    AfterProcess,
    /// Every earlier batch is committed; the batch's commit phase has not
    /// started.
    BeforeCommit,
    /// The batch's commit is durable; nothing later is committed.
    AfterCommit,
    /// Inside the durable write of a group of batches: the first batch's
    /// writes are applied, the others' are not, nothing is durable. Named
    /// with txid `t`, the first group of two or more batches ending at or
    /// after `t` is where it fires.
    InGroupCommit,
    /// A topology with sinks: the batch's output is published and
    /// acknowledged, and still in the outbox.
    AfterPublish,
}

impl Point {
    /// The points every batch passes, in order.
    pub const ALL: [Point; 3] = [Point::AfterProcess, Point::BeforeCommit, Point::AfterCommit];

    /// Every point: those of [`Point::ALL`], then those of groups and sinks.
    pub const NAMED: [Point; 5] =
        [Point::AfterProcess, Point::BeforeCommit, Point::AfterCommit, Point::InGroupCommit, Point::AfterPublish];

    /// The point's name in `WEIR_FAULT`.
    pub fn name(self) -> &'static str {
        match self {
            Point::AfterProcess => "after-process",
            Point::BeforeCommit => "before-commit",
            Point::AfterCommit => "after-commit",
            Point::InGroupCommit => "in-group-commit",
            Point::AfterPublish => "after-publish",
        }
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the host is to kill itself: when batch `txid` reaches `point`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub point: Point,
    pub txid: u64,
}

impl Fault {
    /// Reads `<point>:<txid>`.
    pub fn parse(text: &str) -> Result<Fault> {
        let names = || Point::NAMED.map(Point::name).join(", ");
        let (name, txid) = text
            .split_once(':')
            .ok_or_else(|| anyhow!("{FAULT_ENV}={text:?}: expected <point>:<txid>, the point one of {}", names()))?;
        let point = Point::NAMED
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| anyhow!("{FAULT_ENV}={text:?}: unknown point {name:?}, expected one of {}", names()))?;
        let txid = txid
            .parse::<u64>()
            .ok()
            .filter(|txid| *txid > 0)
            .ok_or_else(|| anyhow!("{FAULT_ENV}={text:?}: the txid {txid:?} is not a number from 1 up"))?;
        Ok(Fault { point, txid })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.point, self.txid)
    }
}

/// The fault `WEIR_FAULT` names, read once.
fn configured() -> &'static Result<Option<Fault>, String> {
    static FAULT: OnceLock<Result<Option<Fault>, String>> = OnceLock::new();
    FAULT.get_or_init(|| match std::env::var(FAULT_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{FAULT_ENV} is not UTF-8")),
        Ok(text) => Fault::parse(&text).map(Some).map_err(|e| format!("{e:#}")),
    })
}

/// Refuses a `WEIR_FAULT` that names no fault: a test that misspelt it
/// would otherwise run to the end unharmed.
pub fn check() -> Result<()> {
    configured().as_ref().map(|_| ()).map_err(|e| anyhow!("{e}"))
}

/// Kills the process if `WEIR_FAULT` names `point` of `txid`.
#[inline]
pub fn at(point: Point, txid: u64) {
    if let Ok(Some(fault)) = configured()
        && fault.point == point
        && fault.txid == txid
    {
        kill(fault, "");
    }
}

/// Kills the process inside the commit of the group of txids
/// `first..=last` if `WEIR_FAULT` names [`Point::InGroupCommit`] of a txid
/// up to `last`; the line it writes names the group.
pub fn in_group_commit(first: u64, last: u64) {
    if let Ok(Some(fault)) = configured()
        && fault.point == Point::InGroupCommit
        && fault.txid <= last
    {
        kill(fault, &format!(", inside the commit of txids {first}..={last}"));
    }
}

/// Whether batch `txid` must start a commit group: `WEIR_FAULT` names its
/// [`Point::BeforeCommit`], which promises every earlier batch committed.
pub fn starts_group(txid: u64) -> bool {
    matches!(configured(), Ok(Some(Fault { point: Point::BeforeCommit, txid: at })) if *at == txid)
}

/// Whether batch `txid` must end a commit group: `WEIR_FAULT` names its
/// [`Point::AfterCommit`], which promises nothing later committed.
pub fn ends_group(txid: u64) -> bool {
    matches!(configured(), Ok(Some(Fault { point: Point::AfterCommit, txid: at })) if *at == txid)
}

fn kill(fault: &Fault, detail: &str) -> ! {
    // Unbuffered, and ignored if stderr is closed: the line is out before
    // the signal, or there is nowhere to write it.
    let _ = writeln!(std::io::stderr(), "{FAULT_ENV}: killing the host at {fault}{detail}");
    // SAFETY: kill(2) on our own pid touches no memory of this process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    // SIGKILL cannot be caught: this is not reached.
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_point_reads_back_from_its_name() {
        for point in Point::NAMED {
            let fault = Fault::parse(&format!("{point}:37")).unwrap();
            assert_eq!(fault, Fault { point, txid: 37 });
            assert_eq!(fault.to_string(), format!("{}:37", point.name()));
        }
    }

    #[test]
    fn a_value_naming_no_fault_is_refused_naming_what_is_wrong() {
        let cases = [
            ("after-commit", "expected <point>:<txid>"),
            (
                "mid-commit:3",
                "unknown point \"mid-commit\", expected one of after-process, before-commit, after-commit, \
                 in-group-commit, after-publish",
            ),
            ("after-commit:0", "the txid \"0\" is not a number from 1 up"),
            ("after-commit:-1", "the txid \"-1\" is not a number from 1 up"),
            ("before-commit:", "the txid \"\" is not a number from 1 up"),
        ];
        for (text, want) in cases {
            let error = Fault::parse(text).unwrap_err().to_string();
            assert!(error.starts_with(&format!("WEIR_FAULT={text:?}: ")), "{error}");
            assert!(error.contains(want), "{text}: {error}");
        }
    }
}
