use super::*;
use crate::exec::Cause;
use crate::load::LoadedTopology;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use weir_config::SandboxConfig;
use weir_io::spout::FileLines;
use weir_runtime::{ComponentCache, Limit};
use weir_sdk::codec::{BatchWriter, Value, ValueRef};
use weir_sdk::topology::SPOUT_ID;
use weir_state::StoreError;
use weir_state::keys;
use weir_state::memory::MemoryStore;
use weir_state::rules::Stored;
use weir_state::store::CommitLog;

/// Topology `name` of the test guest `component`, each call limited to
/// `call_ms` of CPU time.
fn load(component: &str, name: &str, call_ms: u64) -> LoadedTopology {
    let engine = weir_runtime::engine(true).unwrap();
    let cache = ComponentCache::new(Path::new(weir_test_guests::GUEST_TARGET_DIR).join("compiled-cache"));
    let sandbox = SandboxConfig { max_call_ms: call_ms, ..SandboxConfig::default() };
    let component = Path::new(component);
    crate::load::topologies(&engine, &cache, component, &[name.to_owned()], &sandbox).unwrap().remove(0)
}

/// The hostile guest's topology `name`.
fn hostile(name: &str, call_ms: u64) -> LoadedTopology {
    load(weir_test_guests::HOSTILE, name, call_ms)
}

/// Runs `loaded` over `spout` into `store`.
fn run_into(
    store: &MemoryStore,
    loaded: LoadedTopology,
    spout: &mut dyn Spout,
    config: RunConfig,
) -> Result<RunReport> {
    let source = OperatorSource::Wasm(Arc::clone(&loaded.components));
    run(store, loaded.plan, source, spout, None, &config, &AtomicBool::new(false), &mut |_| {})
}

/// Runs `loaded` over `spout` into a fresh store: the run's outcome,
/// and the last committed txid.
fn run_over(loaded: LoadedTopology, spout: &mut dyn Spout, config: RunConfig) -> (Result<RunReport>, u64) {
    let store = MemoryStore::new();
    let name = loaded.plan.stored_as.clone();
    let outcome = run_into(&store, loaded, spout, config);
    (outcome, store.progress(&name).unwrap().last_committed)
}

/// Runs topology `name` over `lines`, one line per batch.
fn run_lines(name: &str, lines: &str, call_ms: u64, config: RunConfig) -> (Result<RunReport>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    std::fs::write(&input, lines).unwrap();
    run_over(hostile(name, call_ms), &mut FileLines::open(&input, 1).unwrap(), config)
}

fn halted_by(outcome: Result<RunReport>) -> BatchError {
    let error = outcome.expect_err("the run halts");
    error.downcast_ref::<BatchError>().unwrap_or_else(|| panic!("not a batch error: {error:#}")).clone()
}

fn attempts(max_attempts: u32) -> RunConfig {
    RunConfig { max_attempts, max_pending: 1, ..RunConfig::default() }
}

/// Word counts of `lines`, as a word-count topology stores them.
fn counted(lines: &[&str]) -> Vec<(Vec<u8>, i64)> {
    let mut counts = BTreeMap::new();
    for word in lines.iter().flat_map(|line| line.split_whitespace()) {
        *counts.entry(keys::encode([ValueRef::Str(word)])).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

/// The counts `store` holds for `topology`.
fn stored_counts(store: &MemoryStore, topology: &str) -> Vec<(Vec<u8>, i64)> {
    let count = |stored: Stored| match stored.value() {
        Value::I64(n) => *n,
        other => panic!("not a count: {other:?}"),
    };
    store.scan(topology, "counts").into_iter().map(|(key, stored)| (key, count(stored))).collect()
}

const LINES: [&str; 8] = ["a b", "b c", "c d", "d e", "e f", "f g", "g h", "h a"];

/// How [`Lines`] replays line `index`: each word marked, so that what
/// a replay counted is told apart from what its first attempt did.
fn replayed(index: usize) -> String {
    LINES[index].split_whitespace().map(|word| format!("{word}'")).collect::<Vec<_>>().join(" ")
}

/// Each emission asked of a spout: txid, attempt and the index it
/// follows.
type Asked = Arc<Mutex<Vec<(u64, u32, Option<u64>)>>>;

/// A spout of `kind` over [`LINES`], a line a batch, whose metadata is
/// the next line's index; it notes each emission asked of it.
struct Lines {
    kind: SpoutKind,
    asked: Asked,
}

fn index(meta: &[u8]) -> u64 {
    u64::from_le_bytes(meta.try_into().expect("eight bytes"))
}

fn one_line(line: &str) -> Batch<'static> {
    let mut writer = BatchWriter::new(1);
    writer.push_row(0, [ValueRef::Str(line)]).unwrap();
    writer.finish_batch()
}

impl Spout for Lines {
    fn kind(&self) -> SpoutKind {
        self.kind
    }

    fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let next = previous.map(index);
        self.asked.lock().unwrap().push((txid, attempt, next));
        let at = next.unwrap_or(0);
        let Some(line) = LINES.get(at as usize) else { return Ok(None) };
        Ok(Some(Emitted { meta: (at + 1).to_le_bytes().to_vec(), batch: one_line(line) }))
    }

    fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        Ok(one_line(&replayed(index(meta) as usize - 1)))
    }
}

fn lines(kind: SpoutKind) -> (Lines, Asked) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    (Lines { kind, asked: Arc::clone(&asked) }, asked)
}

/// Txid 3's first attempt asks for a replay while txids 4 to 6 are in
/// flight (at most 4 pending).
fn flaky_run(spout: &mut Lines) -> (MemoryStore, RunReport) {
    let loaded = load(weir_test_guests::TEST_TOPOLOGIES, "flaky-word-count", 1000);
    let store = MemoryStore::new();
    let config = RunConfig { max_pending: 4, ..RunConfig::default() };
    let report = run_into(&store, loaded, spout, config).unwrap();
    assert_eq!((report.batches, report.replays, report.last_committed), (8, 1, 8));
    (store, report)
}

#[test]
fn a_failed_batch_is_replayed_with_every_later_batch_in_flight_and_their_stale_results_dropped() {
    let (mut spout, _) = lines(SpoutKind::Transactional);
    let (store, _) = flaky_run(&mut spout);
    let attempts: Vec<(u64, u32)> =
        store.commits("flaky-word-count").iter().map(|(txid, record)| (*txid, record.attempt)).collect();
    assert_eq!(attempts, [(1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (6, 1), (7, 0), (8, 0)]);
    // What txids 4 to 6 counted at their first attempt arrived after
    // txid 3 failed: only their replays' words are counted.
    let replays: Vec<String> = (2..6).map(replayed).collect();
    let counted_lines: Vec<&str> = LINES[..2]
        .iter()
        .copied()
        .chain(replays.iter().map(String::as_str))
        .chain(LINES[6..].iter().copied())
        .collect();
    assert_eq!(stored_counts(&store, "flaky-word-count"), counted(&counted_lines));
}

#[test]
fn an_opaque_replay_is_emitted_afresh_from_the_last_committed_metadata() {
    let (mut spout, asked) = lines(SpoutKind::Opaque);
    let (store, _) = flaky_run(&mut spout);
    // Txid 3 follows what txid 2 committed, and each later batch in
    // flight the one emitted again before it; nothing is replayed from
    // a record.
    let again: Vec<_> = asked.lock().unwrap().iter().copied().filter(|&(_, attempt, _)| attempt > 0).collect();
    assert_eq!(again, [(3, 1, Some(2)), (4, 1, Some(3)), (5, 1, Some(4)), (6, 1, Some(5))]);
    let metas: Vec<u64> = store.commits("flaky-word-count").iter().map(|(_, r)| index(&r.spout)).collect();
    assert_eq!(metas, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(stored_counts(&store, "flaky-word-count"), counted(&LINES));
}

#[test]
fn a_blocked_operator_halts_the_run_with_the_call_deadline() {
    let (outcome, committed) = run_lines("sleep-in-wasi", "calm words\nthe attack begins\n", 100, attempts(2));
    let error = halted_by(outcome);
    assert_eq!(error.origin, Origin::Operator(Cause::Trapped(Some(Limit::Deadline))), "{error}");
    assert_eq!((error.operator.as_str(), error.retryable), ("attacker", true));
    assert_eq!(committed, 1);
}

#[test]
fn a_blocked_spout_halts_the_run_with_the_call_deadline() {
    let loaded = hostile("sleepy-spout", 100);
    let guest =
        Some((Arc::clone(loaded.components.for_operator(SPOUT_ID)), loaded.plan.sandboxes.of(SPOUT_ID).clone()));
    let def = loaded.definition.spout().unwrap().clone();
    let mut spout =
        weir_io::spout::open(&def, &weir_io::spout::SpoutEnv::local("sleepy-spout", None, 10, None), guest).unwrap();
    let (outcome, committed) = run_over(loaded, &mut *spout, attempts(2));
    let error = halted_by(outcome);
    assert_eq!(error.origin, Origin::Spout(Cause::Trapped(Some(Limit::Deadline))), "{error}");
    // The spout blocks from txid 4 on.
    assert_eq!(committed, 3);
}

#[test]
fn a_batch_past_the_batch_deadline_halts_the_run_with_it() {
    // The batch deadline passes long before the call's (4 s).
    let config = RunConfig { batch_timeout: Duration::from_millis(100), ..attempts(1) };
    let (outcome, committed) = run_lines("sleep-in-wasi", "the attack begins\n", 2000, config);
    assert_eq!(halted_by(outcome).origin, Origin::Deadline);
    assert_eq!(committed, 0);
}

#[test]
fn what_an_operator_returned_and_how_it_trapped_are_told_apart() {
    let (outcome, _) = run_lines("read-passwd", "the attack begins\n", 1000, attempts(1));
    assert_eq!(halted_by(outcome).origin, Origin::Operator(Cause::Returned));
    let (outcome, _) = run_lines("panic", "the attack begins\n", 1000, attempts(1));
    assert_eq!(halted_by(outcome).origin, Origin::Operator(Cause::Trapped(None)));
    let (outcome, _) = run_lines("infinite-loop", "the attack begins\n", 100, attempts(1));
    assert_eq!(halted_by(outcome).origin, Origin::Operator(Cause::Trapped(Some(Limit::Cpu))));
}

#[test]
fn failed_attempts_are_reported_with_their_txid_attempt_and_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    std::fs::write(&input, "calm words\nthe attack begins\n").unwrap();
    let store = MemoryStore::new();
    let loaded = hostile("panic", 1000);
    let source = OperatorSource::Wasm(Arc::clone(&loaded.components));
    let mut spout = FileLines::open(&input, 1).unwrap();
    let mut last = RunReport::default();
    let outcome =
        run(&store, loaded.plan, source, &mut spout, None, &attempts(3), &AtomicBool::new(false), &mut |report| {
            last = report.clone()
        });
    assert!(outcome.is_err());
    let seen: Vec<(u64, u32)> = last.failures.iter().map(|f| (f.txid, f.attempt)).collect();
    assert_eq!(seen, [(2, 0), (2, 1), (2, 2)]);
    assert!(last.failures.iter().all(|f| f.error.starts_with("operator attacker: ")), "{:?}", last.failures);
    assert_eq!(last.last_committed, 1);
}

#[test]
fn a_report_keeps_the_recent_failures_and_cuts_long_errors() {
    let mut report = RunReport::default();
    for txid in 0..RECENT_FAILURES as u64 + 3 {
        report.record_failure(txid, 0, &"é".repeat(FAILURE_TEXT));
    }
    assert_eq!(report.failures.len(), RECENT_FAILURES);
    assert_eq!(report.failures.front().map(|f| f.txid), Some(3));
    let kept = &report.failures[0].error;
    assert!(kept.len() <= FAILURE_TEXT + " [cut]".len() && kept.ends_with(" [cut]"), "{} bytes", kept.len());
}

/// A [`MemoryStore`] whose durable writes take `delay`, as a flush does:
/// batches processed meanwhile gather into the next commit group. It notes
/// each batch it commits in `events`.
struct SlowStore {
    inner: MemoryStore,
    delay: Duration,
    events: Events,
}

impl SlowStore {
    fn new(delay: Duration) -> SlowStore {
        SlowStore { inner: MemoryStore::new(), delay, events: Events::default() }
    }
}

impl CommitLog for SlowStore {
    fn progress(&self, topology: &str) -> Result<weir_state::Progress, StoreError> {
        self.inner.progress(topology)
    }

    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError> {
        self.inner.record_batch(topology, txid, record)
    }
}

impl Store for SlowStore {
    fn snapshot(&self) -> Result<Box<dyn weir_state::store::Snapshot + '_>, StoreError> {
        self.inner.snapshot()
    }

    fn commit_group(&self, group: &[weir_state::store::BatchCommit<'_>]) -> Result<usize, StoreError> {
        std::thread::sleep(self.delay);
        let committed = self.inner.commit_group(group)?;
        self.events.lock().unwrap().extend(group.iter().map(|batch| format!("commit {}", batch.txid)));
        Ok(committed)
    }

    fn remove_others(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        self.inner.remove_others(topology, table, keys)
    }
}

/// Whether [`Tally`] has failed its batch holding the word `e` once.
static FAILED_AT_E: AtomicBool = AtomicBool::new(false);

/// Counts the words of its sentences by reading and writing its state, in
/// the commit phase, so that a batch reads what the batches before it in
/// its group wrote; with `fail_at_e`, the first batch holding the word `e`
/// fails, for a replay.
struct Tally {
    fail_at_e: bool,
}

impl weir_sdk::operator::StateUpdater for Tally {
    fn update_state(
        &self,
        state: &dyn weir_sdk::operator::MapState,
        tuples: &[weir_sdk::Tuple<'_>],
        _out: &mut weir_sdk::Emitter<'_>,
    ) -> Result<(), weir_sdk::Error> {
        let mut words = BTreeMap::<String, i64>::new();
        for tuple in tuples {
            for word in tuple.str("sentence")?.split_whitespace() {
                *words.entry(word.to_owned()).or_default() += 1;
            }
        }
        if self.fail_at_e && words.contains_key("e") && !FAILED_AT_E.swap(true, Ordering::SeqCst) {
            return Err(weir_sdk::Error::retry("the batch holding e fails once"));
        }
        let keys: Vec<Vec<Value>> = words.keys().map(|w| vec![Value::from(w.as_str())]).collect();
        let stored = state.multi_get(&keys)?;
        let entries = keys
            .into_iter()
            .zip(words.values().zip(stored))
            .map(|(key, (n, stored))| (key, Value::I64(n + if let Some(Value::I64(s)) = stored { s } else { 0 })))
            .collect::<Vec<_>>();
        state.multi_put(&entries)
    }
}

fn tallies() -> Vec<weir_sdk::Topology> {
    use weir_sdk::{State, Topology};
    [("tally", false), ("tally-failing-at-e", true)]
        .into_iter()
        .map(|(name, fail_at_e)| {
            Topology::new(name)
                .new_stream(weir_sdk::FileLines::new("sentence"))
                .partition_persist(State::transactional("counts"), ["sentence"], Tally { fail_at_e }, [])
                .name("tally")
                .build()
        })
        .collect()
}

/// Runs the native topology `name`, one of `topologies`, over `lines` in
/// batches of `batch_size`, into `store`, under `sandbox`.
fn run_native_over(
    topologies: fn() -> Vec<weir_sdk::Topology>,
    name: &str,
    store: &dyn Store,
    lines: &[impl AsRef<str>],
    batch_size: usize,
    config: RunConfig,
    sandbox: &SandboxConfig,
) -> Result<RunReport> {
    let topology = topologies().into_iter().find(|t| t.definition().name == name).unwrap();
    let plan = Arc::new(weir_plan::plan(topology.definition(), sandbox).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    let text: Vec<&str> = lines.iter().map(AsRef::as_ref).collect();
    std::fs::write(&input, text.join("\n") + "\n").unwrap();
    let mut spout = FileLines::open(&input, batch_size).unwrap();
    let source = OperatorSource::Native(topologies);
    run(store, plan, source, &mut spout, None, &config, &AtomicBool::new(false), &mut |_| {})
}

/// Runs the native topology `name` over [`LINES`], a line a batch, all
/// eight in flight, into a store whose commits take `delay`.
fn run_tally(name: &str, delay: Duration, group_max: usize) -> (MemoryStore, RunReport) {
    let store = SlowStore::new(delay);
    let config =
        RunConfig { max_pending: 8, group_max, retry_backoff: Duration::from_millis(1), ..RunConfig::default() };
    let report = run_native_over(tallies, name, &store, &LINES, 1, config, &SandboxConfig::default()).unwrap();
    (store.inner, report)
}

#[test]
fn batches_processed_while_one_commits_commit_after_it_in_one_group() {
    let (store, report) = run_tally("tally", Duration::from_millis(50), 3);
    let groups = store.groups("tally");
    // The groups follow each other in txid order, none larger than allowed.
    let mut next = 1;
    for &(first, last) in &groups {
        assert!(first == next && last >= first && last - first < 3, "{groups:?}");
        next = last + 1;
    }
    assert_eq!(next, 9, "{groups:?}");
    assert!(groups.iter().any(|(first, last)| last - first == 2), "no group of 3 while commits took 50 ms: {groups:?}");
    let sizes = report.commit_groups;
    assert_eq!((sizes.groups, sizes.batches, sizes.max), (groups.len() as u64, 8, 3), "{groups:?}");
    assert_eq!(report.commit_latency.count(), groups.len() as u64);
    // Each batch read what the batches before it in its group wrote.
    assert_eq!(stored_counts(&store, "tally"), counted(&LINES));
    let txids: Vec<u64> = store.scan("tally", "counts").iter().map(|(_, stored)| stored.txid().unwrap()).collect();
    assert!(txids.contains(&8) && txids.iter().all(|&t| (1..=8).contains(&t)), "{txids:?}");
}

#[test]
fn a_batch_failing_its_commit_phase_lets_the_batches_before_it_in_its_group_commit() {
    let (store, report) = run_tally("tally-failing-at-e", Duration::from_millis(100), 16);
    let attempts: Vec<(u64, u32)> = store.commits("tally-failing-at-e").iter().map(|(t, r)| (*t, r.attempt)).collect();
    // Txid 4 (`d e`) holds `e` first: it and the batches after it are
    // replayed, those before it committed in the group it ended.
    assert_eq!(attempts, [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)]);
    let groups = store.groups("tally-failing-at-e");
    assert!(groups.iter().any(|&(first, last)| last == 3 && first < 3), "{groups:?}");
    assert_eq!((report.replays, report.failures.len()), (1, 1));
    assert_eq!(stored_counts(&store, "tally-failing-at-e"), counted(&LINES));
}

#[test]
fn long_lines_hold_back_batches_past_max_pending_bytes() {
    // Eight batches of a line of 1,000 bytes each, commits slow enough that
    // all eight would be in flight: the bytes let three through at most.
    let lines: Vec<String> = (0..8).map(|i| format!("{i:0>1000}")).collect();
    let store = SlowStore::new(Duration::from_millis(50));
    let config = RunConfig { max_pending: 8, max_pending_bytes: 2500, group_max: 8, ..RunConfig::default() };
    let report = run_native_over(tallies, "tally", &store, &lines, 1, config, &SandboxConfig::default()).unwrap();
    let groups = store.inner.groups("tally");
    assert!(groups.iter().all(|(first, last)| last - first < 3), "{groups:?}");
    assert!(groups.iter().any(|(first, last)| last > first), "batches still commit together: {groups:?}");
    assert_eq!((report.batches, report.tuples), (8, 8));
}

#[test]
fn a_group_of_one_commits_each_batch_alone() {
    let (store, report) = run_tally("tally", Duration::from_millis(5), 1);
    assert_eq!(store.groups("tally"), (1..=8).map(|t| (t, t)).collect::<Vec<_>>());
    assert_eq!((report.commit_groups.groups, report.commit_groups.max), (8, 1));
    assert_eq!(stored_counts(&store, "tally"), counted(&LINES));
}

/// Splits a sentence into its words.
struct Words;

impl weir_sdk::operator::Function for Words {
    fn execute(&self, tuple: &weir_sdk::Tuple<'_>, out: &mut weir_sdk::Emitter<'_>) -> Result<(), weir_sdk::Error> {
        for word in tuple.str(0)?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// Keeps sentences of an even length.
struct EvenLength;

impl weir_sdk::operator::Filter for EvenLength {
    fn is_keep(&self, tuple: &weir_sdk::Tuple<'_>) -> Result<bool, weir_sdk::Error> {
        Ok(tuple.str(0)?.len() % 2 == 0)
    }
}

/// The threads [`SlowWords`] was called on.
static SLOW_WORDS_THREADS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// [`Words`], taking 20 ms a call, and noting the thread it runs on.
struct SlowWords;

impl weir_sdk::operator::Function for SlowWords {
    fn execute(&self, tuple: &weir_sdk::Tuple<'_>, out: &mut weir_sdk::Emitter<'_>) -> Result<(), weir_sdk::Error> {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_owned();
        SLOW_WORDS_THREADS.lock().unwrap().insert(thread);
        std::thread::sleep(Duration::from_millis(20));
        Words.execute(tuple, out)
    }
}

/// What [`NotedWords`] processed and the store of the test that runs it
/// committed, in order.
static NOTED: std::sync::LazyLock<Events> = std::sync::LazyLock::new(Events::default);

/// [`Words`], noting each batch it splits in [`NOTED`] (a line a batch).
struct NotedWords;

impl weir_sdk::operator::Function for NotedWords {
    fn execute(&self, tuple: &weir_sdk::Tuple<'_>, out: &mut weir_sdk::Emitter<'_>) -> Result<(), weir_sdk::Error> {
        NOTED.lock().unwrap().push(format!("process {}", tuple.batch().txid));
        Words.execute(tuple, out)
    }
}

fn pairs_and_slow_words() -> Vec<weir_sdk::Topology> {
    use weir_sdk::{Count, State, Topology};
    let pairs = Topology::new("sentence-words");
    pairs
        .new_stream(weir_sdk::FileLines::new("sentence"))
        .filter(["sentence"], EvenLength)
        .name("even")
        .each(["sentence"], Words, ["word"])
        .name("split")
        .group_by(["sentence", "word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    let slow = Topology::new("slow-words");
    slow.new_stream(weir_sdk::FileLines::new("sentence"))
        .each(["sentence"], SlowWords, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    let noted = Topology::new("noted-words");
    noted
        .new_stream(weir_sdk::FileLines::new("sentence"))
        .each(["sentence"], NotedWords, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    vec![pairs.build(), slow.build(), noted.build()]
}

/// Runs the native topology `name` of [`pairs_and_slow_words`] over
/// `lines` in batches of `batch_size`, into a fresh store.
fn run_native(name: &str, lines: &[String], batch_size: usize, config: RunConfig) -> MemoryStore {
    let store = MemoryStore::new();
    let sandbox = SandboxConfig::default();
    run_native_over(pairs_and_slow_words, name, &store, lines, batch_size, config, &sandbox).unwrap();
    store
}

fn sentences() -> Vec<String> {
    (0..8000).map(|i| format!("s{i} {} w{} {}", "ab ".repeat(i % 13), i % 7, "x".repeat(i % 3))).collect()
}

#[test]
fn the_calls_for_one_batch_share_the_output_limits_of_one_call() {
    // Half of the sentences pass the filter, some 20,000 words in runs of
    // about 10,000: each run within the limit, the batch not.
    let sandbox = SandboxConfig { max_output_tuples: 15_000, ..SandboxConfig::default() };
    let store = MemoryStore::new();
    let outcome =
        run_native_over(pairs_and_slow_words, "sentence-words", &store, &sentences(), 8000, attempts(1), &sandbox);
    let error = halted_by(outcome);
    assert_eq!(error.origin, Origin::Operator(Cause::Trapped(Some(Limit::Output))), "{error}");
    assert!(error.to_string().contains("operator split: trap: output limit of"), "{error}");
    assert!(error.to_string().contains("15000 tuples per batch exceeded"), "{error}");
    assert_eq!(store.progress("sentence-words").unwrap().last_committed, 0);
}

#[test]
fn a_function_and_a_filter_over_a_batch_larger_than_a_call_see_each_row_once_with_its_fields() {
    // 8,000 sentences of some 30 bytes in one batch: the filter and the
    // function each get it in runs of rows, and each emitted word must
    // still come with its own sentence.
    let lines = sentences();
    assert!(lines.iter().map(|l| l.len() + 1).sum::<usize>() > 3 * crate::exec::CALL_INPUT_BYTES);
    let store = run_native("sentence-words", &lines, lines.len(), RunConfig::default());
    let mut want = BTreeMap::new();
    for line in lines.iter().filter(|l| l.len() % 2 == 0) {
        for word in line.split_whitespace() {
            *want.entry(keys::encode([ValueRef::Str(line), ValueRef::Str(word)])).or_insert(0) += 1;
        }
    }
    assert!(want.len() > 1000);
    assert_eq!(stored_counts(&store, "sentence-words"), want.into_iter().collect::<Vec<_>>());
}

#[test]
fn batches_larger_than_a_call_one_after_another_each_count_only_their_own_rows() {
    // Three batches of 8,000 sentences: each function's output is joined
    // from its calls into the buffers the batch before it left.
    let lines: Vec<String> = (0..3).flat_map(|_| sentences()).collect();
    let config = RunConfig { max_pending: 1, ..RunConfig::default() };
    let store = run_native("sentence-words", &lines, 8000, config);
    assert_eq!(stored_counts(&store, "sentence-words"), sentence_word_counts(&lines, 3));
}

/// What `sentence-words` counts over `lines`, each sentence `copies` times.
fn sentence_word_counts(lines: &[String], copies: i64) -> Vec<(Vec<u8>, i64)> {
    let mut want = BTreeMap::new();
    for line in lines.iter().filter(|l| l.len() % 2 == 0) {
        for word in line.split_whitespace() {
            *want.entry(keys::encode([ValueRef::Str(line), ValueRef::Str(word)])).or_insert(0) += 1;
        }
    }
    assert!(want.values().all(|&n| n % copies == 0));
    want.into_iter().collect()
}

/// A file's lines, noting the buffers it is given back.
struct Recycled {
    lines: FileLines,
    given: usize,
}

impl Spout for Recycled {
    fn kind(&self) -> SpoutKind {
        self.lines.kind()
    }

    fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        self.lines.emit(txid, attempt, previous)
    }

    fn replay(&mut self, txid: u64, attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        self.lines.replay(txid, attempt, meta)
    }

    fn recycle(&mut self, buffers: weir_sdk::codec::Buffers) {
        self.given += usize::from(buffers.capacity() > 0);
        self.lines.recycle(buffers);
    }
}

#[test]
fn the_spout_writes_batches_into_the_buffers_of_batches_processed_and_they_count_exactly() {
    // Three batches of 24,000 sentences, 1.5 MB each: large enough to be
    // given back.
    let lines: Vec<String> = (0..9).flat_map(|_| sentences()).collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let mut spout = Recycled { lines: FileLines::open(&input, 24_000).unwrap(), given: 0 };
    let topology = pairs_and_slow_words().into_iter().find(|t| t.definition().name == "sentence-words").unwrap();
    let plan = Arc::new(weir_plan::plan(topology.definition(), &SandboxConfig::default()).unwrap());
    let (store, config) = (MemoryStore::new(), RunConfig { max_pending: 1, ..RunConfig::default() });
    let source = OperatorSource::Native(pairs_and_slow_words);
    run(&store, plan, source, &mut spout, None, &config, &AtomicBool::new(false), &mut |_| {}).unwrap();
    assert!(spout.given >= 2, "buffers given back {} times", spout.given);
    assert_eq!(stored_counts(&store, "sentence-words"), sentence_word_counts(&lines, 9));
}

#[test]
fn the_coordinator_processes_waiting_batches_while_the_process_phase_is_the_bound() {
    // Commits take nothing and each batch 20 ms to process: the coordinator
    // would wait most of its time, and takes batches to process itself.
    let lines: Vec<String> = (0..24).map(|i| format!("a b{} c{}", i % 3, i % 5)).collect();
    let config = RunConfig { max_pending: 8, ..RunConfig::default() };
    let store = run_native("slow-words", &lines, 1, config);
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(stored_counts(&store, "slow-words"), counted(&lines));
    let threads = SLOW_WORDS_THREADS.lock().unwrap().clone();
    assert!(threads.contains("weir-process"), "{threads:?}");
    assert!(threads.len() > 1, "only the process phase's thread processed batches: {threads:?}");
}

#[test]
fn while_input_is_backed_up_the_coordinator_processes_waiting_batches_before_a_small_group_commits() {
    // 48 batches, 16 in flight, each 20 ms to process and each commit 30
    // ms, during which the process thread finishes one or two: rather than
    // commit so few, the coordinator processes waiting batches (from the
    // newest) until half of max pending, 8, are processed from the first,
    // and the groups hold about that many. Once the spout has given its
    // last batch (the last 16 in flight), groups are what is processed.
    let lines: Vec<String> = (0..48).map(|i| format!("a b{} c{}", i % 3, i % 5)).collect();
    let config =
        RunConfig { max_pending: 16, group_max: 16, group_time: Duration::from_secs(10), ..RunConfig::default() };
    let store = SlowStore::new(Duration::from_millis(30));
    let sandbox = SandboxConfig::default();
    run_native_over(pairs_and_slow_words, "slow-words", &store, &lines, 1, config, &sandbox).unwrap();
    let groups = store.inner.groups("slow-words");
    let before_the_last: Vec<u64> =
        groups.iter().filter(|(_, last)| *last <= 48 - 16).map(|(f, l)| l + 1 - f).collect();
    let mean = before_the_last.iter().sum::<u64>() as f64 / before_the_last.len() as f64;
    assert!(mean >= 6.0, "groups of {mean:.1} batches on average before the last batches: {groups:?}");
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(stored_counts(&store.inner, "slow-words"), counted(&lines));
}

#[test]
fn results_holding_max_pending_bytes_hold_the_process_phase_back_until_they_commit() {
    // 24 batches of a line, commits of 30 ms and processing of next to
    // nothing: the 100 bytes allowed let a dozen lines of 7 bytes in
    // flight, which the process phase would run through ahead of the
    // commits. Each batch's partials hold more than 100 bytes, so it
    // processes a batch only once the one before it commits, and a group
    // holds one batch.
    let lines: Vec<String> = (0..24).map(|i| format!("a b{} c{}", i % 3, i % 5)).collect();
    let config = RunConfig { max_pending: 16, max_pending_bytes: 100, group_max: 16, ..RunConfig::default() };
    let store = SlowStore { events: Arc::clone(&NOTED), ..SlowStore::new(Duration::from_millis(30)) };
    let sandbox = SandboxConfig::default();
    let report = run_native_over(pairs_and_slow_words, "noted-words", &store, &lines, 1, config, &sandbox).unwrap();
    let events = NOTED.lock().unwrap().clone();
    let mut ahead = 0i64;
    let mut most_ahead = 0;
    for event in &events {
        ahead += if event.starts_with("process") { 1 } else { -1 };
        most_ahead = most_ahead.max(ahead);
    }
    // The batch committing, the one processed after it, and one the
    // coordinator may process while nothing is held.
    assert!(most_ahead <= 3, "{most_ahead} batches processed ahead of the commits: {events:?}");
    assert_eq!((report.commit_groups.batches, report.commit_groups.max), (24, 1));
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(stored_counts(&store.inner, "noted-words"), counted(&lines));
}

#[test]
fn the_coordinator_helps_only_when_mostly_idle_a_second_set_of_instances_is_small_and_calls_end_in_time() {
    let helper_with_calls_of = |call_ms| {
        let topology = pairs_and_slow_words().remove(0);
        let sandbox = SandboxConfig { max_call_ms: call_ms, ..SandboxConfig::default() };
        let plan = Arc::new(weir_plan::plan(topology.definition(), &sandbox).unwrap());
        let source = OperatorSource::Native(pairs_and_slow_words);
        Helper { plan, source, processor: None, time: CoordinatorTime::default(), memory: None }
    };
    let mut helper = helper_with_calls_of(1500);
    let (busy, spare) = (Duration::from_millis(1), Duration::from_millis(9));
    for _ in 0..5 {
        helper.time.record(busy, spare);
    }
    let later = Instant::now() + Duration::from_secs(60);
    assert!(!helper.may_help(later), "no batch processed yet: the instances' memory is unknown");
    helper.memory = Some(HELPER_MEMORY + 1);
    assert!(!helper.may_help(later), "instances as large as an interpreter's");
    helper.memory = Some(2 << 20);
    assert!(helper.may_help(later));
    // A call spinning on the coordinator's thread would be stopped only
    // after the awaited batch's deadline (1.5 s of CPU time, abandoned at
    // 3 s).
    let soon = Instant::now() + Duration::from_millis(200);
    assert!(!helper.may_help(soon), "the awaited deadline is nearer than a call's");
    let mut unlimited = helper_with_calls_of(0);
    unlimited.memory = helper.memory;
    assert!(unlimited.may_help(soon), "calls unlimited in time bound no thread");
    for _ in 0..5 {
        helper.time.record(spare, busy);
    }
    assert!(!helper.may_help(later), "the coordinator is mostly busy");
}

/// What happened in a run, in order: each emission asked of a spout and
/// each batch committed.
type Events = Arc<Mutex<Vec<String>>>;

/// A followed spout over [`LINES`], a line a batch, that has nothing
/// once after its fourth line, as a file has nothing until more is
/// appended; asking it again costs little.
struct Trickle {
    dried: bool,
    events: Events,
}

impl Spout for Trickle {
    fn kind(&self) -> SpoutKind {
        SpoutKind::Transactional
    }

    fn asks_cheaply(&self) -> bool {
        true
    }

    fn emit(&mut self, txid: u64, _attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let at = previous.map_or(0, index);
        if at == 4 && !self.dried {
            self.dried = true;
            return Ok(None);
        }
        let Some(line) = LINES.get(at as usize) else { return Ok(None) };
        self.events.lock().unwrap().push(format!("emit {txid}"));
        Ok(Some(Emitted { meta: (at + 1).to_le_bytes().to_vec(), batch: one_line(line) }))
    }

    fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        Ok(one_line(LINES[index(meta) as usize - 1]))
    }
}

#[test]
fn a_followed_spout_that_asks_cheaply_is_asked_again_after_each_commit() {
    // Four batches in flight, each 20 ms to process and committed one at a
    // time, when the spout has nothing for a moment: the fifth line goes
    // out after the first of them commits, not after the last.
    let events = Events::default();
    let store = SlowStore { events: Arc::clone(&events), ..SlowStore::new(Duration::ZERO) };
    let topology = pairs_and_slow_words().remove(1);
    let plan = Arc::new(weir_plan::plan(topology.definition(), &SandboxConfig::default()).unwrap());
    let mut spout = Trickle { dried: false, events: Arc::clone(&events) };
    let follow = Some(Duration::from_millis(1));
    let config = RunConfig { max_pending: 8, group_max: 1, follow, ..RunConfig::default() };
    let stop = AtomicBool::new(false);
    let on_report = &mut |report: &RunReport| {
        if report.last_committed == LINES.len() as u64 {
            stop.store(true, Ordering::Relaxed);
        }
    };
    let source = OperatorSource::Native(pairs_and_slow_words);
    run(&store, plan, source, &mut spout, None, &config, &stop, on_report).unwrap();
    let events = events.lock().unwrap().clone();
    let at = |event: &str| events.iter().position(|e| e == event).unwrap_or_else(|| panic!("no {event}: {events:?}"));
    assert!(at("emit 5") < at("commit 4"), "{events:?}");
    assert_eq!(stored_counts(&store.inner, "slow-words"), counted(&LINES));
}

#[test]
fn instances_keep_the_two_largest_buffers_of_dropped_batches_up_to_a_bound() {
    let topology = pairs_and_slow_words().remove(0);
    let plan = Arc::new(weir_plan::plan(topology.definition(), &SandboxConfig::default()).unwrap());
    let mut instances = crate::instances::Instances::new(OperatorSource::Native(pairs_and_slow_words), plan);
    let room = |bytes: usize| BatchWriter::with_capacity(1, bytes).finish_batch();
    let mib = |buffers: weir_sdk::codec::Buffers| buffers.capacity() >> 20;
    for bytes in [1 << 20, 2 << 20, 64 << 20, 512] {
        instances.keep_buffers(room(bytes));
    }
    assert_eq!(mib(instances.take_second_buffers(2 << 20)), 0, "smaller than asked");
    assert_eq!(mib(instances.take_second_buffers(0)), 1, "the smaller for the spout");
    assert_eq!(mib(instances.take_second_buffers(0)), 0, "taken once");
    for bytes in [3 << 20, 5 << 20] {
        instances.keep_buffers(room(bytes));
    }
    assert_eq!(mib(instances.take_buffers()), 5, "the larger for a function's output");
    assert_eq!(mib(instances.take_buffers()), 3, "then the other");
    assert_eq!(instances.take_buffers().capacity(), 0);
    for bytes in [30 << 20, 8 << 20] {
        instances.keep_buffers(room(bytes));
    }
    assert_eq!(mib(instances.take_second_buffers(0)), 0, "both together would pass the bound");
    assert_eq!(mib(instances.take_buffers()), 30);
}
