//! A real etcd for the tests: one member on free loopback ports, its data in
//! a directory of its own, started by the tests themselves and killed when
//! dropped (or when the test process ends, by a watchdog as for NATS).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running etcd.
pub struct EtcdServer {
    server: Option<Child>,
    watchdog: Option<Child>,
    dir: tempfile::TempDir,
    /// The loopback port clients reach it at.
    pub port: u16,
    peer: u16,
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WEIR_ETCD") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("etcd")).find(|p| p.is_file()))
        .unwrap_or_else(|| {
            panic!(
                "etcd is not installed: run scripts/ensure-services (Debian: apt-get install etcd-server), \
                 or set WEIR_ETCD to its path"
            )
        })
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl EtcdServer {
    pub fn start() -> EtcdServer {
        let mut etcd = EtcdServer {
            server: None,
            watchdog: None,
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            peer: free_port(),
        };
        etcd.launch();
        etcd
    }

    /// Starts the server process over its data, on its ports, and waits
    /// until it serves.
    fn launch(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let log = self.dir.path().join("etcd.log");
        let log_before = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let server = Command::new(binary())
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--name", "test", "--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start etcd");
        self.watchdog = Some(super::watchdog(server.id()));
        self.server = Some(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let text = text.get(log_before..).unwrap_or_default();
            if text.contains("ready to serve client requests") {
                break;
            }
            if let Some(status) = self.server.as_mut().unwrap().try_wait().unwrap() {
                panic!("etcd exited ({status}) before it was ready:\n{text}");
            }
            assert!(Instant::now() < deadline, "etcd was not ready within 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        super::kill_service(&mut self.server, &mut self.watchdog);
    }

    /// Starts the killed server again, on its ports, over its data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
