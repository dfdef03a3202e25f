//! A hostile guest's calls against every limit of its sandbox: each limit
//! a call hits is named, and a call blocked in a host call is abandoned at
//! its deadline, whichever thread runs it.

use crate::bindings::BatchContext;
use crate::sandbox::OperatorSandbox;
use crate::{CallError, ComponentCache, Limit, LoadedComponent, Request};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use weir_sdk::codec::{BatchWriter, ValueRef};

/// The hostile test guest, compiled once for every test of this module.
fn hostile() -> &'static LoadedComponent {
    static HOSTILE: OnceLock<LoadedComponent> = OnceLock::new();
    HOSTILE.get_or_init(|| {
        let engine = crate::engine(true).unwrap();
        let cache = ComponentCache::new(Path::new(weir_test_guests::GUEST_TARGET_DIR).join("compiled-cache"));
        LoadedComponent::load(&engine, &cache, Path::new(weir_test_guests::HOSTILE)).unwrap()
    })
}

/// A sandbox with calls of `call_ms` of CPU time.
fn sandbox(call_ms: u64) -> OperatorSandbox {
    OperatorSandbox {
        memory_bytes: 64 << 20,
        call_ms,
        output_bytes: 4 << 20,
        output_tuples: 100_000,
        read_only_dirs: Vec::new(),
        log: weir_config::LogLimits::default(),
        memory_pool: crate::memory_pool::TopologyMemory::new(u64::MAX),
    }
}

fn batch(sentence: &str, attempt: u32) -> (BatchContext, Vec<u8>) {
    let mut input = BatchWriter::new(1);
    input.push_row(0, [ValueRef::Str(sentence)]).unwrap();
    let ctx = BatchContext {
        topology: String::new(),
        operator: "attacker".to_owned(),
        txid: 1,
        attempt,
        partition: 0,
        fields: vec!["sentence".to_owned()],
    };
    (ctx, input.finish_batch().into_bytes())
}

/// Feeds the sentence "attack" to `topology`'s attacker in a fresh
/// instance whose calls get `call_ms` of CPU time.
fn attack(topology: &str, call_ms: u64) -> Result<Vec<u8>, CallError> {
    let mut guest = hostile().instantiate(topology, "attacker", &sandbox(call_ms))?;
    let (ctx, input) = batch("attack", 0);
    guest.call_operator(&BatchContext { topology: topology.to_owned(), ..ctx }, Request::Function(&input))
}

fn limit_hit(topology: &str, call_ms: u64) -> Option<Limit> {
    match attack(topology, call_ms) {
        Err(CallError::Trap { limit, .. }) => limit,
        other => panic!("{topology}: expected a trap, got {other:?}"),
    }
}

#[test]
fn each_limit_a_call_hits_is_named() {
    for (topology, call_ms, limit) in [
        ("infinite-loop", 100, Limit::Cpu),
        ("sleep-in-wasi", 100, Limit::Deadline),
        ("poll-far-instant", 100, Limit::Deadline),
        ("grow-memory", 10_000, Limit::Memory),
        ("deep-recursion", 10_000, Limit::Stack),
        ("huge-output", 10_000, Limit::Output),
        ("fan-out", 10_000, Limit::Output),
    ] {
        assert_eq!(limit_hit(topology, call_ms), Some(limit), "{topology}");
    }
    assert_eq!(limit_hit("panic", 10_000), None);
}

#[test]
fn a_blocked_call_is_abandoned_at_its_deadline() {
    let started = Instant::now();
    let error = attack("sleep-in-wasi", 100).unwrap_err();
    // The deadline is twice the CPU limit; the guest sleeps for an hour.
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    assert!(error.to_string().contains("deadline of 200 ms per call exceeded"), "{error}");
    // A fresh instance answers as if nothing happened.
    let mut guest = hostile().instantiate("sleep-in-wasi", "attacker", &sandbox(100)).unwrap();
    let (ctx, input) = batch("calm words", 1);
    let ctx = BatchContext { topology: "sleep-in-wasi".to_owned(), ..ctx };
    assert!(guest.call_operator(&ctx, Request::Function(&input)).is_ok());
}

#[test]
fn a_call_from_a_runtimes_blocking_thread_is_abandoned_too() {
    // As the server calls guests: from `spawn_blocking` of its runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let limit =
        runtime.block_on(async { tokio::task::spawn_blocking(|| limit_hit("sleep-in-wasi", 100)).await.unwrap() });
    assert_eq!(limit, Some(Limit::Deadline));
}
