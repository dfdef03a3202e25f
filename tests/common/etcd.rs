//! A real etcd for the tests: one member on free loopback ports, its data in
//! a directory of its own, started by the tests themselves and killed when
//! dropped (or when the test process ends, by a watchdog as for NATS).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running etcd.
pub struct EtcdServer {
    server: Child,
    watchdog: Child,
    _dir: tempfile::TempDir,
    /// The loopback port clients reach it at.
    pub port: u16,
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        let _ = self.server.kill();
        let _ = self.server.wait();
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
        let dir = tempfile::tempdir().unwrap();
        let (port, peer) = (free_port(), free_port());
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer}");
        let log = dir.path().join("etcd.log");
        let mut server = Command::new(binary())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--name", "test", "--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start etcd");
        let watchdog = super::watchdog(server.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("ready to serve client requests") {
                break;
            }
            if let Some(status) = server.try_wait().unwrap() {
                panic!("etcd exited ({status}) before it was ready:\n{text}");
            }
            assert!(Instant::now() < deadline, "etcd was not ready within 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
        EtcdServer { server, watchdog, _dir: dir, port }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
