//! A real `weir serve` for the tests: started on a free loopback port, talked
//! to over plain HTTP/1.1, killed when dropped.

use super::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The token every test server is started with.
pub const TOKEN: &str = "s3cret-token";

/// A running `weir serve`.
pub struct Server {
    /// The server process.
    pub child: Child,
    /// host:port it listens on.
    pub address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `weir serve` in `dir` (data in `dir/data`, inputs under
    /// `dir/in`, the token in `dir/token`), with `extra` arguments, which
    /// may replace the tests' usual upload limit, poll interval and batch size.
    pub fn start_with(dir: &Path, extra: &[&str]) -> Server {
        Server::start_with_token(dir, extra, None)
    }

    /// [`Server::start_with`], the process allowed `files` open files (soft
    /// and hard limit).
    pub fn start_with_open_files(dir: &Path, files: u64, extra: &[&str]) -> Server {
        Server::start_with_token(dir, extra, Some(files))
    }

    fn start_with_token(dir: &Path, extra: &[&str], open_files: Option<u64>) -> Server {
        std::fs::write(dir.join("token"), TOKEN).unwrap();
        Server::spawn(dir, &[&["--token-file", "token"], extra].concat(), open_files)
    }

    /// Starts `weir serve` in `dir` as [`Server::start`] does, but with no
    /// token.
    pub fn start_without_token(dir: &Path) -> Server {
        Server::spawn(dir, &[], None)
    }

    fn spawn(dir: &Path, extra: &[&str], open_files: Option<u64>) -> Server {
        std::fs::create_dir_all(dir.join("in")).unwrap();
        let mut command = weir();
        if let Some(files) = open_files {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit { rlim_cur: files, rlim_max: files };
            // SAFETY: setrlimit is async-signal-safe; `limit` is a copy.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = command
            .current_dir(dir)
            .args(["serve", "--data", "data", "--listen", "127.0.0.1:0", "--input-dir", "in"])
            .args(
                [("--max-upload-mib", "1"), ("--poll-ms", "50"), ("--batch-size", "1000")]
                    .into_iter()
                    .filter(|(flag, _)| !extra.contains(flag))
                    .flat_map(|(flag, value)| [flag, value]),
            )
            .args(extra)
            .stdout(Stdio::piped())
            // Kept in the server's directory for a failing test to show.
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(dir.join("weir.log")).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let address =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected: {line:?}")).to_owned();
        Server { child, address }
    }

    /// Starts `weir serve` in `dir` with the tests' usual settings.
    pub fn start(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    /// The server's base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// One HTTP/1.1 request; returns the status and the body.
    pub fn http(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
        let authorization = token.map(|token| format!("Bearer {token}"));
        let headers: Vec<(&str, &str)> = authorization.iter().map(|a| ("Authorization", a.as_str())).collect();
        self.request(method, path, &headers, body)
    }

    /// One HTTP/1.1 request with `headers` (a Host header among them
    /// replaces the server's own); returns the status and the body.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        let (status, _, body) = self.exchange(method, path, headers, body);
        (status, body)
    }

    /// One HTTP/1.1 request, as [`Server::request`] sends it; returns the
    /// status, the response's headers (names in lower case) and the body.
    pub fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, BTreeMap<String, String>, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
            request.push_str(&format!("Host: {}\r\n", self.address));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        // The server may answer (413) before reading the whole body.
        let _ = stream.write_all(body);
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let response = String::from_utf8_lossy(&response).into_owned();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {response:?}"));
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let headers = head
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        (status, headers, body.to_owned())
    }

    /// An API call with the token; the body parsed as JSON (null if it is not).
    pub fn api(&self, method: &str, path: &str, body: &[u8]) -> (u16, serde_json::Value) {
        let (status, body) = self.http(method, path, Some(TOKEN), body);
        (status, serde_json::from_str(&body).unwrap_or(serde_json::Value::Null))
    }

    /// How many of the server's threads have a name beginning with `prefix`
    /// (Linux keeps the first 15 bytes of a name; a thread a named one
    /// starts without a name of its own bears its name too).
    pub fn threads_named(&self, prefix: &str) -> usize {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap();
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim_end().starts_with(prefix))
            .count()
    }

    /// Waits until `topology` has committed `txid`; fails if it fails.
    pub fn wait_for_topology(&self, topology: &str, txid: u64) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, body) = self.api("GET", &format!("/v1/topologies/{}", escape(topology)), b"");
            assert_eq!(status, 200, "{body}");
            if body["last_committed"].as_u64() == Some(txid) {
                return body;
            }
            assert!(body["state"] != "failed", "{body}");
            assert!(Instant::now() < deadline, "txid {txid} of {topology} was not committed: {body}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asserts that served `topology`, whose last status is `status`, is
    /// running and caught up: each of `partitions` at lag 0 in its status,
    /// and the topology's lag and its last partition's 0 in `/metrics`.
    pub fn assert_caught_up(&self, topology: &str, status: &serde_json::Value, partitions: &[String]) {
        assert_eq!(status["state"], "running", "{status}");
        let zero: serde_json::Value = partitions.iter().map(|p| (p.clone(), serde_json::json!(0))).collect();
        assert_eq!(status["spout_lag_partitions"], zero, "{status}");
        let (code, metrics) = self.http("GET", "/metrics", None, b"");
        assert_eq!(code, 200, "{metrics}");
        assert!(metrics.contains(&format!("weir_spout_lag{{topology=\"{topology}\"}} 0\n")), "{metrics}");
        let last = partitions.last().expect("a partition");
        let partition = format!("weir_spout_partition_lag{{topology=\"{topology}\",partition=\"{last}\"}} 0\n");
        assert!(metrics.contains(&partition), "{metrics}");
    }

    /// Waits until `topology`'s status satisfies `done`, and returns it.
    pub fn wait_for_status(&self, topology: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, body) = self.api("GET", &format!("/v1/topologies/{}", escape(topology)), b"");
            assert_eq!(status, 200, "{body}");
            if done(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "{topology} did not reach the expected status: {body}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A word-count state read back through the API as word => count.
    pub fn counts(&self, topology: &str) -> BTreeMap<String, i64> {
        let (status, body) = self.api("GET", &format!("/v1/topologies/{}/states/counts", escape(topology)), b"");
        assert_eq!(status, 200, "{body}");
        body.as_array()
            .unwrap()
            .iter()
            .map(|e| (e["key"][0].as_str().unwrap().to_owned(), e["value"].as_i64().unwrap()))
            .collect()
    }

    /// Deploys the word count (as `word-count`) over the 20,000-sentence
    /// corpus: the sibling a hostile deployment must not disturb. `dir` is
    /// the server's directory.
    pub fn deploy_word_count(&self, dir: &Path) {
        std::fs::copy(&corpus_20k().path, dir.join("in/corpus.txt")).unwrap();
        let bundle = bundle(dir, WORD_COUNT, "wc.weir");
        let (status, body) = self.api("POST", "/v1/topologies?input=in/corpus.txt", &bundle);
        assert_eq!(status, 201, "{body}");
    }

    /// Asserts the word count deployed by [`Server::deploy_word_count`]
    /// commits all of its input and ends with exact counts.
    pub fn assert_word_count_exact(&self) {
        self.wait_for_topology("word-count", 20);
        assert_counts_eq(&self.counts("word-count"), &corpus_20k().truth);
    }
}

/// Bundles `component` into `dir/name` and returns the bundle's bytes.
pub fn bundle(dir: &Path, component: &str, name: &str) -> Vec<u8> {
    let path = dir.join(name);
    weir_ok(&["bundle", component, "-o", path.to_str().unwrap()]);
    std::fs::read(path).unwrap()
}

/// `segment` percent-encoded for a URL's path or query: every byte but
/// RFC 3986's unreserved ones.
pub fn escape(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
