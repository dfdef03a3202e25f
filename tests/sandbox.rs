//! Hostile guests: each attack on the sandbox fails its batch (or is refused
//! at load) with the cause named, the host stays up, and committed state is
//! unchanged. Each test prints one line: the attack and the error it got.

mod common;

use common::server::{Server, bundle};
use common::*;
use std::io::Write;
use std::process::Output;
use std::time::{Duration, Instant};

/// How long any one `weir` run of these tests may take: far more than
/// any of them needs, far less than the hour a blocked guest sleeps.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// The most resident memory a `weir` process of these tests may reach,
/// in KiB: a hostile guest must not make the host hold much more than its
/// sandbox (64 MiB of linear memory at most).
const MAX_RSS_KIB: u64 = 512 * 1024;

/// Runs `weir` with `args` within [`RUN_LIMIT`], and checks its memory
/// stayed within [`MAX_RSS_KIB`].
fn weir_contained(what: &str, args: &[&str]) -> Output {
    weir_contained_peak(what, args).0
}

/// [`weir_contained`], with the host's peak resident memory, in MiB.
fn weir_contained_peak(what: &str, args: &[&str]) -> (Output, u64) {
    let run = weir_bounded(args, RUN_LIMIT);
    assert!(run.peak_rss_kib <= MAX_RSS_KIB, "{what}: weir reached {} MiB of resident memory", run.peak_rss_kib / 1024);
    (run.output, run.peak_rss_kib >> 10)
}

/// A data dir with one committed batch of a hostile topology (it behaves
/// until a sentence holds the word `attack`), and that batch's input.
struct Target {
    dir: tempfile::TempDir,
    input: std::path::PathBuf,
    data: std::path::PathBuf,
}

fn prepare(component: &str, topology: &str) -> (Target, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = sentences_input(dir.path(), 300);
    weir_ok(&run_args(component, &data, &input, &["--topology", topology, "--batch-size", "100"]));
    let before = scan(&data, topology, "counts");
    let target = Target { dir, input, data };
    assert!(!before.is_empty());
    (target, before)
}

fn assert_refused(attack: &str, output: &Output, cause: &str) -> String {
    assert_eq!(output.status.code(), Some(1), "{attack}: weir did not exit with an error:\n{}", text(output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error = stderr.split("\nerror: ").nth(1).or_else(|| stderr.strip_prefix("error: ")).unwrap_or_else(|| {
        panic!("{attack}: no error in:\n{stderr}");
    });
    assert!(error.contains(cause), "{attack}: expected {cause:?} in the error:\n{error}");
    let first_line = error.lines().next().unwrap_or_default().to_owned();
    // Straight to stderr, past the test harness's capture: the suite's
    // report of what each attack got.
    let _ = writeln!(std::io::stderr().lock(), "attack {attack}: {first_line}");
    first_line
}

/// Feeds the attack to a prepared topology and checks it fails with `cause`
/// naming the topology, operator, txid and attempt, leaving state as it was.
/// Returns the host's peak resident memory, in MiB.
fn attack(component: &str, topology: &str, extra: &[&str], cause: &str) -> u64 {
    let (target, before) = prepare(component, topology);
    append_lines(&target.input, &["the attack begins"]);
    let mut args = run_args(component, &target.data, &target.input, &["--topology", topology, "--max-attempts", "2"]);
    args.extend_from_slice(extra);
    let (output, peak_mib) = weir_contained_peak(topology, &args);
    let error = assert_refused(topology, &output, cause);
    assert!(
        error.contains(&format!(
            "topology {topology} halted: txid 4 failed 2 times; last error at attempt 1: operator "
        )),
        "{topology}: the error does not name the topology, txid, attempt and operator: {error}"
    );
    assert_eq!(scan(&target.data, topology, "counts"), before, "{topology}: committed state changed");
    peak_mib
}

/// An attack that would make the host hold gigabytes: it must fail with
/// `cause` while the host stays within `max_mib` of memory.
fn attack_bounded(topology: &str, extra: &[&str], cause: &str, max_mib: u64) {
    let peak = attack(HOSTILE, topology, extra, cause);
    let _ = writeln!(std::io::stderr().lock(), "attack {topology}: host peak RSS {peak} MiB");
    assert!(peak < max_mib, "{topology}: the host's memory peaked at {peak} MiB");
}

/// A state updater writing or reading without end hits the state limit per
/// call, or per batch where that is set lower.
#[test]
fn a_state_updater_flooding_its_state_hits_the_state_limits_per_call_and_per_batch() {
    for (topology, extra, cause) in [
        ("state-write-flood", &[][..], "operator attacker: trap: state write limit of 64 MiB per call exceeded: "),
        ("state-write-flood", &["--max-batch-state-write-mib", "8"], "state write limit of 8 MiB per batch exceeded"),
        ("state-read-flood", &[], "operator attacker: trap: state read limit of 64 MiB per call exceeded"),
        (
            "state-read-flood",
            &["--max-batch-state-reads", "20"],
            "state read limit of 20 entries per batch exceeded: 21 read through state counts (see --max-batch-state-reads)",
        ),
    ] {
        attack_bounded(topology, extra, cause, 512);
    }
}

#[test]
fn a_guest_writing_megabytes_to_stderr_hits_the_log_output_limit() {
    attack_bounded("log-flood", &[], "operator attacker: trap: log output limit of 1024 KiB per call exceeded", 512);
    attack_bounded("log-flood", &["--max-log-lines", "50"], "log output limit of 50 lines per call exceeded", 512);
}

/// Deploys the hostile `topology` over the lines `input` to a server
/// started with `flags`, beside a word count: it must fail with `cause`,
/// the word count end exact, and the server stay within `max_mib`.
fn attack_served(topology: &str, flags: &[&str], input: &str, cause: &str, max_mib: u64) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), flags);
    server.deploy_word_count(dir.path());
    std::fs::write(dir.path().join("in/attack.txt"), input).unwrap();
    let bundle = bundle(dir.path(), HOSTILE, "hostile.weir");
    let path = format!("/v1/topologies?input=in/attack.txt&topology={topology}");
    let (status, body) = server.api("POST", &path, &bundle);
    assert_eq!(status, 201, "{body}");
    let failed = server.wait_for_status(topology, |s| s["state"] == "failed");
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains(cause), "{failed}");
    server.assert_word_count_exact();
    let peak = peak_rss_kib(server.child.id()).unwrap() >> 10;
    let _ = writeln!(std::io::stderr().lock(), "attack {topology} served: {error:.80}; server peak RSS {peak} MiB");
    assert!(peak < max_mib, "the server's memory peaked at {peak} MiB");
}

#[test]
fn a_state_flood_deployed_to_a_server_fails_and_its_sibling_ends_exact() {
    attack_served(
        "state-write-flood",
        &[],
        "a quiet start\nthe attack begins\n",
        "operator attacker: trap: state write limit of 64 MiB per call exceeded",
        768,
    );
}

/// The `hoard` topology's sixteen filters each keep 40 MiB, within the
/// 64 MiB of an instance: 640 MiB in all, past a topology's limit of 320.
#[test]
fn many_instances_each_within_its_own_limit_are_held_to_the_topologys_memory_limit() {
    attack_bounded(
        "hoard",
        &["--max-topology-memory-mib", "320"],
        "trap: the topology's memory limit of 320 MiB exceeded: its operator instances would hold",
        480,
    );
}

#[test]
fn many_instances_each_within_its_own_limit_are_held_to_the_hosts_memory_limit_for_guests() {
    attack_bounded(
        "hoard",
        &["--max-guest-memory-mib", "320"],
        "trap: this host's memory limit for guests of 320 MiB exceeded",
        480,
    );
}

#[test]
fn a_hoarding_topology_deployed_to_a_server_fails_and_its_sibling_ends_exact() {
    attack_served(
        "hoard",
        &["--max-topology-memory-mib", "320"],
        "each filter keeps its memory\n",
        "trap: the topology's memory limit of 320 MiB exceeded",
        480,
    );
}

#[test]
fn an_infinite_loop_hits_the_cpu_time_limit() {
    attack(HOSTILE, "infinite-loop", &["--max-call-ms", "200"], "CPU time limit of 200 ms per call exceeded");
}

#[test]
fn a_guest_sleeping_in_wasi_is_abandoned_at_its_call_deadline() {
    attack(
        HOSTILE,
        "sleep-in-wasi",
        &["--max-call-ms", "200"],
        "deadline of 400 ms per call exceeded: the guest was blocked in a host call",
    );
}

#[test]
fn a_guest_polling_a_far_off_instant_is_abandoned_at_its_call_deadline() {
    attack(
        HOSTILE,
        "poll-far-instant",
        &["--max-call-ms", "200"],
        "deadline of 400 ms per call exceeded: the guest was blocked in a host call",
    );
}

#[test]
fn a_guest_spout_sleeping_in_wasi_is_abandoned_at_its_call_deadline() {
    let (_dir, data) = data_dir();
    // One batch at a time, so that the three batches before the blocked
    // emission are committed first.
    let extra = ["--max-pending", "1", "--max-attempts", "2", "--max-call-ms", "200"];
    let output = weir_contained("sleepy-spout", &run_topology_args(HOSTILE, "sleepy-spout", &data, &extra));
    assert_refused(
        "sleepy-spout",
        &output,
        "topology sleepy-spout halted: emitting txid 4 failed 2 times: the spout's emit failed: trap: deadline of \
         400 ms per call exceeded: the guest was blocked in a host call",
    );
    let batch = ["the spout emits", "then the spout sleeps"];
    let three_batches: Vec<&str> = batch.iter().cycle().take(6).copied().collect();
    assert_counts_eq(&counts(&data, "sleepy-spout"), &count_words(&three_batches));
}

#[test]
fn a_component_whose_description_blocks_is_refused_at_its_call_deadline() {
    load_refused(
        "blocking-describe",
        BLOCKING_DESCRIBE,
        &["--max-call-ms", "200"],
        "the component's describe call failed: trap: deadline of 400 ms per call exceeded: the guest was blocked in a \
         host call",
    );
}

#[test]
fn unbounded_memory_growth_hits_the_memory_limit_the_topology_asked_for() {
    attack(HOSTILE, "grow-memory", &[], "memory limit of 16 MiB exceeded");
}

#[test]
fn a_guest_whose_memory_only_grows_gets_a_fresh_instance_before_it_traps() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = sentences_input(dir.path(), 300);
    let args = run_args(HOSTILE, &data, &input, &["--topology", "leak", "--batch-size", "10"]);
    let output = weir().env("WEIR_LOG", "weir=debug").args(&args).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let log = text(&output);
    assert!(log.contains("committed 30 batches (300 tuples)") && !log.contains("replayed"), "{log}");
    // It leaks 3 MiB a call under a limit of 16 MiB: replaced once it grew
    // a quarter of the limit since its first call, well before three
    // quarters.
    let held: Vec<u64> = log
        .split("operator leaky: replacing its instance, which holds ")
        .skip(1)
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(!held.is_empty() && held.iter().all(|mib| *mib < 12), "replaced holding {held:?} MiB: {log}");
    assert_counts_eq(&counts(&data, "leak"), &count_words(&sentences(300)));
}

#[test]
fn deep_recursion_overflows_the_stack() {
    attack(HOSTILE, "deep-recursion", &[], "stack overflow");
}

#[test]
fn a_huge_buffer_hits_the_output_limit() {
    attack(HOSTILE, "huge-output", &["--max-output-mib", "4"], "output limit of 4 MiB per call exceeded");
}

#[test]
fn fanning_out_too_far_hits_the_tuple_limit() {
    attack(HOSTILE, "fan-out", &["--max-output-tuples", "100000"], "output limit of 100000 tuples per call exceeded");
}

#[test]
fn a_panic_shows_its_message_and_a_wasm_backtrace() {
    attack(HOSTILE, "panic", &[], "the hostile guest panics on purpose");
    let (target, _) = prepare(HOSTILE, "panic");
    append_lines(&target.input, &["attack"]);
    let output =
        weir_output(&run_args(HOSTILE, &target.data, &target.input, &["--topology", "panic", "--max-attempts", "1"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("wasm backtrace"), "{stderr}");
    assert!(stderr.contains("hostile::Hostile"), "the backtrace names no guest function:\n{stderr}");
}

/// What WASI offers a guest: no filesystem, no sockets, no environment.
#[test]
fn the_filesystem_sockets_environment_and_arguments_are_out_of_reach() {
    for (topology, cause) in [
        ("read-passwd", "reading /etc/passwd failed:"),
        ("open-socket", "opening a socket failed:"),
        ("read-env", "reading $HOME failed: environment variable not found; no variables, no arguments"),
    ] {
        attack(HOSTILE, topology, &[], cause);
    }
}

/// A raw guest's output buffers the host must not trust.
#[test]
fn a_malformed_output_batch_fails_the_batch() {
    for (topology, cause) in [
        // A batch buffer cut short.
        ("malformed-output", "operator split: returned a malformed batch: malformed batch at byte 8"),
        // More fields than the operator declares.
        ("extra-fields", "emitted rows of 2 values, but it declares 1 output fields"),
        // A row extending an input row that is not there.
        (
            "out-of-range-parent",
            "operator split: returned a malformed batch: malformed batch at byte 8: a row extends input row 4000000 of 1",
        ),
    ] {
        attack(RAW_GUEST, topology, &[], cause);
    }
}

fn load_refused(attack: &str, component: &str, extra: &[&str], cause: &str) {
    let (target, before) = prepare(WORD_COUNT, "word-count");
    let args = run_args(component, &target.data, &target.input, extra);
    assert_refused(attack, &weir_contained(attack, &args), cause);
    assert_eq!(scan(&target.data, "word-count", "counts"), before, "{attack}: committed state changed");
}

#[test]
fn importing_an_interface_the_host_lacks_is_refused_at_load() {
    load_refused(
        "unknown-import",
        UNKNOWN_IMPORT,
        &[],
        "cannot be linked: it imports test:unknown-import/vault, which this host does not provide",
    );
}

#[test]
fn malformed_components_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let truncated = {
        let bytes = std::fs::read(WORD_COUNT).unwrap();
        write("truncated.wasm", &bytes[..bytes.len() / 2])
    };
    let cases = [
        ("missing-file", dir.path().join("missing.wasm").to_str().unwrap().to_owned(), "cannot read component"),
        ("garbage", write("garbage.wasm", b"this is not wasm"), "is not a WebAssembly file"),
        ("core-module", write("core.wasm", b"\0asm\x01\0\0\0"), "is a core WebAssembly module, not a component"),
        ("other-world", write("empty.wasm", b"\0asm\x0d\0\x01\0"), "does not implement the weir:topology@0.1.0 world"),
        ("truncated", truncated, "is not a valid component"),
    ];
    for (attack, component, cause) in &cases {
        load_refused(attack, component, &[], cause);
    }
}

#[test]
fn asking_for_more_than_the_host_allows_is_refused_at_load() {
    load_refused(
        "ask-too-much",
        HOSTILE,
        &["--topology", "ask-too-much"],
        "operator attacker asks for a memory (MiB) limit of 4096, more than this host allows (64; see --max-memory-mib)",
    );
}

#[test]
fn a_directory_is_granted_only_where_the_host_allows_it() {
    let (target, _) = prepare(HOSTILE, "steady");
    let cwd = target.dir.path();
    std::fs::create_dir(cwd.join("granted")).unwrap();
    std::fs::write(cwd.join("granted/words.txt"), "granted granted words").unwrap();
    std::fs::write(&target.input, "an attack reads a file\n").unwrap();
    let data = cwd.join("granted-data");
    let args = run_args(HOSTILE, &data, &target.input, &["--topology", "read-granted"]);
    let refused = weir().current_dir(cwd).args(&args).output().unwrap();
    assert_refused(
        "read-granted-without-allow-dir",
        &refused,
        "operator attacker asks for read-only access to granted",
    );
    assert!(!data.exists(), "a refused topology left a data dir behind");

    let mut allowed = args.clone();
    allowed.extend_from_slice(&["--allow-dir", cwd.to_str().unwrap()]);
    let output = weir().current_dir(cwd).args(&allowed).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let counts = counts(&data, "read-granted");
    assert_eq!(counts.get("granted"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("words"), Some(&1), "{counts:?}");
}

#[test]
fn another_topology_keeps_committing_while_a_hostile_one_fails() {
    let lines = sentences(20_000);
    let (_dir, input, data) = input_and_data("input.txt", &format!("attack\n{}\n", lines.join("\n")));
    let output = weir()
        .env("WEIR_LOG", "weir=debug")
        .args(run_args(
            HOSTILE,
            &data,
            &input,
            // Each of steady's 2,000 batches commits on its own, durably:
            // it is still committing when infinite-loop's calls time out.
            &[
                "--topology",
                "steady",
                "--topology",
                "infinite-loop",
                "--batch-size",
                "10",
                "--max-pending",
                "1",
                "--max-call-ms",
                "300",
            ],
        ))
        .output()
        .unwrap();
    let error = assert_refused("infinite-loop-beside-steady", &output, "topology infinite-loop halted");
    assert!(!error.contains("topology steady"), "{error}");
    let log = String::from_utf8_lossy(&output.stderr);
    let first_failure = log.find("topology infinite-loop: txid 1 attempt 0 failed").expect("a first failure");
    let last_failure = log.find("topology infinite-loop: txid 1 attempt 3 failed").expect("a fourth failure");
    let committed_between = log[first_failure..last_failure].matches("topology steady: committed txid").count();
    assert!(committed_between > 0, "steady committed nothing while infinite-loop failed:\n{log}");
    // `steady` emits nothing for the `attack` line, and counts every other.
    assert_counts_eq(&counts(&data, "steady"), &count_words(&lines));
    let data_dir = data.to_str().unwrap();
    let hostile_state =
        weir_output(&["state", "scan", "--data", data_dir, "--topology", "infinite-loop", "--state", "counts"]);
    assert!(String::from_utf8_lossy(&hostile_state.stderr).contains("has no state counts"), "{}", text(&hostile_state));
}

#[test]
fn names_that_would_mean_something_elsewhere_are_refused_at_load() {
    for (topology, cause) in [
        ("quote\"d", r#"topology name "quote\"d" is not allowed: a name is ASCII letters, digits, '-', '_' and '.'"#),
        ("space-in-operator", r#"topology space-in-operator: operator name "split words" is not allowed"#),
        ("newline-in-field", r#"topology newline-in-field: field name "line\nbreak" is not allowed"#),
        ("slash-in-state", r#"topology slash-in-state: state name "a/b" is not allowed"#),
    ] {
        load_refused(topology, BAD_TOPOLOGIES, &["--topology", topology], cause);
    }
}

#[path = "guests/hostile-topologies/src/description.rs"]
mod hostile_description;

/// A bundle of the hostile-topologies component, its manifest listing what
/// the component describes.
fn hostile_topologies_bundle() -> Vec<u8> {
    use weir_engine::bundle::{Bundle, BundledTopology};
    let name = "hostile_topologies.wasm".to_owned();
    let definitions = weir_sdk::topology::parse_description(&hostile_description::description()).unwrap();
    let topologies = definitions.into_iter().map(|d| BundledTopology::single(name.clone(), d)).collect();
    Bundle::new(vec![(name, std::fs::read(HOSTILE_TOPOLOGIES).unwrap())], topologies).to_bytes().unwrap()
}

/// What each hostile description gets when it loads, by topology.
const HOSTILE_DESCRIPTIONS: &[(&str, &str)] = &[
    ("deep-chain", "topology deep-chain has 15000 nodes, more than this host allows (1000; see --max-nodes)"),
    (
        "huge-parallelism",
        "topology huge-parallelism: operator split asks for a parallelism of 4294967295, more than this host \
         allows (64; see --max-parallelism)",
    ),
    ("state-escapes", "topology state-escapes: state name \"../../escape\" is not allowed"),
];

#[test]
fn hostile_descriptions_are_refused_at_load() {
    assert_eq!(hostile_description::DEPTH, 15_000);
    for (topology, cause) in HOSTILE_DESCRIPTIONS {
        load_refused(topology, HOSTILE_TOPOLOGIES, &["--topology", topology], cause);
    }
}

#[test]
fn hostile_descriptions_deployed_to_a_server_are_refused_and_the_sibling_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--max-upload-mib", "64"]);
    server.deploy_word_count(dir.path());
    std::fs::write(dir.path().join("in/hostile.txt"), "the attack begins\n").unwrap();
    let bundle = hostile_topologies_bundle();
    for (topology, cause) in HOSTILE_DESCRIPTIONS {
        let (status, body) =
            server.api("POST", &format!("/v1/topologies?topology={topology}&input=in/hostile.txt"), &bundle);
        assert_eq!(status, 400, "{topology}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(cause), "{topology}: expected {cause:?} in {body}");
        let _ = writeln!(std::io::stderr().lock(), "attack {topology} (served): {error}");
    }
    // A manifest of 5 MiB (parsed whole it could take a hundred times that).
    let mut huge_manifest = b"WEIRBNDL".to_vec();
    huge_manifest.extend(1u32.to_le_bytes());
    huge_manifest.extend((5u32 << 20).to_le_bytes());
    huge_manifest.resize(huge_manifest.len() + (5 << 20), b' ');
    let (status, body) = server.api("POST", "/v1/topologies?input=in/hostile.txt", &huge_manifest);
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("its manifest is 5242880 bytes, more than the 4 MiB a host reads"), "{body}");
    server.assert_word_count_exact();
    let (status, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(status, 200);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "only the sibling is deployed: {listed}");
}

#[test]
fn a_served_guest_blocked_in_wasi_fails_while_a_sibling_counts_exactly_and_is_deleted_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A call's deadline of 2 s: long enough to delete the topology while its
    // guest is blocked, and far below the hour it sleeps.
    let server = Server::start_with(dir.path(), &["--max-call-ms", "1000"]);
    server.deploy_word_count(dir.path());
    let (input, _) = sentences_input(&dir.path().join("in"), 300);
    let bundle = bundle(dir.path(), HOSTILE, "hostile.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=sleep-in-wasi&input=in/input.txt", &bundle);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("sleep-in-wasi", 1);
    let before = server.counts("sleep-in-wasi");
    append_lines(&input, &["the attack begins"]);

    let failed = server.wait_for_status("sleep-in-wasi", |s| s["state"] == "failed");
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("topology sleep-in-wasi halted: txid 2 failed 5 times")
            && error.contains("deadline of 2000 ms per call exceeded: the guest was blocked in a host call"),
        "{failed}"
    );
    assert_eq!(server.counts("sleep-in-wasi"), before, "committed state changed");
    let _ = writeln!(std::io::stderr().lock(), "attack served-sleep-in-wasi: {}", error.lines().next().unwrap_or(""));

    // Started again, it blocks again; deleting it waits for no more than
    // the call in flight.
    for verb in ["stop", "resume"] {
        let (status, body) = server.api("POST", &format!("/v1/topologies/sleep-in-wasi/{verb}"), b"");
        assert_eq!(status, 200, "{verb}: {body}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let (status, body) = server.api("DELETE", "/v1/topologies/sleep-in-wasi?state=keep", b"");
    assert_eq!(status, 204, "{body}");
    assert!(asked.elapsed() < Duration::from_secs(60), "the delete took {:?}", asked.elapsed());
    let (status, _) = server.api("GET", "/v1/topologies/sleep-in-wasi", b"");
    assert_eq!(status, 404);

    server.assert_word_count_exact();
    let peak = peak_rss_kib(server.child.id()).unwrap();
    assert!(peak <= MAX_RSS_KIB, "the server reached {} MiB of resident memory", peak / 1024);
}

#[test]
fn a_component_whose_compiling_needs_more_than_the_memory_bound_is_refused_and_the_host_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    // A million nested blocks, 3 MB: compiling them in the host took
    // 870 MiB resident, past 1,024 MiB of data.
    let path = dir.path().join("nested-blocks.wasm");
    std::fs::write(&path, hand_made::nested_blocks(1_000_000)).unwrap();
    let (output, peak) = weir_contained_peak("compile bomb", &["inspect", path.to_str().unwrap()]);
    let error =
        assert_refused("compile bomb", &output, "nested-blocks.wasm cannot be compiled within this host's bounds");
    assert!(error.contains("needs more than the 1024 MiB this host allows (--compile-memory-mib)"), "{error}");
    assert!(peak < 128, "the host's memory peaked at {peak} MiB while a child compiled");
}

#[test]
fn a_component_whose_compiling_takes_too_long_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // 7.5 MB of one function's instructions: most of a second to compile.
    let path = dir.path().join("long.wasm");
    std::fs::write(&path, hand_made::dropped_constants(2_500_000)).unwrap();
    let output = weir_contained("slow compile", &["inspect", path.to_str().unwrap(), "--compile-timeout-ms", "50"]);
    assert_refused(
        "slow compile",
        &output,
        "long.wasm cannot be compiled within this host's bounds: compiling it took longer than the 50 ms this host allows (--compile-timeout-ms)",
    );
}

#[test]
fn a_compile_bomb_deployed_to_a_server_is_refused_and_its_sibling_ends_exact() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--compile-memory-mib", "256"]);
    server.deploy_word_count(dir.path());
    // The word count's bundle, its component swapped for 300,000 nested
    // blocks (900 KB, within the server's 1 MiB uploads).
    let word_count = bundle(dir.path(), WORD_COUNT, "wc.weir");
    let manifest =
        weir_engine::bundle::Bundle::from_bytes(std::path::Path::new("wc.weir"), &word_count).unwrap().manifest;
    let component = manifest.components[0].name.clone();
    let bomb = weir_engine::bundle::Bundle::new(
        vec![(component.clone(), hand_made::nested_blocks(300_000))],
        manifest.topologies,
    );
    let (status, body) = server.api("POST", "/v1/topologies?input=in/corpus.txt&name=bomb", &bomb.to_bytes().unwrap());
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    let _ = writeln!(std::io::stderr().lock(), "attack compile bomb served: {error}");
    assert!(error.contains(&format!("{component} cannot be compiled within this host's bounds")), "{error}");
    assert!(error.contains("needs more than the 256 MiB this host allows"), "{error}");
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    server.assert_word_count_exact();
    let peak = peak_rss_kib(server.child.id()).unwrap() >> 10;
    assert!(peak < 256, "the server's memory peaked at {peak} MiB");
}
