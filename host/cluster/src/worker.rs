//! A host's part in one cluster topology's batches, on a thread of its own.
//!
//! At the leader's word that batch t starts ([`Start`]), a host takes the
//! assignment of the start's epoch (read from etcd unless it has read that
//! epoch's already; a word given under an epoch etcd no longer holds is
//! passed over), then:
//! - for its partitions: reads their messages in the batch's span, runs
//!   the process phase, cuts the partials (combined on this host first) by
//!   slot and sends each slot owner its share, every owner a message even
//!   when empty, so that it knows when it has heard from every host; then
//!   hands the next batch's span, when the leader gave it, to its process
//!   phase ([`ProcessPhase`], a thread of its own), which reads and
//!   processes it while this batch is gathered and committed;
//! - for its slots: gathers every partition owner's partials, combines
//!   them, commits them to its own redb by Trident's rules (a replay finds
//!   the txid stored and skips the key), publishes the keys' records to the
//!   changelog stamped with the epoch it got each slot at, and reports.
//!
//! Before a slot is used it is restored from the changelog: when the host
//! gains it, and all of them when the host's copy is behind the commit
//! record (a restart, a host that was away). The assignment is read from
//! etcd again before anything is published: a host whose slots moved on
//! (paused past its lease, say) publishes nothing.

use super::changelog::{Changelog, SlotWrites, Write};
use super::commit_log;
use super::membership::ClusterConfig;
use super::plan::{ClusterPlan, Owners};
use super::process_phase::{Made, ProcessPhase, Span};
use super::wire::{self, Done, Outcome, PartialsHeader, Start, Subjects};
use super::{catalog, slots};
use anyhow::{Context, Result, anyhow, bail};
use async_nats::Subscriber;
use futures_util::{FutureExt, StreamExt};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_config::sync::Locked;
use weir_engine::exec::{BatchId, Committer, Handover, Partials};
use weir_io::nats::{Nats, NatsConfig};
use weir_io::spout::jetstream::SpanReader;
use weir_state::keyed::KeyedValues;
use weir_state::restore::Restored;
use weir_state::rules::Stored;
use weir_state::{BatchRecord, Db};

/// Longest a slot's restore or publish to the changelog may take.
const CHANGELOG_TIMEOUT: Duration = Duration::from_secs(30);

/// What a host did for a topology, for its status and metrics.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HostFigures {
    /// Batches whose partitions this host processed, and their tuples.
    pub batches_processed: u64,
    pub tuples_processed: u64,
    /// Of those, the batches read and processed before their start came,
    /// while the batch before them committed.
    pub batches_read_ahead: u64,
    /// Batches whose slots this host committed, and the keys written.
    pub batches_committed: u64,
    pub keys_committed: u64,
    /// Where this host's copy of the state stands.
    pub last_committed: u64,
    /// Slots restored from the changelog.
    pub slots_restored: u64,
    /// The slots this host can answer reads of now.
    #[serde(skip)]
    pub ready: BTreeSet<(String, u32)>,
    pub failures: u64,
    pub last_error: Option<String>,
    /// Tuples a second over the last batches.
    pub tuples_per_s: f64,
}

/// A batch span's metadata as the commit log records it.
pub fn encode_span(after: u64, until: u64) -> Vec<u8> {
    [after.to_le_bytes(), until.to_le_bytes()].concat()
}

/// Reads what [`encode_span`] wrote.
pub fn decode_span(bytes: &[u8]) -> Result<(u64, u64)> {
    let (Some((after, rest)), true) = (bytes.split_first_chunk::<8>(), bytes.len() == 16) else {
        bail!("a cluster batch's span is {} bytes, not 16", bytes.len())
    };
    let until = u64::from_le_bytes(rest.try_into().expect("eight bytes"));
    Ok((u64::from_le_bytes(*after), until))
}

/// A message to publish: its subject and payload.
type Message = (String, Vec<u8>);

/// Publishes `messages` and flushes.
fn publish_all(nats: &Nats, messages: Vec<Message>) -> Result<()> {
    let client = nats.client.clone();
    nats.runtime.block_on(async {
        for (subject, payload) in messages {
            client.publish(subject, payload.into()).await?;
        }
        client.flush().await?;
        anyhow::Ok(())
    })
}

/// One host's worker for one topology.
pub struct Worker {
    cluster: ClusterConfig,
    plan: Arc<ClusterPlan>,
    slots: u32,
    db: Arc<Db>,
    nats: Nats,
    etcd: etcd_client::Client,
    subjects: Subjects,
    phase: ProcessPhase,
    committer: Committer,
    changelog: Changelog,
    starts: Subscriber,
    partials: Subscriber,
    /// A start that came while a batch was under way.
    next_start: Option<Start>,
    /// The last try this host took part in: the leader says a start again
    /// until the batch is done, and a try is taken part in once.
    last_try: Option<(u64, u32)>,
    /// Partials not gathered yet: of a later try than the one under way,
    /// and this host's own share of the try under way.
    early: Vec<(PartialsHeader, Vec<(String, KeyedValues)>)>,
    /// The partials messages this host sent for its last try, sent again
    /// each time the leader says that try's start again: a slot owner whose
    /// worker subscribed after they first went out (it started, or its host
    /// joined, as the batch began) gets them then.
    sent: Option<((u64, u32), Vec<Message>)>,
    /// Slots restored here, with the epoch of the ownership they were
    /// restored for.
    ready: BTreeMap<(String, u32), u64>,
    /// The assignment as this host read it last.
    last_owners: Option<Owners>,
    timeout: Duration,
    figures: Arc<Mutex<HostFigures>>,
    last_idle_check: Option<Instant>,
}

impl Worker {
    /// Connects a worker for `plan` on this host.
    pub fn open(
        cluster: ClusterConfig,
        plan: Arc<ClusterPlan>,
        slots: u32,
        db: Arc<Db>,
        nats: &NatsConfig,
        timeout: Duration,
        figures: Arc<Mutex<HostFigures>>,
    ) -> Result<Worker> {
        let name = plan.name.clone();
        let connection = Nats::connect(nats, &format!("weir {} {name}", cluster.host))?;
        let reader = SpanReader::open(plan.stream()?, &plan.plan.topology, nats)?;
        let subjects = Subjects::new(&cluster.name, &name);
        let (etcd, changelog, starts, partials) = connection.runtime.block_on(async {
            // Every call bounded by the lease's time: a call lost with a restarted
            // etcd fails rather than hangs.
            let etcd = super::membership::connect(&cluster).await?;
            let changelog = Changelog::open(&connection.jetstream, &cluster.name, &name).await?;
            let starts = connection.client.subscribe(subjects.start()).await?;
            let partials = connection.client.subscribe(subjects.partials(&cluster.host)).await?;
            anyhow::Ok((etcd, changelog, starts, partials))
        })?;
        Ok(Worker {
            phase: ProcessPhase::start(Arc::clone(&plan), reader)?,
            committer: Committer::new(Arc::clone(&plan.plan), plan.source.clone()),
            cluster,
            plan,
            slots,
            db,
            nats: connection,
            etcd,
            subjects,
            changelog,
            starts,
            partials,
            next_start: None,
            last_try: None,
            early: Vec::new(),
            sent: None,
            ready: BTreeMap::new(),
            last_owners: None,
            timeout,
            figures,
            last_idle_check: None,
        })
    }

    /// Takes part in the topology's batches until `stop` is set.
    pub fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let Some(start) = self.next_start.take().or_else(|| self.wait_start(Duration::from_millis(500))) else {
                self.when_idle();
                continue;
            };
            if self.last_try.is_some_and(|last| start.id() <= last) {
                // The leader says a start again while the try is not done.
                self.send_again(start.id());
                continue;
            }
            self.last_try = Some(start.id());
            if let Err(e) = self.batch(start) {
                self.failed(&start, e);
            }
        }
    }

    /// Reports a failed try to the leader.
    fn failed(&mut self, start: &Start, e: anyhow::Error) {
        let error = format!("{e:#}");
        tracing::warn!("topology {}: txid {} on host {}: {error}", self.plan.name, start.txid, self.cluster.host);
        self.report(start, Outcome::Failed { error: error.clone() });
        let mut figures = self.figures.locked();
        figures.failures += 1;
        figures.last_error = Some(error);
    }

    /// The newest start waiting, or the next within `wait`.
    fn wait_start(&mut self, wait: Duration) -> Option<Start> {
        let first = self
            .nats
            .runtime
            .block_on(async { tokio::time::timeout(wait, self.starts.next()).await.ok().flatten() })?;
        let mut newest: Option<Start> = serde_json::from_slice(&first.payload).ok();
        while let Some(Some(message)) = self.starts.next().now_or_never() {
            if let Ok(start) = serde_json::from_slice::<Start>(&message.payload) {
                newest = Some(newest.map_or(start, |n| if start.id() > n.id() { start } else { n }));
            }
        }
        newest
    }

    /// While no batch comes: the slots this host gained restored, so that
    /// it answers reads of them, every few seconds.
    fn when_idle(&mut self) {
        if self.last_idle_check.is_some_and(|at| at.elapsed() < Duration::from_secs(2)) {
            return;
        }
        self.last_idle_check = Some(Instant::now());
        let outcome = (|| {
            let Some(owners) = self.owners()? else { return Ok(()) };
            let (cluster, name) = (self.cluster.name.clone(), self.plan.name.clone());
            let committed = self.nats.runtime.block_on(commit_log::committed(&mut self.etcd, &cluster, &name))?;
            self.prepare_slots(&owners, committed)?;
            anyhow::Ok(())
        })();
        if let Err(e) = outcome {
            tracing::debug!("topology {}: restoring slots on host {}: {e:#}", self.plan.name, self.cluster.host);
        }
    }

    /// The assignment as etcd holds it now.
    fn owners(&mut self) -> Result<Option<Owners>> {
        let (cluster, name) = (self.cluster.name.clone(), self.plan.name.clone());
        let record = self.nats.runtime.block_on(catalog::assignment(&mut self.etcd, &cluster, &name))?;
        let owners = record.map(|r| Owners::of(&r.assignment, self.slots));
        self.last_owners.clone_from(&owners);
        Ok(owners)
    }

    /// The assignment of `epoch`: the one read last when it is of that
    /// epoch (an epoch names one assignment: it goes up with any change),
    /// else as etcd holds it now, if it is still of that epoch.
    fn owners_at(&mut self, epoch: u64) -> Result<Option<Owners>> {
        match self.last_owners.as_ref().filter(|o| o.epoch == epoch) {
            Some(owners) => Ok(Some(owners.clone())),
            None => Ok(self.owners()?.filter(|o| o.epoch == epoch)),
        }
    }

    /// This host's part in one try at a batch.
    fn batch(&mut self, start: Start) -> Result<()> {
        let Some(owners) = self.owners_at(start.epoch)? else {
            tracing::debug!("topology {}: txid {} was started under another epoch", self.plan.name, start.txid);
            return Ok(());
        };
        let host = self.cluster.host.clone();
        tracing::debug!(
            "topology {}: txid {} attempt {} starts on host {host}",
            self.plan.name,
            start.txid,
            start.attempt
        );
        if let Some(partitions) = owners.partitions.get(&host) {
            let started = Instant::now();
            let id = BatchId { txid: start.txid, attempt: start.attempt };
            let span = Span { id, after: start.after, until: start.until, partitions: partitions.clone() };
            let Made { tuples, partials, ahead } = self.phase.now(span)?;
            tracing::debug!("topology {}: txid {}: {tuples} tuples processed", self.plan.name, start.txid);
            self.send(&start, &owners, tuples, &partials)?;
            self.report(&start, Outcome::Processed { tuples });
            // The next batch's span, read and processed while this one is
            // gathered and committed.
            if let Some((after, until)) = start.next {
                let id = BatchId { txid: start.txid + 1, attempt: 0 };
                self.phase.ahead(Span { id, after, until, partitions: partitions.clone() });
            }
            let mut figures = self.figures.locked();
            figures.batches_read_ahead += u64::from(ahead);
            figures.batches_processed += 1;
            figures.tuples_processed += tuples;
            let seconds = started.elapsed().as_secs_f64().max(1e-6);
            figures.tuples_per_s = 0.8 * figures.tuples_per_s + 0.2 * (tuples as f64 / seconds);
        }
        if owners.receivers().contains(host.as_str()) {
            let gathered = self.gather(&start, &owners)?;
            tracing::debug!("topology {}: txid {}: partials gathered", self.plan.name, start.txid);
            let keys = self.commit(&start, &owners, gathered)?;
            tracing::debug!("topology {}: txid {}: {keys} keys committed", self.plan.name, start.txid);
            self.report(&start, Outcome::Committed { keys });
            let mut figures = self.figures.locked();
            figures.batches_committed += 1;
            figures.keys_committed += keys;
            figures.last_committed = figures.last_committed.max(start.txid);
        }
        Ok(())
    }

    /// Sends every slot owner its share of `partials`, in messages of at
    /// most [`wire::CHUNK_BYTES`]; this host's own share stays in memory.
    fn send(
        &mut self,
        start: &Start,
        owners: &Owners,
        read: u64,
        partials: &BTreeMap<String, KeyedValues>,
    ) -> Result<()> {
        let host = self.cluster.host.clone();
        let mut per_host: BTreeMap<&str, Vec<(String, Vec<u8>)>> =
            owners.receivers().into_iter().filter(|h| *h != host).map(|h| (h, Vec::new())).collect();
        let mut own = Vec::new();
        for (state, values) in partials {
            let owned = owners.of_state(state);
            if !owned.is_empty() && owned.iter().all(|owner| owner.as_ref().is_some_and(|o| o.host == host)) {
                own.push((state.clone(), values.clone()));
                continue;
            }
            // Each owner's share, its keys in order as the partials hold them.
            let mut shares: BTreeMap<&str, KeyedValues> = BTreeMap::new();
            for (key, value) in values.iter() {
                let slot = slots::slot_of(key, self.slots);
                let owner = owned.get(slot as usize).and_then(Option::as_ref);
                let owner = owner.with_context(|| format!("slot {slot} of state {state} has no owner"))?;
                shares.entry(owner.host.as_str()).or_default().push(key, value.clone());
            }
            for (owner, share) in shares {
                if owner == host {
                    own.push((state.clone(), share));
                } else if let Some(pieces) = per_host.get_mut(owner) {
                    let cut = slots::encode_cut(&share, wire::CHUNK_BYTES);
                    pieces.extend(cut.into_iter().map(|piece| (state.clone(), piece)));
                }
            }
        }
        if owners.receivers().contains(host.as_str()) {
            let header = PartialsHeader {
                txid: start.txid,
                attempt: start.attempt,
                from: host.clone(),
                chunk: 0,
                chunks: 1,
                read,
                states: Vec::new(),
            };
            self.early.push((header, own));
        }
        let messages: Vec<Message> = per_host
            .into_iter()
            .map(|(to, pieces)| {
                let mut chunks: Vec<Vec<(String, Vec<u8>)>> = vec![Vec::new()];
                let mut bytes = 0;
                for piece in pieces {
                    if bytes + piece.1.len() > wire::CHUNK_BYTES && !chunks.last().expect("one").is_empty() {
                        chunks.push(Vec::new());
                        bytes = 0;
                    }
                    bytes += piece.1.len();
                    chunks.last_mut().expect("one").push(piece);
                }
                let count = chunks.len() as u32;
                let subject = self.subjects.partials(to);
                chunks
                    .into_iter()
                    .enumerate()
                    .map(|(at, chunk)| {
                        let header = PartialsHeader {
                            txid: start.txid,
                            attempt: start.attempt,
                            from: host.clone(),
                            chunk: at as u32,
                            chunks: count,
                            read,
                            states: chunk.iter().map(|(s, b)| (s.clone(), b.len() as u64)).collect(),
                        };
                        let bodies: Vec<Vec<u8>> = chunk.into_iter().map(|(_, b)| b).collect();
                        Ok((subject.clone(), wire::encode_partials(&header, &bodies)?))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        self.sent = Some((start.id(), messages.clone()));
        publish_all(&self.nats, messages)
    }

    /// Sends again what this host sent for try `id`, if it was its last.
    fn send_again(&mut self, id: (u64, u32)) {
        let Some((_, messages)) = self.sent.as_ref().filter(|(sent, _)| *sent == id) else { return };
        if let Err(e) = publish_all(&self.nats, messages.clone()) {
            tracing::warn!("topology {}: txid {}: partials not sent again: {e:#}", self.plan.name, id.0);
        }
    }

    /// Tells the leader how this host's part of the try went.
    fn report(&self, start: &Start, outcome: Outcome) {
        let done = Done { txid: start.txid, attempt: start.attempt, host: self.cluster.host.clone(), outcome };
        let client = self.nats.client.clone();
        let subject = self.subjects.done();
        let sent = self.nats.runtime.block_on(async {
            client.publish(subject, serde_json::to_vec(&done)?.into()).await?;
            client.flush().await?;
            anyhow::Ok(())
        });
        if let Err(e) = sent {
            tracing::warn!("topology {}: txid {}: the report did not go out: {e:#}", self.plan.name, start.txid);
        }
    }

    /// Every partition owner's partials for this try, combined by state.
    fn gather(&mut self, start: &Start, owners: &Owners) -> Result<BTreeMap<String, KeyedValues>> {
        let senders: BTreeSet<String> = owners.senders().into_iter().map(str::to_owned).collect();
        let me = self.cluster.host.clone();
        let mut chunks: BTreeMap<String, (u32, BTreeSet<u32>)> = BTreeMap::new();
        // Each state's runs of partials, keys in order, merged once all came.
        let mut runs: BTreeMap<String, Vec<KeyedValues>> = BTreeMap::new();
        let mut read: BTreeMap<String, u64> = BTreeMap::new();
        let complete = |chunks: &BTreeMap<String, (u32, BTreeSet<u32>)>| {
            senders.iter().all(|s| chunks.get(s).is_some_and(|(n, got)| got.len() as u32 == *n))
        };
        let mut early = std::mem::take(&mut self.early).into_iter();
        let deadline = Instant::now() + self.timeout;
        while !complete(&chunks) {
            let (header, states) = match early.next() {
                Some(message) => message,
                None => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let missing: Vec<&String> = senders.iter().filter(|s| !chunks.contains_key(*s)).collect();
                        bail!("txid {}: no partials from hosts {missing:?} within {:?}", start.txid, self.timeout);
                    }
                    let wait = left.min(Duration::from_millis(200));
                    let next =
                        self.nats.runtime.block_on(async { tokio::time::timeout(wait, self.partials.next()).await });
                    let decoded = match next {
                        Ok(Some(message)) => match wire::decode_partials(&message.payload) {
                            Ok(decoded) => Some(decoded),
                            Err(e) => {
                                tracing::warn!("topology {}: a partials message is passed over: {e:#}", self.plan.name);
                                None
                            }
                        },
                        _ => None,
                    };
                    if let Some(newer) = self.newer_start(start) {
                        // What came meanwhile is kept for the try that
                        // supersedes this one, never dropped.
                        self.early.extend(decoded.filter(|(header, _)| (header.txid, header.attempt) > start.id()));
                        self.early.extend(early.by_ref().filter(|(h, _)| (h.txid, h.attempt) > start.id()));
                        self.next_start = Some(newer);
                        bail!("txid {} attempt {} was superseded", start.txid, start.attempt);
                    }
                    let Some(decoded) = decoded else { continue };
                    decoded
                }
            };
            let id = (header.txid, header.attempt);
            if id > start.id() {
                self.early.push((header, states));
                continue;
            }
            if id < start.id() || !senders.contains(&header.from) {
                continue;
            }
            let entry = chunks.entry(header.from.clone()).or_insert((header.chunks, BTreeSet::new()));
            if entry.0 != header.chunks || !entry.1.insert(header.chunk) {
                continue;
            }
            read.insert(header.from.clone(), header.read);
            for (state, values) in states {
                if self.plan.aggregate(&state).is_none() {
                    bail!("host {} sent partials of state {state:?}, which the topology does not have", header.from);
                }
                let owned = owners.of_state(&state);
                let mine = |slot: u32| owned.get(slot as usize).and_then(Option::as_ref).is_some_and(|o| o.host == me);
                let stray = values.iter().map(|(key, _)| slots::slot_of(key, self.slots)).find(|slot| !mine(*slot));
                if let Some(slot) = stray {
                    bail!("host {} sent a key of slot {slot} of state {state}, which is not this host's", header.from);
                }
                runs.entry(state).or_default().push(values);
            }
        }
        self.early.extend(early);
        // Every message of the span read once: fewer means a partition's
        // read came up short (a consumer a restarted server forgot, say),
        // and a batch missing messages must not be committed.
        let total: u64 = read.values().sum();
        if total != start.until - start.after {
            bail!(
                "txid {}: the partitions' owners read {total} of the {} messages of sequences {}..={} ({read:?})",
                start.txid,
                start.until - start.after,
                start.after + 1,
                start.until
            );
        }
        runs.into_iter()
            .map(|(state, runs)| {
                let aggregate = self.plan.aggregate(&state).expect("checked as it came");
                let combine = |before, value| aggregate.builtin.combine(before, value).map_err(|e| anyhow!("{e}"));
                let merged = KeyedValues::merge(runs, combine).with_context(|| format!("partials of state {state}"))?;
                Ok((state, merged))
            })
            .collect()
    }

    /// A start for a later try than `start`, if one came; `start` said
    /// again sends this host's partials of it again.
    fn newer_start(&mut self, start: &Start) -> Option<Start> {
        let mut newer: Option<Start> = None;
        let mut again = false;
        while let Some(Some(message)) = self.starts.next().now_or_never() {
            let Ok(next) = serde_json::from_slice::<Start>(&message.payload) else { continue };
            if next.id() > start.id() && newer.as_ref().is_none_or(|n| next.id() > n.id()) {
                newer = Some(next);
            } else if next.id() == start.id() {
                again = true;
            }
        }
        if again && newer.is_none() {
            self.send_again(start.id());
        }
        newer
    }

    /// Restores from the changelog the slots this host owns and has not
    /// restored for their present ownership, or every one it owns when its
    /// copy is behind `committed` (the commit record's txid); returns where
    /// its copy stands.
    fn prepare_slots(&mut self, owners: &Owners, committed: u64) -> Result<u64> {
        let name = self.plan.name.clone();
        let local = self.db.progress(&name)?.last_committed;
        let owned = owners.owned_by(&self.cluster.host);
        self.ready.retain(|slot, since| owned.get(slot) == Some(since));
        let behind = local < committed;
        let wanted: Vec<((String, u32), u64)> = owned
            .iter()
            .filter(|(slot, _)| behind || !self.ready.contains_key(*slot))
            .map(|(s, e)| (s.clone(), *e))
            .collect();
        // Restored slots hold what the changelog holds: the commit record's
        // txid, or parts of the next. The copy is marked as standing there,
        // so that the next txid is applied again: its slots that have it
        // already pass over it by Trident's rules, and the restored ones
        // take it.
        let stands = if behind || !wanted.is_empty() { committed } else { local };
        if !wanted.is_empty() || behind {
            let mut rebuilt: BTreeMap<String, Vec<(Vec<u8>, Stored)>> = BTreeMap::new();
            let mut slots_of: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for ((state, slot), since) in &wanted {
                // Fenced first: from here on, a former owner's late records
                // are passed over by this rebuild and every later one.
                let got = self.nats.runtime.block_on(async {
                    tokio::time::timeout(CHANGELOG_TIMEOUT, async {
                        self.changelog.fence(state, *slot, *since).await?;
                        self.changelog.rebuild(state, *slot).await
                    })
                    .await
                    .map_err(|_| {
                        anyhow!("slot {slot} of state {state} was not restored within {CHANGELOG_TIMEOUT:?}")
                    })?
                })?;
                let values = rebuilt.entry(state.clone()).or_default();
                for (key, (_, bytes)) in got.values {
                    let stored = Stored::decode(&bytes)
                        .with_context(|| format!("slot {slot} of state {state}'s changelog holds a bad record"))?;
                    values.push((key, stored));
                }
                slots_of.entry(state.clone()).or_default().insert(*slot);
            }
            let slots = self.slots;
            let drops: Vec<(String, _)> = slots_of
                .into_iter()
                .map(|(state, set)| (state, move |key: &[u8]| set.contains(&slots::slot_of(key, slots))))
                .collect();
            let restored: Vec<Restored<'_>> = drops
                .iter()
                .map(|(state, drop)| Restored {
                    state,
                    kind: self.plan.aggregate(state).map_or(weir_sdk::topology::StateKind::Transactional, |a| a.kind),
                    drop,
                    values: rebuilt.remove(state).unwrap_or_default(),
                })
                .collect();
            self.db.restore(&name, &restored, stands)?;
            // What the committer cached of these slots is stale now.
            self.committer = Committer::new(Arc::clone(&self.plan.plan), self.plan.source.clone());
            if !wanted.is_empty() {
                tracing::info!(
                    "topology {name}: host {} restored {} slots from the changelog (its copy stands at txid {stands})",
                    self.cluster.host,
                    wanted.len()
                );
            }
            self.ready.extend(wanted.iter().cloned());
        }
        let mut figures = self.figures.locked();
        figures.slots_restored += wanted.len() as u64;
        figures.ready = self.ready.keys().cloned().collect();
        figures.last_committed = stands;
        Ok(stands)
    }

    /// Commits this host's slots' share of the batch and publishes it to
    /// the changelog; returns the keys written.
    fn commit(&mut self, start: &Start, owners: &Owners, mut merged: BTreeMap<String, KeyedValues>) -> Result<u64> {
        let name = self.plan.name.clone();
        let local = self.prepare_slots(owners, start.txid - 1)?;
        // Each written key's record, by state and slot, as the commit leaves it.
        let mut slots: BTreeMap<String, BTreeMap<u32, Vec<Write>>> = BTreeMap::new();
        let mut keys = 0;
        let slot_count = self.slots;
        let mut tell = |state: &str, key: &[u8], stored: Option<&Stored>| {
            let by_slot = match slots.get_mut(state) {
                Some(by_slot) => by_slot,
                None => slots.entry(state.to_owned()).or_default(),
            };
            let slot = slots::slot_of(key, slot_count);
            by_slot.entry(slot).or_default().push((key.to_vec(), stored.map(Stored::encode)));
            keys += 1;
        };
        if local + 1 == start.txid {
            let mut partials = HashMap::new();
            for aggregate in &self.plan.aggregates {
                let values = merged.remove(&aggregate.state).unwrap_or_default();
                partials.insert(aggregate.node, Partials::Values(values));
            }
            let record = BatchRecord {
                attempt: start.attempt,
                time_ms: start.time_ms,
                spout: encode_span(start.after, start.until),
            };
            self.committer
                .prepare(&*self.db, start.txid, &record, Handover::of_partials(partials))
                .map_err(|e| anyhow!("{e}"))?;
            self.committer.commit_group_telling(&*self.db, &mut tell).map_err(|f| anyhow!("{}", f.error))?;
        } else {
            // Committed here before: its records are read back.
            for (state, values) in &merged {
                let stored = self.db.stored_each(&name, state, values.iter().map(|(key, _)| key))?;
                for ((key, _), stored) in values.iter().zip(stored) {
                    tell(state, key, stored.as_ref());
                }
            }
        }
        // Published only while the slots are still this host's.
        if self.owners()?.is_none_or(|now| now.epoch != start.epoch) {
            bail!("txid {}: the assignment moved on from epoch {}; nothing is published", start.txid, start.epoch);
        }
        let slots: Vec<SlotWrites> = slots
            .into_iter()
            .flat_map(|(state, by_slot)| by_slot.into_iter().map(move |(slot, records)| (state.clone(), slot, records)))
            .map(|(state, slot, records)| SlotWrites {
                epoch: owners.owner(&state, slot).map_or(start.epoch, |o| o.since),
                state,
                slot,
                records,
            })
            .collect();
        self.to_changelog(start.txid, |changelog| changelog.publish(start.txid, &slots))?;
        if start.txid.is_multiple_of(self.cluster.snapshot_every.max(1)) {
            let whole = self.whole_slots(owners)?;
            self.to_changelog(start.txid, |changelog| changelog.snapshot(start.txid, &whole))?;
        }
        Ok(keys)
    }

    /// Every slot this host owns, whole, as its copy holds it.
    fn whole_slots(&self, owners: &Owners) -> Result<Vec<SlotWrites>> {
        let owned = owners.owned_by(&self.cluster.host);
        let mut whole = Vec::new();
        for aggregate in &self.plan.aggregates {
            let state = &aggregate.state;
            let mine: BTreeMap<u32, u64> =
                owned.iter().filter(|((s, _), _)| s == state).map(|((_, slot), since)| (*slot, *since)).collect();
            let mut records: BTreeMap<u32, Vec<Write>> = mine.keys().map(|slot| (*slot, Vec::new())).collect();
            let keep = |key: &[u8]| mine.contains_key(&slots::slot_of(key, self.slots));
            for (key, stored) in self.db.stored_page(&self.plan.name, state, None, usize::MAX, &keep)? {
                let slot = slots::slot_of(&key, self.slots);
                records.entry(slot).or_default().push((key, Some(stored.encode())));
            }
            whole.extend(records.into_iter().map(|(slot, records)| SlotWrites {
                state: state.clone(),
                slot,
                epoch: mine[&slot],
                records,
            }));
        }
        Ok(whole)
    }

    /// Runs `put` against the changelog, bounded by [`CHANGELOG_TIMEOUT`].
    fn to_changelog<'a, F>(&'a self, txid: u64, put: impl FnOnce(&'a Changelog) -> F) -> Result<()>
    where
        F: Future<Output = Result<()>>,
    {
        self.nats
            .runtime
            .block_on(async { tokio::time::timeout(CHANGELOG_TIMEOUT, put(&self.changelog)).await })
            .map_err(|_| anyhow!("the changelog did not take txid {txid}'s records within {CHANGELOG_TIMEOUT:?}"))?
    }
}
