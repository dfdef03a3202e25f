//! Killing `weir run` at exact moments of its commit path and restarting
//! it, as the chaos, word count, example and JetStream tests do: the host
//! kills itself with SIGKILL at the fault point `WEIR_FAULT` names, so no
//! test waits on a log line or a timer.

use super::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

pub use weir_config::fault::{Fault, Point};

/// SIGKILL's number on Linux.
const SIGKILL: i32 = 9;

/// The longest a run may take to reach its fault point.
const KILL_LIMIT: Duration = Duration::from_secs(300);

/// A small seeded generator: the kill moments are the same on every run.
pub struct Lcg(pub u64);

impl Lcg {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The first and last txid of the group a run's log says it was killed in.
pub fn killed_in_group(log: &str) -> Option<(u64, u64)> {
    let (_, group) = log.split_once("inside the commit of txids ")?;
    let (first, rest) = group.split_once("..=")?;
    let last: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// One `weir run` of one topology into one data dir, killed and restarted.
pub struct Restarts<'a> {
    args: Vec<&'a str>,
    data: &'a Path,
    topology: &'a str,
    /// Where each kill landed, in order.
    pub kills: Vec<Fault>,
}

impl<'a> Restarts<'a> {
    /// Runs of `weir` with `args`, which keep topology `topology` in `data`.
    pub fn new(args: Vec<&'a str>, data: &'a Path, topology: &'a str) -> Restarts<'a> {
        Restarts { args, data, topology, kills: Vec::new() }
    }

    /// The topology's last committed txid.
    pub fn last_committed(&self) -> u64 {
        last_committed(self.data, self.topology)
    }

    /// Runs until batch `txid` reaches `point`, where the host kills itself,
    /// and asserts that it died there with exactly the batches before the
    /// point committed.
    pub fn kill_at(&mut self, point: Point, txid: u64) {
        let before = self.last_committed();
        let fault = Fault { point, txid };
        let mut command = weir();
        command.env(weir_config::FAULT_ENV, fault.to_string()).args(&self.args);
        let output = run_bounded(&mut command, KILL_LIMIT).output;
        let topology = self.topology;
        if output.status.signal() != Some(SIGKILL) {
            let log = text(&output);
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(10)..].join("\n");
            panic!("{topology}: the run was not killed at {fault} ({}):\n{tail}", output.status);
        }
        let after = self.last_committed();
        match point {
            // Its result may wait while earlier batches commit.
            Point::AfterProcess => {
                assert!((before..txid).contains(&after), "{topology}: killed at {fault}, txid {after} is committed")
            }
            Point::BeforeCommit => assert_eq!(after, txid - 1, "{topology}: killed at {fault}"),
            Point::AfterCommit => assert_eq!(after, txid, "{topology}: killed at {fault}"),
            // Acknowledgements are awaited in flight: later batches may
            // have committed meanwhile.
            Point::AfterPublish => assert!(after >= txid, "{topology}: killed at {fault}, txid {after} committed"),
            // Nothing of the group it died in is committed.
            Point::InGroupCommit => {
                let (first, last) = killed_in_group(&text(&output))
                    .unwrap_or_else(|| panic!("{topology}: killed at {fault}, no group named"));
                assert!(first < last && last >= txid, "{topology}: killed at {fault} in txids {first}..={last}");
                assert_eq!(after, first - 1, "{topology}: killed at {fault} in txids {first}..={last}");
            }
        }
        self.kills.push(fault);
    }

    /// Kills the run `kills` times, each at a point and a txid up to `span`
    /// past the last commit drawn from `seed`.
    pub fn kill_seeded(&mut self, seed: u64, kills: usize, span: u64) {
        let mut rng = Lcg(seed);
        for _ in 0..kills {
            let point = Point::ALL[rng.below(Point::ALL.len() as u64) as usize];
            let txid = self.last_committed() + 1 + rng.below(span);
            self.kill_at(point, txid);
        }
    }

    /// Runs until the log shows batch `txid` committed, waits `delay` and
    /// kills the run from outside: unlike a fault point, the kill may land
    /// anywhere, inside a later commit's write too.
    pub fn kill_timed(&mut self, txid: u64, delay: Duration) {
        let before = self.last_committed();
        let mut child = weir()
            .env("WEIR_LOG", "weir=debug")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let marker = format!("committed txid {txid} ");
        let (reached_tx, reached) = std::sync::mpsc::channel();
        // The reader keeps the pipe open until the kill: the run must die of
        // the kill, not of a closed stderr.
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut tail = std::collections::VecDeque::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(&marker) {
                    let _ = reached_tx.send(());
                }
                if tail.len() == 10 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            Vec::from(tail).join("\n")
        });
        let reached = reached.recv_timeout(KILL_LIMIT).is_ok();
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().unwrap();
        let log = reader.join().unwrap();
        let topology = self.topology;
        assert!(reached && status.signal() == Some(SIGKILL), "{topology}: not killed after txid {txid}:\n{log}");
        let after = self.last_committed();
        assert!(after >= txid.max(before), "{topology}: killed after txid {txid}, txid {after} is committed");
    }

    /// Kills the run `kills` times, each a delay of up to `max_delay` after
    /// a commit up to `span` past the last one, all drawn from `seed`.
    pub fn kill_timed_seeded(&mut self, seed: u64, kills: usize, span: u64, max_delay: Duration) {
        let mut rng = Lcg(seed);
        for _ in 0..kills {
            let txid = self.last_committed() + 1 + rng.below(span);
            let delay = Duration::from_micros(rng.below(max_delay.as_micros() as u64 + 1));
            self.kill_timed(txid, delay);
        }
    }

    /// Whether some kill landed at `point`.
    pub fn killed_at(&self, point: Point) -> bool {
        self.kills.iter().any(|kill| kill.point == point)
    }

    /// Where the kills landed, as `WEIR_FAULT` names them.
    pub fn moments(&self) -> String {
        self.kills.iter().map(Fault::to_string).collect::<Vec<_>>().join(", ")
    }

    /// Runs to the end, which must succeed.
    pub fn finish(&self) -> Output {
        weir_ok(&self.args)
    }
}
