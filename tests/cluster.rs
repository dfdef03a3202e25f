//! Cluster membership through a real etcd and separate `weir serve`
//! processes: hosts join and agree on one leader, a killed leader is
//! replaced, a host added mid-run joins, a host paused past its lease loses
//! its membership and rejoins, and bad cluster settings are refused; a
//! topology deployed through any host is assigned over the live hosts (a
//! real nats-server holding its bundle), and its units follow them; a
//! slot's changelog rebuilds it, passing over a fenced host's records; the
//! commit log in etcd commits in txid order and only while its writer leads;
//! a word count served by several hosts counts exactly, answers alike on
//! every host, and stays exact through a host added mid-run and through a
//! seeded run of host kills and pauses and etcd and nats-server restarts;
//! the dashboard's cluster page, in a real browser, shows every host, the
//! leader and each host's share; a topology the partitioned mode cannot run
//! (every kind of commit-phase operator, sinks, spouts other than
//! JetStream) is placed whole on one host and answers through every host as
//! it does on one, through its owner killed, restarted and paused, and in
//! the seeded chaos run.

mod common;

use common::etcd::EtcdServer;
use common::nats::NatsServer;
use common::server::{Server, bundle};
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};
use weir_cluster::changelog::{Changelog, Rebuilt, SlotWrites};
use weir_cluster::commit_log::EtcdCommitLog;
use weir_state::store::CommitLog;
use weir_state::{BatchRecord, Progress};

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

/// What `weir cluster --server` prints of `server`, having succeeded.
fn weir_cluster(server: &Server) -> String {
    text(&weir_against_output(server, &["cluster"]))
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

/// Waits up to 30 s until `server`'s view has an error for which `why`
/// holds, and asserts that it is no member.
fn refused_membership(server: &Server, why: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = view(server);
        if seen["error"].as_str().is_some_and(&why) {
            assert_eq!(seen["member"], false);
            return;
        }
        assert!(Instant::now() < deadline, "{seen}");
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

    // Members keep their membership, the leader's and the others' alike,
    // over several lease times: none leaves and joins again.
    let joined = |server: &Server| -> Vec<Value> {
        view(server)["hosts"].as_array().unwrap().iter().map(|m| m["joined_unix_ms"].clone()).collect()
    };
    let first = joined(&hosts[0].1);
    std::thread::sleep(Duration::from_millis(3 * LEASE_TTL_MS.parse::<u64>().unwrap()));
    assert_eq!(joined(&hosts[0].1), first, "a member joined again: its membership lapsed");

    // Deploying needs JetStream, which keeps the cluster's bundles.
    let (status, refused) = hosts[0].1.api("POST", "/v1/topologies", b"not a bundle");
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("without --nats"), "{refused}");

    // The CLI shows the same.
    let shown_text = weir_cluster(&hosts[0].1);
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
    refused_membership(&second, |e| e.contains("already a member"));
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
    refused_membership(&cut_off, |e| e.contains("etcd at http://127.0.0.1:1") && e.contains("Connection refused"));
}

/// A host of cluster `c1` that keeps the cluster's bundles in `nats`.
fn host_with_nats(dir: &Path, etcd: &EtcdServer, nats: &NatsServer, id: &str) -> Server {
    host_with_nats_and(dir, etcd, nats, id, &[])
}

/// [`host_with_nats`], with `extra` arguments.
fn host_with_nats_and(dir: &Path, etcd: &EtcdServer, nats: &NatsServer, id: &str, extra: &[&str]) -> Server {
    host_leasing(dir, etcd, nats, id, LEASE_TTL_MS, extra)
}

/// [`host_with_nats_and`], its lease living `lease_ms`.
fn host_leasing(dir: &Path, etcd: &EtcdServer, nats: &NatsServer, id: &str, lease_ms: &str, extra: &[&str]) -> Server {
    std::fs::create_dir_all(dir).unwrap();
    Server::start_with(
        dir,
        &["--cluster", "c1", "--etcd", &etcd.url(), "--nats", &nats.url(), "--host-id", id, "--lease-ttl-ms", lease_ms]
            .into_iter()
            .chain(extra.iter().copied())
            .collect::<Vec<_>>(),
    )
}

/// Each host's units of `topology` as `server` sees them, and the epoch.
fn assignment(server: &Server, topology: &str) -> Option<(u64, String, BTreeMap<String, Vec<String>>)> {
    let seen = view(server);
    let record = seen["topologies"][topology]["assignment"].as_object()?.clone();
    let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (unit, owner) in record["units"].as_object().unwrap() {
        hosts.entry(owner["host"].as_str().unwrap().to_owned()).or_default().push(unit.clone());
    }
    Some((record["epoch"].as_u64().unwrap(), record["reason"].as_str().unwrap().to_owned(), hosts))
}

/// Waits until every server sees the same assignment of `topology`'s
/// `units` over exactly `members`, each holding its share of partitions and
/// of slots give or take one; returns it.
fn assigned_over(
    servers: &[&Server],
    topology: &str,
    members: &[&str],
    units: usize,
) -> (u64, String, BTreeMap<String, Vec<String>>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen: Vec<_> = servers.iter().map(|s| assignment(s, topology)).collect();
        if let Some(Some(first)) = seen.first()
            && seen.iter().all(|s| s.as_ref() == Some(first))
            && first.2.keys().map(String::as_str).eq(members.iter().copied())
        {
            assert_eq!(first.2.values().map(Vec::len).sum::<usize>(), units, "{first:?}");
            for kind in ["partition/", "slot/"] {
                let shares: Vec<usize> =
                    first.2.values().map(|units| units.iter().filter(|u| u.starts_with(kind)).count()).collect();
                let (least, most) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(most - least <= 1, "shares of {kind} differ by more than one: {shares:?}");
            }
            return first.clone();
        }
        assert!(Instant::now() < deadline, "no common assignment over {members:?} within 30 s: {seen:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every slot of state `counts` of `topology`, as `server` sees
/// its assignment, is fenced in the topology's changelog at the epoch its
/// owner got it; returns each slot's fence epoch.
fn fenced(server: &Server, nats: &NatsServer, topology: &str) -> BTreeMap<u32, u64> {
    let connection = weir_io::nats::Nats::connect(&nats.config(), "test").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = view(server);
        let units = seen["topologies"][topology]["assignment"]["units"].as_object().unwrap().clone();
        let fences: BTreeMap<u32, Option<u64>> = connection.runtime.block_on(async {
            let log = Changelog::open(&connection.jetstream, "c1", topology).await.unwrap();
            let mut fences = BTreeMap::new();
            for unit in units.keys() {
                let Some(slot) = unit.strip_prefix("slot/counts/") else { continue };
                let slot: u32 = slot.parse().unwrap();
                fences.insert(slot, log.rebuild("counts", slot).await.unwrap().fence.map(|f| f.epoch));
            }
            fences
        });
        let since = |slot: &u32| units[&format!("slot/counts/{slot}")]["since"].as_u64();
        if fences.len() == 64 && fences.iter().all(|(slot, epoch)| *epoch == since(slot)) {
            return fences.into_iter().map(|(slot, epoch)| (slot, epoch.unwrap())).collect();
        }
        assert!(Instant::now() < deadline, "slots not fenced at their owners' epochs within 30 s: {fences:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_topology_deployed_to_any_host_is_assigned_across_the_live_hosts_and_follows_them() {
    let etcd = EtcdServer::start();
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut hosts: Vec<(String, Server)> = ["h1", "h2", "h3"]
        .iter()
        .map(|id| (id.to_string(), host_with_nats(&dir.path().join(id), &etcd, &nats, id)))
        .collect();
    let leader = agreed(&all(&hosts), &["h1", "h2", "h3"]);

    // Deployed through one host; every host lists it and loads its bundle.
    // Its spout's `corpus.*` makes a partition of each subject of the stream.
    nats.create_stream("corpus", &["corpus.0", "corpus.1", "corpus.2", "corpus.3"]);
    let (bytes, deployed) = deploy_word_count(&hosts[1].1, dir.path());
    assert_eq!(deployed["cluster"]["units"], 68, "four partitions and 64 slots of counts: {deployed}");
    let (epoch, reason, owners) = assigned_over(&all(&hosts), "word-count", &["h1", "h2", "h3"], 68);
    let partitions = owners.values().flatten().filter(|u| u.starts_with("partition/corpus.")).count();
    assert_eq!(partitions, 4, "{owners:?}");
    assert_eq!(reason, "topology deployed");
    for (_, server) in &hosts {
        let listed = server.wait_for_status("word-count", |s| s["cluster"]["bundle_on_this_host"] == "loaded");
        assert_eq!(listed["state"], "running", "{listed}");
    }

    // So do the metrics of every host.
    let (status, metrics) = hosts[0].1.http("GET", "/metrics", None, b"");
    assert_eq!(status, 200, "{metrics}");
    for id in ["h1", "h2", "h3"] {
        assert!(
            metrics.contains(&format!("weir_cluster_units{{topology=\"word-count\",host=\"{id}\",kind=\"slot\"}}")),
            "{metrics}"
        );
    }
    assert!(metrics.contains(&format!("weir_cluster_leader{{cluster=\"c1\",host=\"{leader}\"}} 1")), "{metrics}");

    // The CLI shows each host's share.
    let shown_text = weir_cluster(&hosts[2].1);
    assert!(
        shown_text.contains(&format!("topology word-count, assignment epoch {epoch} (topology deployed)")),
        "{shown_text}"
    );

    // A second deploy of the name, through another host, is refused.
    let (status, refused) = hosts[0].1.api("POST", "/v1/topologies", &bytes);
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("deployed to cluster c1 already"), "{refused}");
    // What ran of it on this host: nothing yet.
    let (status, logs) = hosts[0].1.api("GET", "/v1/topologies/word-count/logs", b"");
    assert_eq!((status, logs), (200, serde_json::json!([])));
    let (status, history) = hosts[0].1.api("GET", "/v1/topologies/word-count/history", b"");
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["at"], serde_json::json!([]), "{history}");

    // Stopped through one host, resumed through another: every host sees it.
    let (status, stopped) = hosts[0].1.api("POST", "/v1/topologies/word-count/stop", b"");
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    hosts[2].1.wait_for_status("word-count", |s| s["state"] == "stopped");
    let (status, resumed) = hosts[2].1.api("POST", "/v1/topologies/word-count/resume", b"");
    assert_eq!(status, 200, "{resumed}");
    hosts[0].1.wait_for_status("word-count", |s| s["state"] == "running");

    // An upgrade must bring the same topology; this one does.
    let other = bundle(dir.path(), WORD_COUNT_WINDOWED, "windowed.weir");
    let (status, refused) = hosts[1].1.api("PUT", "/v1/topologies/word-count/bundle", &other);
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("defines no topology \"word-count\""), "{refused}");
    let (status, upgraded) = hosts[1].1.api("PUT", "/v1/topologies/word-count/bundle", &bytes);
    assert_eq!(status, 200, "{upgraded}");
    assert_eq!(upgraded["cluster"]["bundle"], deployed["cluster"]["bundle"], "{upgraded}");

    // A member that is not the leader is killed: the others take its units,
    // and keep their own (compared when no other change came between: on a
    // loaded machine a lease may lapse and come back meanwhile).
    let gone = hosts.iter().position(|(id, _)| *id != leader).unwrap();
    let (before, _, owners) = assignment(&hosts[0].1, "word-count").unwrap();
    assert!(before >= epoch);
    let (gone_id, gone_server) = hosts.remove(gone);
    drop(gone_server);
    let rest: Vec<&str> = ["h1", "h2", "h3"].into_iter().filter(|id| *id != gone_id).collect();
    let (after, reason, now) = assigned_over(&all(&hosts), "word-count", &rest, 68);
    assert!(after > before, "a new epoch: {after} after {before}");
    assert!(reason.contains(&format!("host {gone_id} left")), "{reason}");
    if after == before + 1 {
        for id in &rest {
            for unit in &owners[*id] {
                assert!(
                    now[*id].contains(unit),
                    "host {id} lost unit {unit} though it stayed: {owners:?} then {now:?}"
                );
            }
        }
    }

    // Each slot is fenced in the changelog at the epoch its owner got it:
    // the moved ones at the new epoch.
    let fences = fenced(&hosts[0].1, &nats, "word-count");
    assert!(fences.values().any(|epoch| *epoch == after), "{fences:?}");

    // A host added takes its share, and the leader stays.
    hosts.push(("h4".into(), host_with_nats(&dir.path().join("h4"), &etcd, &nats, "h4")));
    let mut members = rest.clone();
    members.push("h4");
    let (joined, reason, _) = assigned_over(&all(&hosts), "word-count", &members, 68);
    assert!(joined > after);
    assert!(reason.contains("host h4 joined"), "{reason}");
    hosts[2].1.wait_for_status("word-count", |s| s["cluster"]["bundle_on_this_host"] == "loaded");

    // Deleted through the new host: gone from every host's list.
    let (status, answer) = hosts[2].1.api("DELETE", "/v1/topologies/word-count?state=drop", b"");
    assert_eq!(status, 204, "{answer}");
    let deadline = Instant::now() + Duration::from_secs(30);
    for (_, server) in &hosts {
        loop {
            let (_, listed) = server.api("GET", "/v1/topologies", b"");
            if listed.as_array().unwrap().is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "still listed: {listed}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A commit's writes: key, and value or removal.
/// The records of slot `slot` of state `counts` written by its owner at `epoch`.
fn writes(slot: u32, epoch: u64, pairs: &[(&str, Option<&str>)]) -> SlotWrites {
    let records = pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))).collect();
    SlotWrites { state: "counts".into(), slot, epoch, records }
}

fn values(rebuilt: &Rebuilt) -> Vec<(String, u64, String)> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    rebuilt.values.iter().map(|(k, (txid, v))| (text(k), *txid, text(v))).collect()
}

#[test]
fn a_slots_changelog_rebuilds_it_and_passes_over_a_fenced_hosts_records() {
    let nats = NatsServer::start();
    let connection = weir_io::nats::Nats::connect(&nats.config(), "test").unwrap();
    connection.runtime.block_on(async {
        let log = Changelog::open(&connection.jetstream, "c1", "word count").await.unwrap();
        let last_sequence = || async {
            let mut stream = connection.jetstream.get_stream(log.stream()).await.unwrap();
            stream.info().await.unwrap().state.last_sequence
        };
        // Host A owns slot 3 of `counts` at epoch 1, and commits txids 1 and 2.
        log.publish(1, &[writes(3, 1, &[("a", Some("1")), ("b", Some("1"))])]).await.unwrap();
        log.publish(2, &[writes(3, 1, &[("a", Some("2"))])]).await.unwrap();
        // Published again after a lost acknowledgement: stored once.
        log.publish(2, &[writes(3, 1, &[("a", Some("2"))])]).await.unwrap();
        assert_eq!(last_sequence().await, 2, "one message a slot and commit");
        // Another slot's records are not read with this one.
        log.publish(2, &[writes(4, 1, &[("z", Some("9"))])]).await.unwrap();

        // Host B takes slot 3 over at epoch 2: it fences, then rebuilds.
        let fence = log.fence("counts", 3, 2).await.unwrap();
        // Fencing again at that epoch (B restarted, say) keeps the first fence.
        assert_eq!(log.fence("counts", 3, 2).await.unwrap(), fence);
        assert_eq!(log.fence("counts", 3, 1).await.unwrap(), fence, "an older epoch does not fence");
        let rebuilt = log.rebuild("counts", 3).await.unwrap();
        assert_eq!(values(&rebuilt), [("a".into(), 2, "2".into()), ("b".into(), 1, "1".into())]);
        assert_eq!(rebuilt.fence, Some(fence));

        // A, paused past its lease, wakes and writes the commit it had in
        // hand, and cannot snapshot (nor purge) the slot; B commits txids 3
        // and 4 (4 removes c).
        log.publish(3, &[writes(3, 1, &[("a", Some("stale")), ("b", Some("stale"))])]).await.unwrap();
        let refused = log.snapshot(3, &[writes(3, 1, &[("a", Some("stale"))])]).await.unwrap_err();
        assert!(format!("{refused:#}").contains("fenced past epoch 1"), "{refused:#}");
        log.publish(3, &[writes(3, 2, &[("b", Some("3")), ("c", Some("3"))])]).await.unwrap();
        log.publish(4, &[writes(3, 2, &[("c", None)])]).await.unwrap();
        let rebuilt = log.rebuild("counts", 3).await.unwrap();
        assert_eq!(values(&rebuilt), [("a".into(), 2, "2".into()), ("b".into(), 3, "3".into())]);
        assert_eq!(rebuilt.fenced_records, 3, "A's two late records and its snapshot's are passed over");

        // B snapshots the slot: its log before the snapshot goes, the
        // fence and the other slot stay, and the slot reads back the same.
        let whole = writes(3, 2, &[("a", Some("2")), ("b", Some("3"))]);
        log.snapshot(4, &[whole]).await.unwrap();
        let mut stream = connection.jetstream.get_stream(log.stream()).await.unwrap();
        assert_eq!(stream.info().await.unwrap().state.messages, 3, "slot 4's delta, the fence, the snapshot");
        let rebuilt = log.rebuild("counts", 3).await.unwrap();
        assert_eq!(values(&rebuilt), [("a".into(), 4, "2".into()), ("b".into(), 4, "3".into())]);
        assert_eq!(rebuilt.fence, Some(fence));
        assert_eq!(values(&log.rebuild("counts", 4).await.unwrap()), [("z".into(), 2, "9".into())]);

        // A stream limited per subject would drop a slot's deltas: refused.
        let mut config = stream.info().await.unwrap().config.clone();
        config.max_messages_per_subject = 2;
        connection.jetstream.update_stream(config).await.unwrap();
        let refused = Changelog::open(&connection.jetstream, "c1", "word count").await.err().unwrap();
        assert!(format!("{refused:#}").contains("keeps 2 messages per subject"), "{refused:#}");
    });
}

#[test]
fn the_cluster_commit_log_records_and_commits_in_txid_order_while_its_writer_leads() {
    let etcd = EtcdServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (mut client, leader, lease) = runtime.block_on(async {
        let mut client = etcd_client::Client::connect([etcd.url()], None).await.unwrap();
        let lease = client.lease_grant(30, None).await.unwrap().id();
        let won = client.campaign("/weir/c1/leader", "h1", lease).await.unwrap();
        (client, won.leader().unwrap().clone(), lease)
    });
    let log = EtcdCommitLog::new(client.clone(), "c1", leader, runtime.handle().clone());
    let record = |attempt, spout: &str| BatchRecord { attempt, time_ms: 7, spout: spout.as_bytes().to_vec() };
    let progress =
        |last_committed, batches: &[(u64, BatchRecord)]| Progress { last_committed, batches: batches.to_vec() };

    // Recorded before they are processed, kept per topology.
    log.record_batch("wc", 1, &record(0, "0-99")).unwrap();
    log.record_batch("wc", 2, &record(0, "100-199")).unwrap();
    assert_eq!(log.progress("wc").unwrap(), progress(0, &[(1, record(0, "0-99")), (2, record(0, "100-199"))]));
    assert_eq!(log.progress("other").unwrap(), Progress::default());

    // Commits go strictly in txid order; the last committed batch's record stays.
    let refused = log.commit("wc", 2).unwrap_err().to_string();
    assert!(refused.contains("cannot commit txid 2: the last committed txid is 0"), "{refused}");
    log.commit("wc", 1).unwrap();
    assert_eq!(log.progress("wc").unwrap(), progress(1, &[(1, record(0, "0-99")), (2, record(0, "100-199"))]));
    log.record_batch("wc", 2, &record(1, "100-199")).unwrap();
    log.commit("wc", 2).unwrap();
    assert_eq!(log.progress("wc").unwrap(), progress(2, &[(2, record(1, "100-199"))]));
    let refused = log.commit("wc", 2).unwrap_err().to_string();
    assert!(refused.contains("the last committed txid is 2"), "{refused}");

    // Txids past 9 keep their order.
    for txid in 3..=11 {
        log.record_batch("wc", txid, &record(0, &txid.to_string())).unwrap();
    }
    let txids: Vec<u64> = log.progress("wc").unwrap().batches.iter().map(|(t, _)| *t).collect();
    assert_eq!(txids, (2..=11).collect::<Vec<_>>());

    // A leader whose lease ended records and commits nothing.
    runtime.block_on(client.lease_revoke(lease)).unwrap();
    let refused = log.record_batch("wc", 12, &record(0, "x")).unwrap_err().to_string();
    assert!(refused.contains("no longer leads"), "{refused}");
    let refused = log.commit("wc", 3).unwrap_err().to_string();
    assert!(refused.contains("no longer leads"), "{refused}");
    assert_eq!(log.progress("wc").unwrap().last_committed, 2);
}

/// The 200,000-sentence corpus in two halves, and the whole one's counts.
struct Halves {
    _dir: tempfile::TempDir,
    first: std::path::PathBuf,
    second: std::path::PathBuf,
    truth: BTreeMap<String, i64>,
}

fn corpus_halves(sentences: usize) -> Halves {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("corpus.txt");
    write_corpus(&Path::new(REPO_ROOT).join("scripts/gen_corpus.py"), sentences, &whole);
    let truth = serde_json::from_str(&std::fs::read_to_string(dir.path().join("corpus.counts.json")).unwrap()).unwrap();
    let text = std::fs::read_to_string(&whole).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (first, second) = (dir.path().join("first.txt"), dir.path().join("second.txt"));
    let half = lines.len() / 2;
    std::fs::write(&first, lines[..half].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    std::fs::write(&second, lines[half..].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    Halves { _dir: dir, first, second, truth }
}

/// etcd, a nats-server, the corpus of `sentences` sentences in halves,
/// and a directory for the hosts.
fn services(sentences: usize) -> (EtcdServer, NatsServer, Halves, tempfile::TempDir) {
    (EtcdServer::start(), NatsServer::start(), corpus_halves(sentences), tempfile::tempdir().unwrap())
}

/// Deploys the JetStream word count (bundled in `dir`) through `server`:
/// the bundle, and the answer.
fn deploy_word_count(server: &Server, dir: &Path) -> (Vec<u8>, Value) {
    let bytes = bundle(dir, WORD_COUNT_JETSTREAM, "wc.weir");
    let (status, deployed) = server.api("POST", "/v1/topologies", &bytes);
    assert_eq!(status, 201, "{deployed}");
    (bytes, deployed)
}

const PARTITIONS: &str = "corpus.{0..7}";

fn eight_partitions(nats: &NatsServer) {
    let subjects: Vec<String> = (0..8).map(|p| format!("corpus.{p}")).collect();
    nats.create_stream("corpus", &subjects.iter().map(String::as_str).collect::<Vec<_>>());
}

/// A host of cluster `c1` running batches of 20,000 messages, each try
/// given 10 s, snapshotting its slots in the changelog every third txid
/// (so that snapshots and purges meet the kills).
fn cluster_host(dir: &Path, etcd: &EtcdServer, nats: &NatsServer, id: &str) -> Server {
    let flags = ["--batch-size", "20000", "--batch-timeout-ms", "10000", "--snapshot-every", "3"];
    host_with_nats_and(dir, etcd, nats, id, &flags)
}

/// Hosts `ids` of cluster `c1` (each a [`cluster_host`] under `dir`),
/// once they agree on a leader.
fn cluster_of(dir: &Path, etcd: &EtcdServer, nats: &NatsServer, ids: &[&str]) -> Vec<(String, Server)> {
    let hosts: Vec<(String, Server)> =
        ids.iter().map(|id| (id.to_string(), cluster_host(&dir.join(id), etcd, nats, id))).collect();
    agreed(&all(&hosts), ids);
    hosts
}

/// `weir` with `args` against `server`, having succeeded: what it printed.
fn weir_against_output(server: &Server, args: &[&str]) -> std::process::Output {
    let output = weir().env("WEIR_TOKEN", common::server::TOKEN).args(args).args(["--server", &server.url()]).output();
    let output = output.unwrap();
    assert!(output.status.success(), "weir {args:?}: {}", text(&output));
    output
}

/// `weir` with `args` against `server`, having succeeded: its output.
fn weir_against(server: &Server, args: &[&str]) -> String {
    String::from_utf8(weir_against_output(server, args).stdout).unwrap()
}

/// The counts `weir state scan --server` prints of `server`.
fn scanned(server: &Server) -> BTreeMap<String, i64> {
    let printed = weir_against(server, &["state", "scan", "--topology", "word-count", "--state", "counts"]);
    printed
        .lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            (entry["key"][0].as_str().unwrap().to_owned(), entry["value"].as_i64().unwrap())
        })
        .collect()
}

/// Waits until `server` reads every count of `truth` back through the API,
/// up to `limit`.
fn wait_for_counts(server: &Server, truth: &BTreeMap<String, i64>, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = server.api("GET", "/v1/topologies/word-count/states/counts", b"");
        if status == 200 {
            let got: BTreeMap<String, i64> = body
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e["key"][0].as_str().unwrap().to_owned(), e["value"].as_i64().unwrap()))
                .collect();
            if &got == truth {
                return;
            }
            let total: i64 = got.values().sum();
            assert!(
                got.iter().all(|(word, n)| truth.get(word).is_some_and(|t| n <= t)),
                "a count went past the truth ({total} words counted)"
            );
        }
        let (_, status_now) = server.api("GET", "/v1/topologies/word-count", b"");
        assert!(Instant::now() < deadline, "counts not exact within {limit:?}: {status} {status_now}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every host reads the counts back equal to `truth` through `weir state
/// scan --server`, and `weir query --server` answers alike on each.
fn assert_exact_on_every_host(servers: &[&Server], truth: &BTreeMap<String, i64>) {
    let want: i64 = ["w0", "w1", "w7", "w9999"].iter().map(|w| truth.get(*w).copied().unwrap_or(0)).sum();
    for server in servers {
        assert_counts_eq(&scanned(server), truth);
        let answer = weir_against(
            server,
            &["query", "--topology", "word-count", "--query", "words", "--args", "w0 w1 w7 w9999"],
        );
        assert_eq!(answer.trim(), format!("[[{want}]]"), "{}", server.url());
    }
}

#[test]
fn a_word_count_served_by_three_hosts_counts_exactly_and_a_host_added_mid_run_takes_its_share() {
    let (etcd, nats, corpus, dir) = services(200_000);
    let mut hosts = cluster_of(dir.path(), &etcd, &nats, &["h1", "h2", "h3"]);
    eight_partitions(&nats);
    nats.publish_file("corpus", PARTITIONS, &corpus.first);

    deploy_word_count(&hosts[1].1, dir.path());
    assigned_over(&all(&hosts), "word-count", &["h1", "h2", "h3"], 72);
    // Running: batches commit before the fourth host comes.
    hosts[0].1.wait_for_status("word-count", |s| s["last_committed"].as_u64() >= Some(2));

    hosts.push(("h4".into(), cluster_host(&dir.path().join("h4"), &etcd, &nats, "h4")));
    let (_, reason, owners) = assigned_over(&all(&hosts), "word-count", &["h1", "h2", "h3", "h4"], 72);
    assert!(reason.contains("host h4 joined"), "{reason}");
    assert!(owners["h4"].iter().any(|u| u.starts_with("partition/")), "{owners:?}");
    assert!(owners["h4"].iter().any(|u| u.starts_with("slot/")), "{owners:?}");
    nats.publish_file("corpus", PARTITIONS, &corpus.second);

    wait_for_counts(&hosts[3].1, &corpus.truth, Duration::from_secs(300));
    assert_exact_on_every_host(&all(&hosts), &corpus.truth);
    // The added host read its partitions and holds its slots; `weir status`
    // on any host shows every host's share and rate.
    let status = hosts[0].1.wait_for_status("word-count", |s| {
        s["cluster"]["hosts"]["h4"]["tuples_processed"].as_u64().is_some_and(|n| n > 0)
    });
    assert_eq!(status["cluster"]["hosts"].as_object().unwrap().len(), 4, "{status}");
    // The leader gave each batch the next one's span, and partition owners
    // read and processed it while the batch committed.
    let shares = status["cluster"]["hosts"].as_object().unwrap();
    let read_ahead: u64 = shares.values().map(|h| h["batches_read_ahead"].as_u64().unwrap()).sum();
    assert!(read_ahead > 0, "{status}");
    let shown = weir_against(&hosts[2].1, &["status", "word-count"]);
    for id in ["h1", "h2", "h3", "h4"] {
        assert!(shown.contains(id), "{shown}");
    }
    assert!(shown.contains("tuples/s"), "{shown}");
}

#[test]
fn a_cluster_topology_starts_at_its_streams_first_message_when_earlier_ones_are_gone() {
    let (etcd, nats, corpus, dir) = services(20_000);
    let host = cluster_host(&dir.path().join("h1"), &etcd, &nats, "h1");
    agreed(&[&host], &["h1"]);
    eight_partitions(&nats);
    // The first half is published, then removed (as a stream's limits
    // remove old messages): the stream starts past sequence 1.
    nats.publish_file("corpus", PARTITIONS, &corpus.first);
    let connection = weir_io::nats::Nats::connect(&nats.config(), "test").unwrap();
    connection.runtime.block_on(async {
        connection.jetstream.get_stream("corpus").await.unwrap().purge().await.unwrap();
    });
    nats.publish_file("corpus", PARTITIONS, &corpus.second);
    let mut truth: BTreeMap<String, i64> = BTreeMap::new();
    for word in std::fs::read_to_string(&corpus.second).unwrap().split_whitespace() {
        *truth.entry(word.to_owned()).or_default() += 1;
    }

    deploy_word_count(&host, dir.path());
    // Before, the first span began at sequence 1 and its read came up
    // short, try after try.
    wait_for_counts(&host, &truth, Duration::from_secs(120));
}

#[test]
fn a_cluster_topology_over_a_stream_taking_a_wildcard_counts_exactly() {
    let (etcd, nats, corpus, dir) = services(20_000);
    let hosts = cluster_of(dir.path(), &etcd, &nats, &["h1", "h2"]);
    // Which subjects hold messages is not fixed: the spout's pattern is its
    // partition, and its owner reads every subject the pattern matches.
    nats.create_stream("corpus", &["corpus.*"]);
    nats.publish_file("corpus", PARTITIONS, &corpus.first);
    nats.publish_file("corpus", PARTITIONS, &corpus.second);

    let (_, deployed) = deploy_word_count(&hosts[0].1, dir.path());
    assert_eq!(deployed["cluster"]["units"], 65, "one partition and 64 slots of counts: {deployed}");
    // Before, the owner kept no message of the span (none is named
    // `corpus.*`), and every try failed.
    wait_for_counts(&hosts[1].1, &corpus.truth, Duration::from_secs(120));
    assert_exact_on_every_host(&all(&hosts), &corpus.truth);
}

/// Splits `file`'s lines into `n` files of about equal length in `dir`.
fn slices(file: &Path, n: usize, dir: &Path) -> Vec<std::path::PathBuf> {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let per = lines.len().div_ceil(n);
    lines
        .chunks(per)
        .enumerate()
        .map(|(at, chunk)| {
            let path = dir.join(format!("slice-{at}.txt"));
            std::fs::write(&path, chunk.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
            path
        })
        .collect()
}

/// The leader as `server` sees it.
fn leader_of(server: &Server) -> Option<String> {
    view(server)["leader"].as_str().map(str::to_owned)
}

/// Every slot of state `counts`, rebuilt from the changelog as a host
/// taking it over would: its fence's epoch, and the records passed over
/// (written after the fence by a host that had lost the slot); and the
/// counts all the slots hold together.
fn changelog_counts(nats: &NatsServer) -> (BTreeMap<u32, Option<u64>>, usize, BTreeMap<String, i64>) {
    let connection = weir_io::nats::Nats::connect(&nats.config(), "test").unwrap();
    connection.runtime.block_on(async {
        let log = Changelog::open(&connection.jetstream, "c1", "word-count").await.unwrap();
        let (mut fences, mut passed_over, mut counts) = (BTreeMap::new(), 0, BTreeMap::new());
        for slot in 0..64 {
            let rebuilt = log.rebuild("counts", slot).await.unwrap();
            fences.insert(slot, rebuilt.fence.map(|f| f.epoch));
            passed_over += rebuilt.fenced_records;
            for (key, (_, bytes)) in rebuilt.values {
                let key = weir_state::keys::decode(&key).unwrap();
                let stored = weir_state::rules::Stored::decode(&bytes).unwrap();
                use weir_sdk::codec::Value as Datum;
                let (Datum::Str(word), Datum::I64(count)) = (key[0].clone(), stored.value().clone()) else {
                    panic!("not a word's count: {key:?} {stored:?}")
                };
                counts.insert(word, count);
            }
        }
        (fences, passed_over, counts)
    })
}

#[test]
fn a_cluster_word_count_stays_exact_through_kills_pauses_and_service_restarts() {
    let seed = std::env::var("WEIR_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(6_221_249);
    println!("chaos seed {seed} (WEIR_CHAOS_SEED to repeat)");
    let mut rng = common::kill::Lcg(seed);
    let (mut etcd, mut nats, corpus, dir) = services(100_000);
    let mut parts = slices(&corpus.first, 8, dir.path());
    parts.extend(slices(&corpus.second, 8, &{
        let second = dir.path().join("second");
        std::fs::create_dir_all(&second).unwrap();
        second
    }));
    let ids = ["h1", "h2", "h3"];
    let start = |id: &str, etcd: &EtcdServer, nats: &NatsServer| cluster_host(&dir.path().join(id), etcd, nats, id);
    let mut hosts: Vec<Option<Server>> = ids.iter().map(|id| Some(start(id, &etcd, &nats))).collect();
    let live = |hosts: &[Option<Server>]| -> Vec<usize> { (0..hosts.len()).filter(|&i| hosts[i].is_some()).collect() };
    agreed(&hosts.iter().flatten().collect::<Vec<_>>(), &ids);
    eight_partitions(&nats);
    deploy_word_count(hosts[0].as_ref().unwrap(), dir.path());
    // Beside it, a topology placed whole, its readings in slices too.
    let everything = readings(3200);
    let (everything_truth, everything_answer) = everything_on_one_host(&everything);
    let mut slices_of_readings = everything.chunks(200);
    nats.publish("readings", READING_PARTITIONS, slices_of_readings.next().unwrap());
    nats.create_stream("out", &["sensor-counts"]);
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "everything.weir");
    let (status, deployed) =
        hosts[1].as_ref().unwrap().api("POST", &format!("/v1/topologies?topology={EVERYTHING}"), &bytes);
    assert_eq!(status, 201, "{deployed}");

    // Eighteen events: the leader killed twice, a host paused past its lease
    // twice, etcd and nats-server restarted once each, the owner of the
    // topology placed whole killed once and paused once, and random hosts
    // killed, each restarted after a random delay; a slice of the corpus
    // and of the readings is published between events.
    let mut events: Vec<&str> = vec!["kill leader", "kill leader", "pause", "pause", "restart etcd", "restart nats"];
    events.extend(["kill whole owner", "pause whole owner"]);
    events.extend(std::iter::repeat_n("kill random", 10));
    for at in (1..events.len()).rev() {
        events.swap(at, rng.below(at as u64 + 1) as usize);
    }
    let mut parts = parts.into_iter();
    for (n, event) in events.iter().enumerate() {
        if let Some(part) = parts.next() {
            nats.publish_file("corpus", PARTITIONS, &part);
        }
        if let Some(slice) = slices_of_readings.next() {
            nats.publish("readings", READING_PARTITIONS, slice);
        }
        std::thread::sleep(Duration::from_millis(500 + rng.below(1500)));
        let up = live(&hosts);
        let owner_of_whole = || {
            let owner = hosts[up[0]].as_ref().and_then(whole_owner)?;
            ids.iter().position(|id| *id == owner).filter(|at| hosts[*at].is_some())
        };
        let event = match (*event, owner_of_whole()) {
            ("kill whole owner", Some(at)) => {
                println!("event {n}: SIGKILL {}, the owner of {EVERYTHING}, restarted after 2 s", ids[at]);
                drop(hosts[at].take());
                std::thread::sleep(Duration::from_secs(2));
                hosts[at] = Some(start(ids[at], &etcd, &nats));
                continue;
            }
            ("pause whole owner", Some(at)) => {
                println!("event {n}: SIGSTOP {}, the owner of {EVERYTHING}, for twice its lease", ids[at]);
                let server = hosts[at].as_ref().unwrap();
                signal(server, "-STOP");
                std::thread::sleep(Duration::from_millis(2 * LEASE_TTL_MS.parse::<u64>().unwrap() + 500));
                signal(server, "-CONT");
                continue;
            }
            ("kill whole owner", None) => "kill random",
            ("pause whole owner", None) => "pause",
            (event, _) => event,
        };
        match event {
            "kill leader" | "kill random" => {
                let leader = hosts[up[0]].as_ref().and_then(leader_of);
                let at = match leader.and_then(|l| ids.iter().position(|id| *id == l)) {
                    Some(at) if event == "kill leader" => at,
                    _ => up[rng.below(up.len() as u64) as usize],
                };
                let delay = Duration::from_millis(500 + rng.below(2500));
                println!("event {n}: {event}: SIGKILL {}, restarted after {delay:?}", ids[at]);
                drop(hosts[at].take());
                std::thread::sleep(delay);
                hosts[at] = Some(start(ids[at], &etcd, &nats));
            }
            "pause" => {
                let at = up[rng.below(up.len() as u64) as usize];
                println!("event {n}: SIGSTOP {} for twice its lease, then SIGCONT", ids[at]);
                let server = hosts[at].as_ref().unwrap();
                signal(server, "-STOP");
                std::thread::sleep(Duration::from_millis(2 * LEASE_TTL_MS.parse::<u64>().unwrap() + 500));
                signal(server, "-CONT");
            }
            "restart etcd" => {
                println!("event {n}: etcd killed and restarted");
                etcd.restart();
            }
            "restart nats" => {
                println!("event {n}: nats-server killed and restarted");
                nats.restart();
            }
            other => unreachable!("{other}"),
        }
    }
    for part in parts {
        nats.publish_file("corpus", PARTITIONS, &part);
    }
    for slice in slices_of_readings {
        nats.publish("readings", READING_PARTITIONS, slice);
    }
    println!("every event done; waiting for the counts");

    let servers: Vec<&Server> = hosts.iter().flatten().collect();
    agreed(&servers, &ids);
    let logs: Vec<std::path::PathBuf> = ids.iter().map(|id| dir.path().join(id).join("weir.log")).collect();
    for server in &servers {
        let waited = std::panic::catch_unwind(|| wait_for_counts(server, &corpus.truth, Duration::from_secs(240)));
        if let Err(panic) = waited {
            for log in &logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().filter(|l| !l.contains("connected to the NATS")).collect();
                println!("--- {}:\n{}", log.display(), lines[lines.len().saturating_sub(40)..].join("\n"));
            }
            std::panic::resume_unwind(panic);
        }
    }
    assert_exact_on_every_host(&servers, &corpus.truth);

    // No slot holds a record of a host that did not own it: each slot's
    // changelog, read as a host taking it over reads it (records written
    // after the slot's fence by a former owner passed over), holds exactly
    // the counts, and each slot is fenced at its present owner's epoch.
    let (fences, passed_over, counts) = changelog_counts(&nats);
    println!("changelog: {passed_over} records of fenced hosts passed over");
    assert_counts_eq(&counts, &corpus.truth);
    let (_, _, owners) = assignment(servers[0], "word-count").unwrap();
    let units = view(servers[0])["topologies"]["word-count"]["assignment"]["units"].clone();
    for (slot, fence) in fences {
        let since = units[&format!("slot/counts/{slot}")]["since"].as_u64();
        assert_eq!(fence, since, "slot {slot}'s fence is not its owner's epoch: {owners:?}");
    }

    // The topology placed whole answers as on one host, through every
    // host, and its sink's stream holds each committed batch once.
    everything_exact_on_every_host(&servers, &everything_truth, &everything_answer, dir.path());
    assert_sink_holds_each_batch_once(&nats, servers[0], &sensor_counts(&everything));
}

#[test]
fn the_dashboards_cluster_page_shows_every_host_the_leader_and_each_share() {
    let (etcd, nats, _corpus, dir) = services(1000);
    let hosts = cluster_of(dir.path(), &etcd, &nats, &["h1", "h2", "h3"]);
    let leader = leader_of(&hosts[0].1).unwrap();
    eight_partitions(&nats);
    deploy_word_count(&hosts[1].1, dir.path());
    let (epoch, _, owners) = assigned_over(&all(&hosts), "word-count", &["h1", "h2", "h3"], 72);
    let browser = common::browser::Browser::start(&Path::new(REPO_ROOT).join("target/screenshots"));
    browser.goto(&format!("{}/", hosts[2].1.url()));
    browser.type_into(&browser.find("form.token input[type=password]"), common::server::TOKEN);
    browser.click(&browser.find("form.token button"));
    browser.find("article.topology");
    browser.goto(&format!("{}/#/cluster", hosts[2].1.url()));
    let shown = browser.wait_for(
        "every host and its share",
        "const rows = [...document.querySelectorAll('table.hosts tbody tr')];
         if (rows.length !== 3 || rows.some(r => !r.querySelector('li[data-topology]'))) return null;
         return { rows: rows.map(r => ({ host: r.dataset.host, role: r.querySelector('.role').textContent,
                                         units: Number(r.querySelector('li[data-topology]').dataset.units) })),
                  leader: document.querySelector('.leader').textContent,
                  epoch: document.querySelector('.assignment .quiet').textContent }",
        &[],
    );
    let want: Vec<Value> = ["h1", "h2", "h3"]
        .iter()
        .map(|h| {
            let role = if *h == leader { "leader" } else { "member" };
            serde_json::json!({ "host": h, "role": role, "units": owners[*h].len() })
        })
        .collect();
    assert_eq!(shown["rows"], serde_json::json!(want), "{shown}");
    assert_eq!(shown["leader"], leader.as_str());
    assert!(shown["epoch"].as_str().unwrap().starts_with(&format!("epoch {epoch};")), "{shown}");
    browser.screenshot("cluster-3-hosts");
    // A fourth host joins while the page is open: the page lists it, and
    // says it joined and why the assignment changed.
    let mut hosts = hosts;
    hosts.push(("h4".into(), cluster_host(&dir.path().join("h4"), &etcd, &nats, "h4")));
    let (_, reason, _) = assigned_over(&all(&hosts), "word-count", &["h1", "h2", "h3", "h4"], 72);
    let seen = browser.wait_for(
        "the join and the new assignment",
        "const lines = [...document.querySelectorAll('ol.changes li')].map(li => li.textContent);
         return document.querySelectorAll('table.hosts tbody tr').length === 4
           && lines.some(l => l.includes('host h4 joined: registered under a new lease'))
           && lines.some(l => l.includes('word-count: assignment epoch')) ? lines : null",
        &[],
    );
    assert!(seen.as_array().unwrap().iter().any(|l| l.as_str().unwrap().ends_with(&reason)), "{seen} ({reason})");
    // The servers keep them (another host's API says the same): the page
    // opened afresh shows them, each with its reason.
    let (_, view) = hosts[0].1.api("GET", "/v1/cluster", b"");
    let kept: Vec<String> = view["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}: {}", c["what"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert!(kept.iter().any(|l| l == "host h4 joined: registered under a new lease"), "{kept:?}");
    assert!(kept.iter().any(|l| l.ends_with(&reason) && l.starts_with("word-count: assignment epoch")), "{kept:?}");
    browser.goto(&format!("{}/#/", hosts[2].1.url()));
    browser.run("location.reload()", &[]);
    browser.goto(&format!("{}/#/cluster", hosts[2].1.url()));
    let reopened = browser.wait_for(
        "the changes kept by the server",
        "const lines = [...document.querySelectorAll('ol.changes li')].map(li => li.textContent);
         return lines.some(l => l.includes('host h4 joined: registered under a new lease'))
           && lines.some(l => l.endsWith(arguments[0])) ? lines : null",
        &[Value::from(reason.clone())],
    );
    assert!(reopened.as_array().unwrap().len() <= weir_cluster::changes::CHANGES_KEPT, "{reopened}");
}

/// The lines of the logs of hosts `ids` (under `dir`) holding any of `marks`,
/// each after its host's id.
fn log_lines(dir: &Path, ids: &[&str], marks: &[&str]) -> Vec<String> {
    ids.iter()
        .flat_map(|id| {
            let text = std::fs::read_to_string(dir.join(id).join("weir.log")).unwrap_or_default();
            let lines: Vec<String> = text
                .lines()
                .filter(|line| marks.iter().any(|mark| line.contains(mark)))
                .map(|line| format!("{id}: {line}"))
                .collect();
            lines
        })
        .collect()
}

/// What a lost batch leaves in a log: a try that timed out, partials that
/// never came.
const TIMED_OUT: [&str; 2] = ["did not commit within", "no partials from hosts"];

/// The counts of a state read's answer.
fn counts_of(body: &Value) -> BTreeMap<String, i64> {
    let entries = body.as_array().unwrap_or_else(|| panic!("not a list of entries: {body}"));
    entries.iter().map(|e| (e["key"][0].as_str().unwrap().to_owned(), e["value"].as_i64().unwrap())).collect()
}

#[test]
fn a_fresh_three_host_deploy_commits_its_first_batch_without_a_timeout_and_a_joining_host_answers_reads() {
    let (etcd, nats, corpus, dir) = services(20_000);
    let ids = ["h1", "h2", "h3"];
    // The default batch timeout (60 s): partials lost at the start would
    // stall the first batch for a minute and leave a timeout in a log.
    // A lease of 5 s, so that two hosts can be held up for 3 s.
    let start = |id: &str| host_leasing(&dir.path().join(id), &etcd, &nats, id, "5000", &["--batch-size", "4000"]);
    let mut hosts: Vec<(String, Server)> = ids.iter().map(|id| (id.to_string(), start(id))).collect();
    let leader = agreed(&all(&hosts), &ids);
    eight_partitions(&nats);
    nats.publish_file("corpus", PARTITIONS, &corpus.first);
    nats.publish_file("corpus", PARTITIONS, &corpus.second);
    // The two hosts that do not lead are held up before they load the
    // bundle, so that the leader processes txid 1 and sends them its
    // partials before their workers have subscribed.
    let leader_at = ids.iter().position(|id| *id == leader).unwrap();
    deploy_word_count(&hosts[leader_at].1, dir.path());
    let others: Vec<&Server> = hosts.iter().filter(|(id, _)| *id != leader).map(|(_, s)| s).collect();
    for other in &others {
        signal(other, "-STOP");
    }
    std::thread::sleep(Duration::from_secs(3));
    for other in &others {
        signal(other, "-CONT");
    }
    wait_for_counts(&hosts[leader_at].1, &corpus.truth, Duration::from_secs(50));
    let status = hosts[0].1.wait_for_status("word-count", |s| s["last_committed"].as_u64() >= Some(1));
    assert_eq!(status["replays"].as_u64().unwrap_or(0), 0, "{status}");
    assert_eq!(log_lines(dir.path(), &ids, &TIMED_OUT), Vec::<String>::new());
    // Each host reads only its own partitions: every consumer of the
    // stream is filtered to one partition.
    let connection = weir_io::nats::Nats::connect(&nats.config(), "weir tests").unwrap();
    let filters: Vec<String> = connection.runtime.block_on(async {
        use futures_util::TryStreamExt;
        let stream = connection.jetstream.get_stream("corpus").await.unwrap();
        let infos: Vec<_> = stream.consumers().try_collect().await.unwrap();
        infos.into_iter().map(|info| info.config.filter_subject).collect()
    });
    let partitions: Vec<String> = (0..8).map(|p| format!("corpus.{p}")).collect();
    assert!(!filters.is_empty() && filters.iter().all(|f| partitions.contains(f)), "{filters:?}");

    // A host that joins answers a read as soon as it listens: it waits for
    // its bundle, and its slots' reads wait for their restore.
    hosts.push(("h4".into(), start("h4")));
    let (code, body) = hosts[3].1.api("GET", "/v1/topologies/word-count/states/counts", b"");
    assert_eq!(code, 200, "{body}");
    assert_counts_eq(&counts_of(&body), &corpus.truth);
    assigned_over(&all(&hosts), "word-count", &["h1", "h2", "h3", "h4"], 72);
    let (code, body) = hosts[3].1.api("GET", "/v1/topologies/word-count/states/counts", b"");
    assert_eq!(code, 200, "{body}");
    assert_counts_eq(&counts_of(&body), &corpus.truth);

    // The corpus once more, while a fifth host joins: its batches lose no
    // partials either.
    nats.publish_file("corpus", PARTITIONS, &corpus.first);
    hosts.push(("h5".into(), start("h5")));
    nats.publish_file("corpus", PARTITIONS, &corpus.second);
    let twice: BTreeMap<String, i64> = corpus.truth.iter().map(|(word, n)| (word.clone(), 2 * n)).collect();
    wait_for_counts(&hosts[4].1, &twice, Duration::from_secs(50));
    assert_exact_on_every_host(&all(&hosts), &twice);
    assert_eq!(log_lines(dir.path(), &["h1", "h2", "h3", "h4", "h5"], &TIMED_OUT), Vec::<String>::new());
}

#[test]
fn an_etcd_restart_shorter_than_the_lease_keeps_every_hosts_membership_and_epoch() {
    let (mut etcd, nats, corpus, dir) = services(20_000);
    let ids = ["h1", "h2", "h3"];
    let start = |id: &str| host_leasing(&dir.path().join(id), &etcd, &nats, id, "5000", &["--batch-size", "4000"]);
    let hosts: Vec<(String, Server)> = ids.iter().map(|id| (id.to_string(), start(id))).collect();
    let leader = agreed(&all(&hosts), &ids);
    eight_partitions(&nats);
    nats.publish_file("corpus", PARTITIONS, &corpus.first);
    deploy_word_count(&hosts[0].1, dir.path());
    let (epoch, _, owners) = assigned_over(&all(&hosts), "word-count", &ids, 72);
    hosts[0].1.wait_for_status("word-count", |s| s["last_committed"].as_u64() >= Some(1));

    etcd.kill();
    std::thread::sleep(Duration::from_millis(1500));
    etcd.restart();
    nats.publish_file("corpus", PARTITIONS, &corpus.second);
    for (_, server) in &hosts {
        wait_for_counts(server, &corpus.truth, Duration::from_secs(60));
    }
    assert_eq!(agreed(&all(&hosts), &ids), leader, "the leader kept its place");
    let (after, _, owners_after) = assigned_over(&all(&hosts), "word-count", &ids, 72);
    assert_eq!((after, owners_after), (epoch, owners), "every host kept its units at epoch {epoch}");
    let rejoined = log_lines(dir.path(), &ids, &["rejoining", "joined cluster"]);
    assert_eq!(rejoined.len(), 3, "each host joined once: {rejoined:#?}");
}

#[test]
fn sigterm_during_an_assignment_change_exits_without_a_panic() {
    let (etcd, nats, corpus, dir) = services(20_000);
    let start = |id: &str| host_with_nats_and(&dir.path().join(id), &etcd, &nats, id, &["--batch-size", "2000"]);
    let mut hosts: Vec<(String, Server)> = ["h1", "h2"].iter().map(|id| (id.to_string(), start(id))).collect();
    agreed(&all(&hosts), &["h1", "h2"]);
    eight_partitions(&nats);
    nats.publish_file("corpus", PARTITIONS, &corpus.first);
    deploy_word_count(&hosts[0].1, dir.path());
    assigned_over(&all(&hosts), "word-count", &["h1", "h2"], 72);
    hosts[0].1.wait_for_status("word-count", |s| s["last_committed"].as_u64() >= Some(1));
    // Each round a host joins; once the assignment that gives it units is
    // seen, the oldest host is stopped with SIGTERM after a delay, while
    // the others take in the change (and then its leaving).
    for (round, delay) in [0, 100, 300].into_iter().enumerate() {
        let id = format!("j{round}");
        hosts.push((id.clone(), start(&id)));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !assignment(&hosts[0].1, "word-count").is_some_and(|(_, _, owners)| owners.contains_key(&id)) {
            assert!(Instant::now() < deadline, "host {id} was given no units within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(delay));
        let (stopped, mut server) = hosts.remove(0);
        signal(&server, "-TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "host {stopped} did not stop within 30 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(dir.path().join(&stopped).join("weir.log")).unwrap();
        assert!(!log.contains("panicked"), "host {stopped} panicked on SIGTERM {delay} ms after a change:\n{log}");
        assert!(status.success(), "host {stopped}: {status}");
    }
    nats.publish_file("corpus", PARTITIONS, &corpus.second);
    let ids: Vec<String> = hosts.iter().map(|(id, _)| id.clone()).collect();
    for (_, server) in &hosts {
        let waited = std::panic::catch_unwind(|| wait_for_counts(server, &corpus.truth, Duration::from_secs(60)));
        if let Err(panic) = waited {
            show_logs(dir.path(), &ids.iter().map(String::as_str).collect::<Vec<_>>());
            std::panic::resume_unwind(panic);
        }
    }
}

/// Prints the last lines of the logs of hosts `ids` under `dir`.
fn show_logs(dir: &Path, ids: &[&str]) {
    for id in ids {
        let text = std::fs::read_to_string(dir.join(id).join("weir.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.contains("connected to the NATS")).collect();
        println!("--- {id}:\n{}", lines[lines.len().saturating_sub(60)..].join("\n"));
    }
}

/// The topology with one of each kind of commit-phase operator.
const EVERYTHING: &str = "jetstream-everything";

/// Its states, and the window's open state.
const EVERYTHING_STATES: [&str; 7] = ["totals", "windows", "squares", "counts", "highest", "total", "open"];

/// `n` sensor readings as JSON, the `i`th at `50 i` ms: published round
/// the six partitions, each partition's timestamps rise.
fn readings(n: usize) -> Vec<String> {
    (0..n).map(|i| format!(r#"{{"sensor":"s{}","ts":{},"value":{}}}"#, i % 7, i * 50, (i * 31) % 13)).collect()
}

const READING_PARTITIONS: &str = "readings.{0..5}";

/// A host of cluster `c1` for [`EVERYTHING`]: small batches, so that a run
/// holds many, and a snapshot in the changelog every third txid.
fn everything_host(dir: &Path, etcd: &EtcdServer, nats: &NatsServer, id: &str) -> Server {
    let flags = ["--batch-size", "40", "--batch-timeout-ms", "10000", "--snapshot-every", "3"];
    host_with_nats_and(dir, etcd, nats, id, &flags)
}

/// Each state of [`EVERYTHING`] as `weir state scan` prints it with
/// `source` (`--data DIR` or `--server URL`): one JSON line a key.
fn everything_scanned(source: &[&str]) -> BTreeMap<&'static str, String> {
    EVERYTHING_STATES
        .iter()
        .map(|state| {
            let args = [&["state", "scan", "--topology", EVERYTHING, "--state", state], source].concat();
            let output = weir().env("WEIR_TOKEN", common::server::TOKEN).args(&args).output().unwrap();
            assert!(output.status.success(), "weir {args:?}: {}", text(&output));
            (*state, String::from_utf8(output.stdout).unwrap())
        })
        .collect()
}

/// What [`EVERYTHING`] run by `weir run` on one host over `lines` holds:
/// each state as scanned, and its query's answer.
fn everything_on_one_host(lines: &[String]) -> (BTreeMap<&'static str, String>, String) {
    let nats = NatsServer::start();
    nats.publish("readings", READING_PARTITIONS, lines);
    nats.create_stream("out", &["sensor-counts"]);
    let data = tempfile::tempdir().unwrap();
    let url = nats.url();
    let args = run_topology_args(TEST_TOPOLOGIES, EVERYTHING, data.path(), &["--nats", &url, "--batch-size", "100"]);
    weir_ok(&args);
    let data_arg = data.path().to_str().unwrap();
    let states = everything_scanned(&["--data", data_arg]);
    assert!(states["counts"].lines().count() == 7 && states["windows"].lines().count() > 10, "{states:?}");
    let query =
        ["query", "--component", TEST_TOPOLOGIES, "--topology", EVERYTHING, "--data", data_arg, "--query", "total"];
    let printed = String::from_utf8(weir_ok(&query).stdout).unwrap();
    let answer = printed.lines().last().unwrap_or_default().to_owned();
    assert_eq!(answer, format!("[[{}]]", lines.len()), "{printed}");
    (states, answer)
}

/// Each sensor's count, from `lines`.
fn sensor_counts(lines: &[String]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for line in lines {
        let reading: Value = serde_json::from_str(line).unwrap();
        *counts.entry(reading["sensor"].as_str().unwrap().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Waits until every host answers every state of [`EVERYTHING`] as `truth`
/// holds it, and its query as `answer`.
fn everything_exact_on_every_host(hosts: &[&Server], truth: &BTreeMap<&'static str, String>, answer: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for server in hosts {
        loop {
            let url = server.url();
            let got = std::panic::catch_unwind(|| everything_scanned(&["--server", &url]));
            if got.as_ref().is_ok_and(|got| got == truth) {
                break;
            }
            if Instant::now() > deadline {
                show_logs(dir, &["h1", "h2", "h3"]);
                let got = got.unwrap_or_else(|_| panic!("host {url} does not answer its states"));
                for (state, lines) in truth {
                    let on_host: BTreeSet<&str> = got[state].lines().collect();
                    let on_one: BTreeSet<&str> = lines.lines().collect();
                    let only_host: Vec<&&str> = on_host.difference(&on_one).take(20).collect();
                    let only_one: Vec<&&str> = on_one.difference(&on_host).take(20).collect();
                    println!("state {state}: only on host {url}: {only_host:?}; only on one host: {only_one:?}");
                }
                panic!("host {url} does not answer as one host does");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let query = weir_against(server, &["query", "--topology", EVERYTHING, "--query", "total"]);
        assert_eq!(query.lines().last().unwrap_or_default(), answer, "{}", server.url());
    }
}

/// The owner of [`EVERYTHING`]'s one unit as `server` sees it.
fn whole_owner(server: &Server) -> Option<String> {
    whole_owner_of(server, EVERYTHING)
}

/// The owner of topology placed whole `name`'s one unit as `server` sees it.
fn whole_owner_of(server: &Server, name: &str) -> Option<String> {
    let (_, _, hosts) = assignment(server, name)?;
    hosts.into_iter().find(|(_, units)| units == &[format!("whole/{name}")]).map(|(host, _)| host)
}

/// Checks that stream `out` holds each committed batch of [`EVERYTHING`]
/// once: txids 1 to the last committed, each with messages 0..k, each
/// sensor's counts rising batch by batch to its exact final count.
fn assert_sink_holds_each_batch_once(nats: &NatsServer, server: &Server, truth: &BTreeMap<String, i64>) {
    let written: Vec<(u64, u32, Vec<u8>)> = nats
        .messages("out")
        .into_iter()
        .map(|(id, payload)| {
            let parts: Vec<&str> = id.split('/').collect();
            assert_eq!(parts[..2], [EVERYTHING, "sensor-counts"], "message id {id:?}");
            (parts[2].parse().unwrap(), parts[3].parse().unwrap(), payload)
        })
        .collect();
    let last = written.iter().map(|(txid, _, _)| *txid).max().expect("the sink published");
    // The status is shared every two seconds: it catches up.
    server.wait_for_status(EVERYTHING, |s| s["last_committed"].as_u64() == Some(last));
    let written = written.iter().map(|(txid, n, payload)| (*txid, *n, payload.as_slice()));
    common::nats::assert_output_once_by("sensor", written, last, truth);
}

/// Three hosts, etcd and a nats-server holding `first` readings in six
/// partitions and an empty stream `out` for the sink, [`EVERYTHING`]
/// deployed through the second host and placed whole.
fn everything_deployed(first: &[String]) -> (EtcdServer, NatsServer, tempfile::TempDir, Vec<(String, Server)>) {
    let (etcd, nats, dir) = (EtcdServer::start(), NatsServer::start(), tempfile::tempdir().unwrap());
    let ids = ["h1", "h2", "h3"];
    let hosts: Vec<(String, Server)> =
        ids.iter().map(|id| (id.to_string(), everything_host(&dir.path().join(id), &etcd, &nats, id))).collect();
    agreed(&all(&hosts), &ids);
    nats.publish("readings", READING_PARTITIONS, first);
    nats.create_stream("out", &["sensor-counts"]);
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "everything.weir");
    let (status, deployed) = hosts[1].1.api("POST", &format!("/v1/topologies?topology={EVERYTHING}"), &bytes);
    assert_eq!(status, 201, "{deployed}");
    assert_eq!(deployed["cluster"]["placement"], "whole", "{deployed}");
    assert_eq!(deployed["cluster"]["units"], 1, "{deployed}");
    // One unit, owned by one host, seen alike on every host.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owners: Vec<Option<String>> = hosts.iter().map(|(_, s)| whole_owner(s)).collect();
        if owners[0].is_some() && owners.iter().all(|o| *o == owners[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "no common owner of {EVERYTHING} within 30 s: {owners:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    (etcd, nats, dir, hosts)
}

#[test]
fn a_topology_of_every_kind_of_operator_placed_whole_answers_on_every_host_as_on_one() {
    let lines = readings(3000);
    let (truth, answer) = everything_on_one_host(&lines);
    let (_etcd, nats, dir, hosts) = everything_deployed(&lines[..1500]);
    hosts[0].1.wait_for_status(EVERYTHING, |s| s["last_committed"].as_u64() >= Some(2));
    nats.publish("readings", READING_PARTITIONS, &lines[1500..]);
    everything_exact_on_every_host(&all(&hosts), &truth, &answer, dir.path());
    assert_sink_holds_each_batch_once(&nats, &hosts[2].1, &sensor_counts(&lines));
    // Reads of a state the topology lacks are refused as on one host.
    let (status, body) = hosts[0].1.api("GET", &format!("/v1/topologies/{EVERYTHING}/states/nothing"), b"");
    assert_eq!(status, 404, "{body}");

    // Spouts that are not JetStream run on the owner: the generator, and a
    // file's lines, the file under every host's input directory.
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "spouts.weir");
    let text = sentences(2000).iter().map(|l| format!("{l}\n")).collect::<String>();
    let mut words: BTreeMap<String, i64> = BTreeMap::new();
    for word in text.split_whitespace() {
        *words.entry(word.to_owned()).or_insert(0) += 1;
    }
    for (id, _) in &hosts {
        std::fs::write(dir.path().join(id).join("in/sentences.txt"), &text).unwrap();
    }
    for query in ["topology=generated-total", "topology=word-count&input=in/sentences.txt"] {
        let (status, deployed) = hosts[2].1.api("POST", &format!("/v1/topologies?{query}"), &bytes);
        assert_eq!(status, 201, "{deployed}");
        assert_eq!(deployed["cluster"]["placement"], "whole", "{deployed}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (_, server) in &hosts {
        loop {
            let (status, total) = server.api("GET", "/v1/topologies/generated-total/states/total", b"");
            let counted = if status == 200 { server.counts("word-count") } else { BTreeMap::new() };
            if total.as_array().and_then(|t| t.first()).is_some_and(|t| t["value"] == 12_497_500) && counted == words {
                break;
            }
            assert!(Instant::now() < deadline, "{status} {total} {}", server.url());
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    // Each topology placed whole went to the least busy host: three
    // topologies on three hosts, one each.
    let owners: BTreeSet<String> = [EVERYTHING, "generated-total", "word-count"]
        .iter()
        .map(|name| whole_owner_of(&hosts[1].1, name).unwrap_or_else(|| panic!("{name} has no owner")))
        .collect();
    assert_eq!(owners.len(), 3, "{owners:?}");
}

/// Waits until `server` sees [`EVERYTHING`]'s unit owned by a host other
/// than `gone`; returns it.
fn moved_off(server: &Server, gone: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match whole_owner(server) {
            Some(owner) if owner != gone => return owner,
            _ => assert!(Instant::now() < deadline, "the unit did not move off host {gone}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_topology_placed_whole_stays_exact_when_its_host_is_killed_mid_run_and_restarted_and_the_next_paused() {
    let lines = readings(4000);
    let (truth, answer) = everything_on_one_host(&lines);
    let (etcd, nats, dir, mut hosts) = everything_deployed(&lines[..1000]);
    hosts[0].1.wait_for_status(EVERYTHING, |s| s["last_committed"].as_u64() >= Some(2));
    let owner = whole_owner(&hosts[0].1).expect("an owner");
    let at = hosts.iter().position(|(id, _)| *id == owner).unwrap();
    // More input, and the owner killed while it reads it.
    nats.publish("readings", READING_PARTITIONS, &lines[1000..2000]);
    std::thread::sleep(Duration::from_millis(300));
    drop(hosts.remove(at));
    nats.publish("readings", READING_PARTITIONS, &lines[2000..3000]);
    let next = moved_off(&hosts[0].1, &owner);
    // Back: its own copy is put back from the changelog when it owns again.
    hosts.push((owner.clone(), everything_host(&dir.path().join(&owner), &etcd, &nats, &owner)));
    agreed(&all(&hosts), &["h1", "h2", "h3"]);

    // The next owner paused past its lease while input comes: another host
    // takes over, and the paused one, woken, is fenced and publishes nothing.
    let paused = hosts.iter().position(|(id, _)| *id == next).unwrap();
    signal(&hosts[paused].1, "-STOP");
    nats.publish("readings", READING_PARTITIONS, &lines[3000..]);
    let others: Vec<&Server> = hosts.iter().filter(|(id, _)| *id != next).map(|(_, s)| s).collect();
    let third = moved_off(others[0], &next);
    std::thread::sleep(Duration::from_secs(1));
    signal(&hosts[paused].1, "-CONT");
    everything_exact_on_every_host(&all(&hosts), &truth, &answer, dir.path());
    assert_sink_holds_each_batch_once(&nats, &hosts[0].1, &sensor_counts(&lines));
    let taken = log_lines(dir.path(), &["h1", "h2", "h3"], &["took it over at epoch"]);
    assert!(taken.iter().any(|l| l.starts_with(&format!("{next}:"))), "{taken:#?}");
    assert!(taken.iter().any(|l| l.starts_with(&format!("{third}:"))), "{taken:#?}");
}
