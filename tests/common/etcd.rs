//! A real etcd for the tests: one member on free loopback ports, its data in
//! a directory of its own, started by the tests themselves and killed when
//! dropped (or when the test process ends, by a watchdog as for NATS).

use super::{Service, service_binary};
use std::process::Command;

/// A running etcd.
pub struct EtcdServer {
    /// Killed when dropped, before its directory goes.
    service: Service,
    dir: tempfile::TempDir,
    /// The loopback port clients reach it at.
    pub port: u16,
    peer: u16,
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl EtcdServer {
    pub fn start() -> EtcdServer {
        let mut etcd = EtcdServer {
            service: Service::default(),
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
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let mut command = Command::new(service_binary("WEIR_ETCD", "etcd", None, "etcd-server"));
        command
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--name", "test", "--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stderr(log_file);
        self.service.launch("etcd", &mut command, &log, "ready to serve client requests");
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        self.service.kill();
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
