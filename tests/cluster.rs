//! Cluster membership through a real etcd and separate `weir serve`
//! processes: hosts join and agree on one leader, a killed leader is
//! replaced, a host added mid-run joins, a host paused past its lease loses
//! its membership and rejoins, and bad cluster settings are refused.

mod common;

use common::etcd::EtcdServer;
use common::server::Server;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Short, so that losses show within seconds.
const LEASE_TTL_MS: &str = "2000";

fn host(dir: &Path, etcd: &EtcdServer, id: &str) -> Server {
    std::fs::create_dir_all(dir).unwrap();
    Server::start_with(
        dir,
        &["--cluster", "c1", "--etcd", &etcd.url(), "--host-id", id, "--lease-ttl-ms", LEASE_TTL_MS],
    )
}

fn view(server: &Server) -> Value {
    let (status, view) = server.api("GET", "/v1/cluster", b"");
    assert_eq!(status, 200, "{view}");
    view
}

fn ids(view: &Value) -> Vec<String> {
    view["hosts"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect()
}

fn all(hosts: &[(String, Server)]) -> Vec<&Server> {
    hosts.iter().map(|(_, server)| server).collect()
}

/// Waits until every server's view lists exactly `members` and names one
/// leader among them, the same for all; returns that leader.
fn agreed(servers: &[&Server], members: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<Value> = servers.iter().map(|s| view(s)).collect();
        let leaders: Vec<Option<&str>> = views.iter().map(|v| v["leader"].as_str()).collect();
        let settled = views.iter().all(|v| v["member"] == true && ids(v) == members)
            && leaders.iter().all(|l| l.is_some() && *l == leaders[0])
            && members.contains(&leaders[0].unwrap());
        if settled {
            return leaders[0].unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no agreement on {members:?} within 30 s: {views:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(server: &Server, signal: &str) {
    let status = std::process::Command::new("kill").args([signal, &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[test]
fn hosts_join_agree_on_a_leader_and_losses_are_seen() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut hosts: Vec<(String, Server)> =
        ["h1", "h2", "h3"].iter().map(|id| (id.to_string(), host(&dir.path().join(id), &etcd, id))).collect();
    let leader = agreed(&all(&hosts), &["h1", "h2", "h3"]);

    // The CLI shows the same.
    let shown = weir()
        .env("WEIR_TOKEN", common::server::TOKEN)
        .args(["cluster", "--server", &hosts[0].1.url()])
        .output()
        .unwrap();
    let shown_text = text(&shown);
    assert!(shown.status.success(), "{shown_text}");
    assert!(shown_text.contains("cluster c1"), "{shown_text}");
    let leader_line =
        shown_text.lines().find(|l| l.starts_with(leader.as_str())).unwrap_or_else(|| panic!("{shown_text}"));
    assert!(leader_line.contains("leader"), "{shown_text}");

    // The leader is killed: the others elect one of themselves.
    let at = hosts.iter().position(|(id, _)| *id == leader).unwrap();
    drop(hosts.remove(at));
    let rest: Vec<&str> = ["h1", "h2", "h3"].into_iter().filter(|id| *id != leader).collect();
    let second = agreed(&all(&hosts), &rest);
    assert_ne!(second, leader);

    // A host added mid-run joins.
    hosts.push(("h4".into(), host(&dir.path().join("h4"), &etcd, "h4")));
    let mut members = rest.clone();
    members.push("h4");
    assert_eq!(agreed(&all(&hosts), &members), second, "a host joining does not move the leader");

    // A member paused past its lease is dropped, and rejoins when it wakes.
    let (paused_id, paused) = hosts.iter().find(|(id, _)| *id != second).unwrap();
    signal(paused, "-STOP");
    let others: Vec<&Server> = hosts.iter().filter(|(id, _)| id != paused_id).map(|(_, s)| s).collect();
    let without: Vec<&str> = members.iter().copied().filter(|id| id != paused_id).collect();
    agreed(&others, &without);
    signal(paused, "-CONT");
    assert_eq!(agreed(&all(&hosts), &members), second);
}

#[test]
fn a_second_host_with_a_members_id_is_refused_membership() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let first = host(&dir.path().join("a"), &etcd, "same");
    agreed(&[&first], &["same"]);
    let second = host(&dir.path().join("b"), &etcd, "same");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = view(&second);
        if seen["error"].as_str().is_some_and(|e| e.contains("already a member")) {
            assert_eq!(seen["member"], false);
            break;
        }
        assert!(Instant::now() < deadline, "{seen}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first keeps its membership.
    agreed(&[&first], &["same"]);
}

#[test]
fn a_server_outside_a_cluster_says_so_and_bad_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alone = Server::start(dir.path());
    let (status, answer) = alone.api("GET", "/v1/cluster", b"");
    assert_eq!(status, 404);
    assert!(answer["error"].as_str().unwrap().contains("no cluster"), "{answer}");

    for (flags, named) in [
        (vec!["--cluster", "../up", "--etcd", "http://127.0.0.1:1"], "cluster name"),
        (vec!["--cluster", "c1", "--etcd", "http://127.0.0.1:1", "--host-id", "a/b"], "host id"),
        (vec!["--cluster", "c1", "--etcd", "127.0.0.1:1"], "--etcd"),
    ] {
        let data = dir.path().join("refused");
        let mut args = vec!["serve", "--data", data.to_str().unwrap(), "--listen", "127.0.0.1:0"];
        args.extend(flags);
        let refused = weir_bounded(&args, Duration::from_secs(30));
        assert!(!refused.output.status.success(), "{:?}", args);
        assert!(text(&refused.output).contains(named), "{}", text(&refused.output));
    }

    // etcd unreachable: the server runs and says why it is no member.
    std::fs::create_dir_all(dir.path().join("cut-off")).unwrap();
    let cut_off = Server::start_with(
        &dir.path().join("cut-off"),
        &["--cluster", "c1", "--etcd", "http://127.0.0.1:1", "--host-id", "lonely", "--lease-ttl-ms", "1000"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = view(&cut_off);
        if seen["error"]
            .as_str()
            .is_some_and(|e| e.contains("etcd at http://127.0.0.1:1") && e.contains("Connection refused"))
        {
            assert_eq!(seen["member"], false);
            break;
        }
        assert!(Instant::now() < deadline, "{seen}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
