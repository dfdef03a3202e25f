//! A guest's stdout and stderr, written line by line into the host log with
//! the operator's name in front.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line kept before it is logged in pieces.
const MAX_LINE: usize = 16 * 1024;
/// Lines kept to explain a failure (a panic message spans a few).
const RECENT_LINES: usize = 8;

/// Lines kept per topology for `recent_lines` (the server's logs call).
const KEPT_PER_TOPOLOGY: usize = 1000;

/// A line a guest wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GuestLine {
    /// The operator whose instance wrote it.
    pub operator: String,
    /// stdout or stderr.
    pub stream: &'static str,
    /// The line.
    pub line: String,
}

static RECENT: Mutex<BTreeMap<String, VecDeque<GuestLine>>> = Mutex::new(BTreeMap::new());

/// The last lines `topology`'s guests wrote, most recent first.
pub fn recent_lines(topology: &str) -> Vec<GuestLine> {
    let recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    recent.get(topology).map(|lines| lines.iter().rev().cloned().collect()).unwrap_or_default()
}

fn keep(topology: &str, line: GuestLine) {
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    let lines = recent.entry(topology.to_owned()).or_default();
    if lines.len() == KEPT_PER_TOPOLOGY {
        lines.pop_front();
    }
    lines.push_back(line);
}

/// One of an operator instance's output streams.
#[derive(Clone)]
pub struct GuestOutput {
    topology: Arc<str>,
    operator: Arc<str>,
    stream: &'static str,
    lines: Arc<Mutex<Lines>>,
}

#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
    recent: VecDeque<String>,
}

impl GuestOutput {
    /// The stream named `stream` ("stdout" or "stderr") of `topology`'s `operator`.
    pub fn new(topology: &str, operator: &str, stream: &'static str) -> GuestOutput {
        GuestOutput { topology: topology.into(), operator: operator.into(), stream, lines: Arc::default() }
    }

    fn write_bytes(&self, mut bytes: &[u8]) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(newline) = bytes.iter().position(|&b| b == b'\n') {
            lines.partial.extend_from_slice(&bytes[..newline]);
            self.end_line(&mut lines);
            bytes = &bytes[newline + 1..];
        }
        lines.partial.extend_from_slice(bytes);
        if lines.partial.len() > MAX_LINE {
            self.end_line(&mut lines);
        }
    }

    fn end_line(&self, lines: &mut Lines) {
        let line = String::from_utf8_lossy(&lines.partial).trim_end().to_owned();
        lines.partial.clear();
        tracing::info!(target: "weir::guest", "[{}] {}: {}", self.operator, self.stream, line);
        keep(
            &self.topology,
            GuestLine { operator: self.operator.to_string(), stream: self.stream, line: line.clone() },
        );
        if lines.recent.len() == RECENT_LINES {
            lines.recent.pop_front();
        }
        lines.recent.push_back(line);
    }

    /// The last lines written (an unfinished one included), oldest first,
    /// and forgets them: what a failure message quotes.
    pub fn take_recent(&self) -> Vec<String> {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if !lines.partial.is_empty() {
            self.end_line(&mut lines);
        }
        lines.recent.drain(..).collect()
    }

    /// Forgets what was written, after a call that succeeded.
    pub fn clear_recent(&self) {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).recent.clear();
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
        self.write_bytes(&bytes);
        Ok(())
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
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
