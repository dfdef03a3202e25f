//! A guest's stdout and stderr, written line by line into the host log with
//! the operator's name in front. What one call may write is bounded, and so
//! is what the host keeps of it.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};
use weir_config::LogLimits;
use weir_config::sync::Locked;

/// Longest line kept before it is logged in pieces.
const MAX_LINE: usize = 16 * 1024;
/// Lines kept to explain a failure (a panic message spans a few).
const RECENT_LINES: usize = 8;

/// Lines kept per topology for `recent_lines` (the server's logs call).
const KEPT_PER_TOPOLOGY: usize = 1000;
/// Bytes of lines kept per topology.
const KEPT_BYTES_PER_TOPOLOGY: usize = 1 << 20;
/// Topologies whose lines are kept: past it, the one that wrote last the
/// longest ago is forgotten.
const KEPT_TOPOLOGIES: usize = 64;

/// A line a guest wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GuestLine {
    /// The operator whose instance wrote it.
    pub operator: String,
    /// stdout or stderr.
    pub stream: &'static str,
    /// The line.
    pub line: String,
    /// When it was written, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl GuestLine {
    fn size(&self) -> usize {
        self.operator.len() + self.line.len()
    }
}

/// The lines kept of one topology.
#[derive(Default)]
struct Kept {
    lines: VecDeque<GuestLine>,
    bytes: usize,
    /// When it last wrote, in lines written by any topology.
    last_write: u64,
}

#[derive(Default)]
struct Recent {
    topologies: BTreeMap<String, Kept>,
    written: u64,
}

static RECENT: Mutex<Recent> = Mutex::new(Recent { topologies: BTreeMap::new(), written: 0 });

/// The last lines `topology`'s guests wrote, most recent first.
pub fn recent_lines(topology: &str) -> Vec<GuestLine> {
    let recent = RECENT.locked();
    recent.topologies.get(topology).map(|kept| kept.lines.iter().rev().cloned().collect()).unwrap_or_default()
}

fn keep(topology: &str, line: GuestLine) {
    let mut recent = RECENT.locked();
    recent.written += 1;
    let now = recent.written;
    if !recent.topologies.contains_key(topology) && recent.topologies.len() >= KEPT_TOPOLOGIES {
        let oldest = recent.topologies.iter().min_by_key(|(_, kept)| kept.last_write).map(|(name, _)| name.clone());
        if let Some(oldest) = oldest {
            recent.topologies.remove(&oldest);
        }
    }
    let kept = recent.topologies.entry(topology.to_owned()).or_default();
    kept.last_write = now;
    kept.bytes += line.size();
    kept.lines.push_back(line);
    while kept.lines.len() > KEPT_PER_TOPOLOGY || kept.bytes > KEPT_BYTES_PER_TOPOLOGY {
        let Some(dropped) = kept.lines.pop_front() else { break };
        kept.bytes -= dropped.size();
    }
}

/// A call wrote more to stdout and stderr than the host allows. The call
/// traps with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLimitExceeded {
    /// Bytes: the limit and what the call tried to write.
    Bytes(u64, u64),
    /// Lines: the limit.
    Lines(u64),
}

impl fmt::Display for LogLimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LogLimitExceeded::Bytes(limit, figure) => write!(
                f,
                "log output limit of {} KiB per call exceeded: the call wrote {figure} bytes to stdout and stderr \
                 (see --max-log-kib)",
                limit >> 10
            ),
            LogLimitExceeded::Lines(limit) => write!(
                f,
                "log output limit of {limit} lines per call exceeded: the call wrote more lines to stdout and \
                 stderr (see --max-log-lines)"
            ),
        }
    }
}

impl std::error::Error for LogLimitExceeded {}

/// What the current call of an instance wrote to its two streams.
#[derive(Default)]
struct Budget {
    limits: LogLimits,
    bytes: AtomicU64,
    lines: AtomicU64,
}

impl Budget {
    fn charge_bytes(&self, n: usize) -> Result<(), LogLimitExceeded> {
        let total = self.bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total > self.limits.bytes {
            return Err(LogLimitExceeded::Bytes(self.limits.bytes, total));
        }
        Ok(())
    }

    fn charge_line(&self) -> Result<(), LogLimitExceeded> {
        if self.lines.fetch_add(1, Ordering::Relaxed) >= self.limits.lines {
            return Err(LogLimitExceeded::Lines(self.limits.lines));
        }
        Ok(())
    }

    fn reset(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.lines.store(0, Ordering::Relaxed);
    }
}

/// One of an operator instance's output streams.
#[derive(Clone)]
pub struct GuestOutput {
    topology: Arc<str>,
    operator: Arc<str>,
    stream: &'static str,
    lines: Arc<Mutex<Lines>>,
    budget: Arc<Budget>,
}

#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
    recent: VecDeque<String>,
}

impl GuestOutput {
    /// The stdout and stderr of `topology`'s `operator`, which one call may
    /// write to within `limits`, both streams together.
    pub fn pair(topology: &str, operator: &str, limits: LogLimits) -> (GuestOutput, GuestOutput) {
        let budget = Arc::new(Budget { limits, ..Budget::default() });
        let stream = |stream| GuestOutput {
            topology: topology.into(),
            operator: operator.into(),
            stream,
            lines: Arc::default(),
            budget: Arc::clone(&budget),
        };
        (stream("stdout"), stream("stderr"))
    }

    fn write_bytes(&self, mut bytes: &[u8]) -> Result<(), LogLimitExceeded> {
        self.budget.charge_bytes(bytes.len())?;
        let mut lines = self.lines.locked();
        while !bytes.is_empty() {
            let room = MAX_LINE - lines.partial.len();
            let piece = &bytes[..bytes.len().min(room)];
            match memchr::memchr(b'\n', piece) {
                Some(newline) => {
                    lines.partial.extend_from_slice(&piece[..newline]);
                    bytes = &bytes[newline + 1..];
                    self.end_line(&mut lines)?;
                }
                None => {
                    lines.partial.extend_from_slice(piece);
                    bytes = &bytes[piece.len()..];
                    if lines.partial.len() == MAX_LINE {
                        self.end_line(&mut lines)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn end_line(&self, lines: &mut Lines) -> Result<(), LogLimitExceeded> {
        let charged = self.budget.charge_line();
        let line = String::from_utf8_lossy(&lines.partial).trim_end().to_owned();
        lines.partial.clear();
        charged?;
        tracing::info!(target: "weir::guest", "[{}] {}: {}", self.operator, self.stream, line);
        keep(
            &self.topology,
            GuestLine {
                operator: self.operator.to_string(),
                stream: self.stream,
                line: line.clone(),
                at_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
        );
        if lines.recent.len() == RECENT_LINES {
            lines.recent.pop_front();
        }
        lines.recent.push_back(line);
        Ok(())
    }

    /// The last lines written (an unfinished one included), oldest first,
    /// and forgets them: what a failure message quotes. The next call
    /// starts with the whole budget.
    pub fn take_recent(&self) -> Vec<String> {
        let mut lines = self.lines.locked();
        if !lines.partial.is_empty() {
            // Past the line limit the unfinished line is not logged: it
            // still ends the failure's message.
            let line = String::from_utf8_lossy(&lines.partial).trim_end().to_owned();
            if self.end_line(&mut lines).is_err() {
                if lines.recent.len() == RECENT_LINES {
                    lines.recent.pop_front();
                }
                lines.recent.push_back(line);
            }
        }
        self.budget.reset();
        lines.recent.drain(..).collect()
    }

    /// Forgets what was written, after a call: the next call starts with
    /// the whole budget.
    pub fn clear_recent(&self) {
        self.lines.locked().recent.clear();
        self.budget.reset();
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        // A trap, not a closed stream: a guest that ignores write errors
        // must not go on.
        self.write_bytes(&bytes).map_err(|hit| StreamError::Trap(hit.into()))
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.write_bytes(buf).map(|()| buf.len()).map_err(std::io::Error::other))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(bytes: u64, lines: u64) -> LogLimits {
        LogLimits { bytes, lines }
    }

    #[test]
    fn a_call_writes_within_its_budget_both_streams_together() {
        let (stdout, stderr) = GuestOutput::pair("budget-test", "op", limits(20, 100));
        stdout.write_bytes(b"0123456789\n").unwrap();
        assert_eq!(stderr.write_bytes(b"0123456789\n"), Err(LogLimitExceeded::Bytes(20, 22)));
        stdout.clear_recent();
        stderr.write_bytes(b"0123456789\n").unwrap();
        assert_eq!(stderr.take_recent(), ["0123456789"]);

        let (stdout, _) = GuestOutput::pair("budget-test", "op", limits(1 << 20, 2));
        let err = stdout.write_bytes(b"a\nb\nc\n").unwrap_err();
        assert_eq!(err, LogLimitExceeded::Lines(2));
        assert!(err.to_string().contains("log output limit of 2 lines per call exceeded"), "{err}");
        assert_eq!(stdout.take_recent(), ["a", "b"]);
    }

    #[test]
    fn a_line_without_an_end_is_logged_in_pieces() {
        let (stdout, _) = GuestOutput::pair("pieces-test", "op", limits(1 << 20, 100));
        stdout.write_bytes(&vec![b'x'; MAX_LINE * 2 + 5]).unwrap();
        let recent = stdout.take_recent();
        assert_eq!(recent.iter().map(String::len).collect::<Vec<_>>(), [MAX_LINE, MAX_LINE, 5]);
    }

    #[test]
    fn what_is_kept_is_bounded_in_lines_bytes_and_topologies() {
        let line = |n: usize| GuestLine { operator: "op".into(), stream: "stdout", line: "y".repeat(n), at_ms: 0 };
        for _ in 0..KEPT_PER_TOPOLOGY + 10 {
            keep("kept-lines", line(1));
        }
        assert_eq!(recent_lines("kept-lines").len(), KEPT_PER_TOPOLOGY);
        for _ in 0..200 {
            keep("kept-bytes", line(MAX_LINE));
        }
        let kept: usize = recent_lines("kept-bytes").iter().map(GuestLine::size).sum();
        assert!(kept <= KEPT_BYTES_PER_TOPOLOGY, "{kept} bytes kept");
        for n in 0..KEPT_TOPOLOGIES + 5 {
            keep(&format!("kept-many-{n}"), line(1));
        }
        let recent = RECENT.lock().unwrap();
        assert!(recent.topologies.len() <= KEPT_TOPOLOGIES);
        assert!(!recent.topologies.contains_key("kept-many-0"), "the topology that wrote longest ago goes first");
        assert!(recent.topologies.contains_key(&format!("kept-many-{}", KEPT_TOPOLOGIES + 4)));
    }
}
