//! One topology per attack on the sandbox. Each behaves like word count
//! until a sentence holds the word `attack`; then it attacks. An attack that
//! works emits what it got, so the batch commits and the test sees it; an
//! attack the sandbox stops fails the batch with the reason.

use std::hint::black_box;
use weir_sdk::prelude::*;

#[derive(Clone, Copy)]
enum Attack {
    None,
    InfiniteLoop,
    GrowMemory,
    DeepRecursion,
    HugeOutput,
    FanOut,
    Panic,
    ReadPasswd,
    OpenSocket,
    ReadEnv,
    ReadGranted,
    SleepInWasi,
    LogFlood,
    PollFarInstant,
}

struct Hostile(Attack);

fn recurse(depth: u64) -> u64 {
    if black_box(depth) == u64::MAX { 0 } else { depth + recurse(black_box(depth + 1)) }
}

impl Hostile {
    fn attack(&self, out: &mut Emitter<'_>) -> Result<(), Error> {
        match self.0 {
            Attack::None => Ok(()),
            Attack::InfiniteLoop => {
                let mut n = 0u64;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            Attack::GrowMemory => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            Attack::DeepRecursion => {
                black_box(recurse(0));
                Ok(())
            }
            Attack::HugeOutput => out.emit(["x".repeat(8 << 20).as_str()]),
            Attack::FanOut => {
                for _ in 0..200_000 {
                    out.emit(["a"])?;
                }
                Ok(())
            }
            Attack::Panic => panic!("the hostile guest panics on purpose"),
            Attack::ReadPasswd => match std::fs::read_to_string("/etc/passwd") {
                Ok(text) => out.emit([text.as_str()]),
                Err(e) => Err(Error::retry(format!("reading /etc/passwd failed: {e}"))),
            },
            Attack::OpenSocket => match std::net::TcpStream::connect("127.0.0.1:9") {
                Ok(_) => out.emit(["connected"]),
                Err(e) => Err(Error::retry(format!("opening a socket failed: {e}"))),
            },
            Attack::ReadEnv => {
                let seen: Vec<String> = std::env::vars().map(|(k, _)| k).chain(std::env::args().skip(1)).collect();
                match std::env::var("HOME") {
                    Ok(home) => out.emit([home.as_str()]),
                    Err(e) if seen.is_empty() => {
                        Err(Error::retry(format!("reading $HOME failed: {e}; no variables, no arguments")))
                    }
                    Err(_) => out.emit([seen.join(",").as_str()]),
                }
            }
            Attack::ReadGranted => match std::fs::read_to_string("/data/words.txt") {
                Ok(text) => {
                    for word in text.split_whitespace() {
                        out.emit([word])?;
                    }
                    Ok(())
                }
                Err(e) => Err(Error::retry(format!("reading /data/words.txt failed: {e}"))),
            },
            // 10 MiB of stderr in 1,000-byte lines, in one call.
            Attack::LogFlood => {
                let line = "z".repeat(999);
                for _ in 0..(10 << 10) {
                    eprintln!("{line}");
                }
                Ok(())
            }
            // Blocks inside a WASI call (a monotonic-clock poll), where no
            // guest code runs to be interrupted.
            Attack::SleepInWasi => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                out.emit(["woke"])
            }
            // Polls a clock subscription a year away: the guest waits in
            // `wasi:io/poll`, never in its own code.
            Attack::PollFarInstant => {
                use wasip2::clocks::monotonic_clock;
                let far = monotonic_clock::now().saturating_add(365 * 24 * 3600 * 1_000_000_000);
                let pollable = monotonic_clock::subscribe_instant(far);
                wasip2::io::poll::poll(&[&pollable]);
                out.emit(["woke"])
            }
        }
    }
}

impl Function for Hostile {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let sentence = tuple.str("sentence")?;
        if sentence.split_whitespace().any(|w| w == "attack") {
            return self.attack(out);
        }
        for word in sentence.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// Splits like word count, and keeps 3 MiB of every call for good: a heap
/// that only grows, as a garbage-collected guest's may.
struct Leaky;

impl Function for Leaky {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        if tuple.batch().txid != black_box(0) && tuple.fields().len() == 1 {
            LEAKED.with(|leaked| {
                let mut leaked = leaked.borrow_mut();
                if leaked.last() != Some(&tuple.batch().txid) {
                    leaked.push(tuple.batch().txid);
                    black_box(Vec::leak(vec![1u8; 3 << 20]));
                }
            });
        }
        for word in tuple.str("sentence")?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// Keeps 40 MiB of its instance's memory, written to, from its first call
/// on: under the 48 MiB at which an instance of 64 is replaced, so that
/// each instance holds it for good.
struct Hoard;

impl Hoard {
    const MIB: usize = 40;
    /// Filters in a row in the `hoard` topology.
    const FILTERS: usize = 16;
}

impl Filter for Hoard {
    fn is_keep(&self, _tuple: &Tuple<'_>) -> Result<bool, Error> {
        HOARD.with(|hoard| {
            let mut hoard = hoard.borrow_mut();
            if hoard.is_empty() {
                *hoard = vec![1u8; Self::MIB << 20];
            }
            black_box(&hoard[..]);
        });
        Ok(true)
    }
}

/// A batch spout of a few fixed sentences per batch, which blocks inside a
/// WASI sleep from txid [`SleepySpout::BLOCKS_AT`] on.
struct SleepySpout;

impl SleepySpout {
    const BLOCKS_AT: u64 = 4;
    const SENTENCES: [&str; 2] = ["the spout emits", "then the spout sleeps"];
}

impl BatchSpout for SleepySpout {
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        if info.txid >= Self::BLOCKS_AT {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        for sentence in Self::SENTENCES {
            out.emit([sentence])?;
        }
        Ok(true)
    }
}

std::thread_local! {
    /// What a [`Hoard`] filter keeps.
    static HOARD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Txids whose first tuple leaked already.
    static LEAKED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How a state updater floods the host through its state.
#[derive(Clone, Copy)]
enum StateAttack {
    /// 10 GiB of 1 MiB values, each under a key of its own.
    Write,
    /// One 1 MiB value, read back 10 GiB worth.
    Read,
}

/// Counts words into its state like word count, until a sentence holds
/// `attack`; then it floods the host through the state, ignoring every
/// error it gets: if the host let it go on, the batch would commit.
struct StateAttacker(StateAttack);

impl StateAttacker {
    fn flood(&self, state: &dyn MapState) {
        let value = Value::Bytes(vec![7u8; 1 << 20]);
        match self.0 {
            StateAttack::Write => {
                for i in 0..10_240 {
                    let _ = state.multi_put(&[(vec![Value::from(format!("flood-{i}"))], value.clone())]);
                }
            }
            StateAttack::Read => {
                let _ = state.multi_put(&[(vec![Value::from("big")], value)]);
                let keys = vec![vec![Value::from("big")]; 4];
                for _ in 0..2_560 {
                    let _ = black_box(state.multi_get(&keys));
                }
            }
        }
    }
}

impl StateUpdater for StateAttacker {
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], _out: &mut Emitter<'_>) -> Result<(), Error> {
        let mut words = std::collections::BTreeMap::<String, i64>::new();
        for tuple in tuples {
            let sentence = tuple.str("sentence")?;
            if sentence.split_whitespace().any(|w| w == "attack") {
                self.flood(state);
                return Ok(());
            }
            for word in sentence.split_whitespace() {
                *words.entry(word.to_owned()).or_default() += 1;
            }
        }
        let keys: Vec<Vec<Value>> = words.keys().map(|w| vec![Value::from(w.as_str())]).collect();
        let stored = state.multi_get(&keys)?;
        let entries: Vec<(Vec<Value>, Value)> = keys
            .into_iter()
            .zip(words.values())
            .zip(stored)
            .map(|((key, n), stored)| (key, Value::I64(n + if let Some(Value::I64(s)) = stored { s } else { 0 })))
            .collect();
        state.multi_put(&entries)
    }
}

fn state_attack(name: &str, attack: StateAttack) -> Topology {
    Topology::new(name)
        .new_stream(FileLines::new("sentence"))
        .partition_persist(State::transactional("counts"), ["sentence"], StateAttacker(attack), [])
        .name("attacker")
        .build()
}

fn topology(name: &str, attack: Attack) -> weir_sdk::Stream {
    Topology::new(name)
        .new_stream(FileLines::new("sentence"))
        .each(["sentence"], Hostile(attack), ["word"])
        .name("attacker")
}

fn counted(stream: weir_sdk::Stream) -> Topology {
    stream.group_by(["word"]).persistent_aggregate(State::transactional("counts"), Count, ["count"]).build()
}

/// Word count behind [`Hoard::FILTERS`] hoarding filters, each an
/// instance of its own: every instance within its own limit, the topology's
/// instances together past what a host should give one topology.
fn hoard(name: &str) -> Topology {
    let mut stream = Topology::new(name).new_stream(FileLines::new("sentence"));
    for at in 0..Hoard::FILTERS {
        stream = stream.filter(["sentence"], Hoard).name(&format!("hoard-{at}"));
    }
    counted(stream.each(["sentence"], Hostile(Attack::None), ["word"]).name("split"))
}

fn topologies() -> Vec<Topology> {
    vec![
        hoard("hoard"),
        hoard("hoard-too"),
        counted(topology("steady", Attack::None)),
        counted(topology("infinite-loop", Attack::InfiniteLoop)),
        counted(topology("grow-memory", Attack::GrowMemory).limits(Limits::new().memory_mib(16))),
        counted(topology("deep-recursion", Attack::DeepRecursion)),
        counted(topology("huge-output", Attack::HugeOutput)),
        counted(topology("fan-out", Attack::FanOut)),
        counted(topology("panic", Attack::Panic)),
        counted(topology("read-passwd", Attack::ReadPasswd)),
        counted(topology("open-socket", Attack::OpenSocket)),
        counted(topology("read-env", Attack::ReadEnv)),
        counted(topology("sleep-in-wasi", Attack::SleepInWasi)),
        counted(topology("log-flood", Attack::LogFlood)),
        state_attack("state-write-flood", StateAttack::Write),
        state_attack("state-read-flood", StateAttack::Read),
        counted(topology("poll-far-instant", Attack::PollFarInstant)),
        counted(
            Topology::new("sleepy-spout")
                .new_stream(GuestSpout::batch(SleepySpout, ["sentence"]))
                .each(["sentence"], Hostile(Attack::None), ["word"])
                .name("attacker"),
        ),
        counted(topology("read-granted", Attack::ReadGranted).read_only_dir("granted", "/data")),
        counted(topology("ask-too-much", Attack::None).limits(Limits::new().memory_mib(4096))),
        counted(
            Topology::new("leak")
                .new_stream(FileLines::new("sentence"))
                .each(["sentence"], Leaky, ["word"])
                .name("leaky")
                .limits(Limits::new().memory_mib(16)),
        ),
    ]
}

weir_sdk::export!(topologies);
