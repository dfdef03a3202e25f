//! Killing `weir run` with SIGKILL at chosen moments, as the chaos tests
//! and the JetStream tests do.

use super::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

/// A small seeded generator: the kill points are the same on every run.
pub struct Lcg(pub u64);

impl Lcg {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Runs `args` until the log shows `txid` committed, waits `delay`, and
/// kills the process. Returns the run's log if it was not killed mid-run.
pub fn kill_after(args: &[&str], txid: u64, delay: Duration) -> Result<(), String> {
    let mut child =
        weir().env("WEIR_LOG", "weir=debug").args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let marker = format!("committed txid {txid} ");
    // The pipe stays open until the process is killed: it must die of the
    // kill, not of a closed stderr.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    let mut reached = false;
    for line in lines.by_ref() {
        let line = line.unwrap();
        reached = line.contains(&marker);
        log.push(line);
        if reached {
            break;
        }
    }
    std::thread::sleep(delay);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    drop(lines);
    if reached && status.code().is_none() {
        Ok(())
    } else {
        let tail = log.len().saturating_sub(10);
        Err(log[tail..].join("\n"))
    }
}
