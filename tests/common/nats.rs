//! A real `nats-server` for the tests: JetStream with file storage, on a
//! free loopback port, started by the tests themselves. A guard's drop
//! kills it; so does the end of the test process, however it ends (a
//! watchdog shell waits on a pipe that only this process holds open), so
//! the server a test binary shares does not outlive the binary.

use super::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server`.
pub struct NatsServer {
    /// Killed when dropped, before its directory goes.
    service: Service,
    dir: tempfile::TempDir,
    /// The loopback port it listens on.
    pub port: u16,
    extra: Vec<String>,
}

impl NatsServer {
    /// Starts a server of its own (for tests that stop, restart or
    /// configure it), with `extra` arguments.
    pub fn start_with(extra: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().unwrap();
        let extra = extra.iter().map(|a| (*a).to_owned()).collect();
        let mut server = NatsServer { service: Service::default(), dir, port: 0, extra };
        server.launch();
        server
    }

    /// Starts a server of its own.
    pub fn start() -> NatsServer {
        NatsServer::start_with(&[])
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("nats.log")
    }

    /// Starts the server process (on the port it had, if it had one) and
    /// waits until it is ready.
    fn launch(&mut self) {
        let port = if self.port == 0 { "-1".to_owned() } else { self.port.to_string() };
        let store = self.dir.path().join("store");
        let binary = nats_server_binary();
        let mut command = Command::new(binary);
        command
            .args(["-js", "-sd"])
            .arg(&store)
            .args(["-a", "127.0.0.1", "-p", &port, "-l"])
            .arg(self.log())
            .args(&self.extra)
            .stderr(Stdio::null());
        let log = self.service.launch("nats-server", &mut command, &self.log(), "Server is ready");
        if self.port == 0 {
            let marker = "Listening for client connections on 127.0.0.1:";
            let at = log.find(marker).unwrap_or_else(|| panic!("no client port in the log:\n{log}"));
            let digits: String = log[at + marker.len()..].chars().take_while(char::is_ascii_digit).collect();
            self.port = digits.parse().unwrap();
        }
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        self.service.kill();
    }

    /// Starts the killed server again, on its port, over its store.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Kills the server under a run that `log` follows, waits for the run
    /// to say it lost the server, and starts it again 1.5 s later.
    pub fn crash_under(&mut self, log: &mut LogReader) {
        self.kill();
        log.until("lost the NATS server at");
        std::thread::sleep(Duration::from_millis(1500));
        self.restart();
    }

    /// Publishes `lines` into `stream` (created when missing) over the
    /// subjects `subjects` (braces expand), through `weir publish`.
    pub fn publish<S: AsRef<str>>(&self, stream: &str, subjects: &str, lines: &[S]) -> String {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), lines.iter().map(|l| format!("{}\n", l.as_ref())).collect::<String>()).unwrap();
        self.publish_file(stream, subjects, file.path())
    }

    /// Publishes the lines of `file` into `stream` over `subjects`.
    pub fn publish_file(&self, stream: &str, subjects: &str, file: &Path) -> String {
        let url = self.url();
        let args = ["publish", "--nats", &url, "--stream", stream, "--subjects", subjects, "--create"];
        text(&weir_ok(&[&args[..], &[file.to_str().unwrap()]].concat()))
    }

    /// Creates `stream`, taking `subjects` (wildcards too).
    pub fn create_stream(&self, stream: &str, subjects: &[&str]) {
        let nats = weir_io::nats::Nats::connect(&self.config(), "test").unwrap();
        let config = async_nats::jetstream::stream::Config {
            name: stream.to_owned(),
            subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        };
        nats.runtime.block_on(nats.jetstream.create_stream(config)).unwrap();
    }

    /// How many messages each subject of `stream` holds.
    pub fn subject_counts(&self, stream: &str) -> std::collections::BTreeMap<String, usize> {
        use futures_util::TryStreamExt;
        let nats = weir_io::nats::Nats::connect(&self.config(), "test").unwrap();
        nats.runtime.block_on(async {
            let stream = nats.jetstream.get_stream(stream).await.unwrap();
            stream.info_with_subjects(">").await.unwrap().try_collect().await.unwrap()
        })
    }

    /// Deletes the message of `stream` at `sequence`.
    pub fn delete_message(&self, stream: &str, sequence: u64) {
        let nats = weir_io::nats::Nats::connect(&self.config(), "test").unwrap();
        nats.runtime.block_on(async {
            let stream = nats.jetstream.get_stream(stream).await.unwrap();
            assert!(stream.delete_message(sequence).await.unwrap(), "no message {sequence} to delete");
        });
    }

    /// Every message `stream` holds, in stream order: its `Nats-Msg-Id`
    /// header (empty without one) and its payload.
    pub fn messages(&self, stream: &str) -> Vec<(String, Vec<u8>)> {
        let nats = weir_io::nats::Nats::connect(&self.config(), "test").unwrap();
        nats.runtime.block_on(async {
            let mut stream = nats.jetstream.get_stream(stream).await.unwrap();
            let state = stream.info().await.unwrap().state.clone();
            let mut out = Vec::new();
            if state.messages == 0 {
                return out;
            }
            for sequence in state.first_sequence..=state.last_sequence {
                let message = stream.get_raw_message(sequence).await.unwrap();
                let id = message.headers.get("Nats-Msg-Id").map(|id| id.to_string()).unwrap_or_default();
                out.push((id, message.payload.to_vec()));
            }
            out
        })
    }

    /// Removes every message of `stream`.
    pub fn purge(&self, stream: &str) {
        let config = self.config();
        let nats = weir_io::nats::Nats::connect(&config, "test").unwrap();
        nats.runtime.block_on(async {
            let stream = nats.jetstream.get_stream(stream).await.unwrap();
            stream.purge().await.unwrap();
        });
    }

    /// How the tests' host code reaches this server.
    pub fn config(&self) -> weir_io::nats::NatsConfig {
        weir_io::nats::NatsConfig { url: self.url(), token: None, retry_for: Duration::from_secs(10) }
    }
}

static NATS: SharedLog<NatsServer> = SharedLog::new(NatsServer::start);

/// The server this test binary's tests share, each with streams of its own.
pub fn shared_nats() -> &'static NatsServer {
    NATS.log()
}

/// The canonical corpus of 50,000 sentences, published once per test
/// binary into the shared server's stream `corpus`, over the subjects
/// corpus.0 to corpus.3, round-robin.
pub fn corpus_stream() -> &'static Corpus {
    NATS.corpus(|nats, corpus| {
        let published = nats.publish_file("corpus", "corpus.{0..3}", &corpus.path);
        assert!(published.contains("published 50000 lines to stream corpus over 4 subjects"), "{published}");
    })
}

/// Reads `child`'s stderr on a thread of its own, line by line; `until`
/// waits for a line holding some text, bounded.
pub struct LogReader {
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl LogReader {
    /// Starts `weir` with `args`, its log filtered by `filter` (a
    /// `WEIR_LOG` value), and follows that log.
    pub fn start(args: &[impl AsRef<std::ffi::OsStr>], filter: &str) -> (Child, LogReader) {
        let mut command = weir();
        command.env("WEIR_LOG", filter).args(args).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let log = LogReader::follow(&mut child);
        (child, log)
    }

    /// Follows the stderr of `child`, which must be piped.
    pub fn follow(child: &mut Child) -> LogReader {
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        LogReader { lines, seen: Vec::new() }
    }

    /// Waits up to two minutes for a line holding `text`.
    pub fn until(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("no line holding {text:?} within two minutes:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Waits up to two minutes for `child`, whose log this follows, to
    /// exit: how it exited, and its whole log.
    pub fn finish(&mut self, child: &mut Child) -> (std::process::ExitStatus, String) {
        let status = wait_for_exit(child);
        (status, self.rest())
    }

    /// Every line until the process closes its stderr (bounded).
    pub fn rest(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

/// Waits up to two minutes for `child` to exit.
pub fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within two minutes");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The nats-server the tests run: `WEIR_NATS_SERVER`, else the release
/// `scripts/ensure-services` installs into its tools dir (2.15.1), else one on
/// the PATH or where Debian puts it.
pub fn nats_server_binary() -> PathBuf {
    let installed = super::tools_dir().join("nats-server-2.15.1/bin/nats-server");
    if std::env::var_os("WEIR_NATS_SERVER").is_none() && installed.is_file() {
        return installed;
    }
    service_binary("WEIR_NATS_SERVER", "nats-server", Some("/usr/sbin/nats-server"), "nats-server")
}

/// Checks the output a log sink (JetStream, Kafka) wrote of page counts,
/// each record its batch's txid, its place in the batch and a JSON
/// `{"page", "count"}`: see [`assert_output_once_by`].
pub fn assert_output_once<'a>(
    written: impl IntoIterator<Item = (u64, u32, &'a [u8])>,
    last: u64,
    truth: &std::collections::BTreeMap<String, i64>,
) {
    assert_output_once_by("page", written, last, truth);
}

/// Checks the output a log sink wrote of counts by `key`, each record its
/// batch's txid, its place in the batch and a JSON `{key, "count"}`: each
/// committed batch's output is there once and only once (every txid from 1
/// to `last`, each with records 0..k and no other), and each key's counts
/// rise batch by batch to its count in `truth`.
pub fn assert_output_once_by<'a>(
    key: &str,
    written: impl IntoIterator<Item = (u64, u32, &'a [u8])>,
    last: u64,
    truth: &std::collections::BTreeMap<String, i64>,
) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut ids = BTreeSet::new();
    let mut per_batch: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    let mut per_key: BTreeMap<String, Vec<(u64, i64)>> = BTreeMap::new();
    for (txid, n, payload) in written {
        assert!(ids.insert((txid, n)), "txid {txid} record {n} is written twice");
        per_batch.entry(txid).or_default().push(n);
        let json: serde_json::Value = serde_json::from_slice(payload).unwrap();
        let value = json[key].as_str().unwrap().to_owned();
        per_key.entry(value).or_default().push((txid, json["count"].as_i64().unwrap()));
    }
    let txids: Vec<u64> = per_batch.keys().copied().collect();
    assert_eq!(txids, (1..=last).collect::<Vec<_>>(), "the output holds other batches than the committed ones");
    for (txid, mut ns) in per_batch {
        ns.sort();
        assert_eq!(ns, (0..ns.len() as u32).collect::<Vec<_>>(), "txid {txid}'s records");
    }
    let mut seen = BTreeMap::new();
    for (value, mut updates) in per_key {
        updates.sort();
        assert!(updates.windows(2).all(|w| w[0].1 < w[1].1), "{key} {value}: counts do not rise: {updates:?}");
        seen.insert(value, updates.last().unwrap().1);
    }
    assert_counts_eq(&seen, truth);
}

/// Whether a served topology's status names `partitions` partitions of
/// its log spout; asserts its lag is theirs added up.
pub fn lag_adds_up(status: &serde_json::Value, partitions: usize) -> bool {
    let by_partition = status["spout_lag_partitions"].as_object().unwrap_or_else(|| panic!("{status}"));
    let sum: u64 = by_partition.values().map(|n| n.as_u64().unwrap()).sum();
    assert!(status["spout_lag"].is_null() || status["spout_lag"] == sum, "{status}");
    by_partition.len() == partitions
}
