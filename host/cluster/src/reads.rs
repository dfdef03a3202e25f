//! Reads of a cluster topology's committed state, from whichever host is
//! asked: each key's slot's owner answers from its own copy, over NATS
//! request and reply. [`ClusterState`] is the asking side, and a
//! [`Snapshot`] too, so that a query stream runs over the cluster's state
//! as over one host's; [`answer`] is the owning side.

use super::plan::Owners;
use super::slots::slot_of;
use super::wire::{self, ReadAnswer, ReadRequest};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use weir_state::rules::Stored;
use weir_state::store::{OtherEntries, Snapshot, StateReader};
use weir_state::{Db, StoreError};

/// Keys one answer holds at most.
pub const PAGE: usize = 1000;

/// What a host answers of a slot it does not own, or owns and has not
/// restored yet: the slot is changing hands.
pub const NOT_RESTORED: &str = "not restored yet";

/// Whether a read failed because a slot it asked for is changing hands:
/// worth asking again under the assignment read afresh.
pub fn is_moving(error: &anyhow::Error) -> bool {
    format!("{error:#}").contains(NOT_RESTORED)
}

/// How long a host has to answer a read.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The state of one cluster topology, read from its slots' owners.
pub struct ClusterState {
    pub client: async_nats::Client,
    pub runtime: tokio::runtime::Handle,
    pub cluster: String,
    pub topology: String,
    pub owners: Owners,
    pub slots: u32,
}

fn decode_entries(answer: ReadAnswer) -> Result<Vec<(Vec<u8>, Stored)>> {
    answer
        .entries
        .into_iter()
        .map(|(key, stored)| {
            let key = hex::decode(key).context("a key in a read's answer")?;
            let stored = Stored::decode(&hex::decode(stored).context("a record in a read's answer")?)?;
            Ok((key, stored))
        })
        .collect()
}

impl ClusterState {
    /// `host`'s answer to `request`; a slot it has just gained and not
    /// restored yet is asked again, for at most [`READ_TIMEOUT`].
    fn ask(&self, host: &str, request: &ReadRequest) -> Result<ReadAnswer> {
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        loop {
            match self.ask_once(host, request) {
                Err(e) if is_moving(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                answer => return answer,
            }
        }
    }

    fn ask_once(&self, host: &str, request: &ReadRequest) -> Result<ReadAnswer> {
        let subject = wire::reads(&self.cluster, host);
        let payload = serde_json::to_vec(request)?;
        let client = self.client.clone();
        let reply = self
            .runtime
            .block_on(async move { tokio::time::timeout(READ_TIMEOUT, client.request(subject, payload.into())).await });
        let reply = match reply {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => bail!("host {host} did not answer a read of state {}: {e}", request.state),
            Err(_) => bail!("host {host} did not answer a read of state {} within {READ_TIMEOUT:?}", request.state),
        };
        let answer: ReadAnswer = serde_json::from_slice(&reply.payload)
            .with_context(|| format!("host {host}'s answer to a read of state {}", request.state))?;
        if let Some(error) = &answer.error {
            bail!("host {host}: {error}");
        }
        Ok(answer)
    }

    fn request(&self, host: &str, state: &str, key: Option<&[u8]>, after: Option<&[u8]>, limit: usize) -> ReadRequest {
        let owned = self.owners.slots.get(state).into_iter().flat_map(|slots| slots.iter().enumerate());
        let slots = owned.filter(|(_, o)| o.as_ref().is_some_and(|o| o.host == host)).map(|(s, _)| s as u32).collect();
        ReadRequest {
            slots,
            topology: self.topology.clone(),
            state: state.to_owned(),
            key: key.map(hex::encode),
            after: after.map(hex::encode),
            limit,
        }
    }

    /// The committed record of encoded key `key`, from its slot's owner.
    pub fn get(&self, state: &str, key: &[u8]) -> Result<Option<Stored>> {
        let slot = slot_of(key, self.slots);
        let owner =
            self.owners.owner(state, slot).ok_or_else(|| anyhow!("slot {slot} of state {state} has no owner"))?;
        let answer = self.ask(&owner.host, &self.request(&owner.host, state, Some(key), None, 1))?;
        Ok(decode_entries(answer)?.into_iter().find(|(k, _)| k == key).map(|(_, stored)| stored))
    }

    /// Up to `limit` records after `after`, in key order, from every owner.
    pub fn page(&self, state: &str, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Stored)>> {
        let hosts: BTreeSet<&str> =
            self.owners.slots.get(state).into_iter().flatten().flatten().map(|o| o.host.as_str()).collect();
        let mut all = Vec::new();
        for host in hosts {
            all.extend(decode_entries(self.ask(host, &self.request(host, state, None, after, limit))?)?);
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.truncate(limit);
        Ok(all)
    }

    /// The first `most` records, in key order (all of them, if fewer).
    pub fn first(&self, state: &str, most: usize) -> Result<Vec<(Vec<u8>, Stored)>> {
        let mut out: Vec<(Vec<u8>, Stored)> = Vec::new();
        loop {
            let page = self.page(state, out.last().map(|(key, _)| key.as_slice()), PAGE.min(most - out.len()))?;
            let full = page.len() == PAGE;
            out.extend(page);
            if !full || out.len() >= most {
                return Ok(out);
            }
        }
    }

    /// Every record from `from` up to (not including) `to`; all of them
    /// without `to`.
    pub fn range(&self, state: &str, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Stored)>> {
        let mut out: Vec<(Vec<u8>, Stored)> = Vec::new();
        if let Some(from) = from
            && let Some(stored) = self.get(state, from)?
        {
            out.push((from.to_vec(), stored));
        }
        let mut after = from.map(<[u8]>::to_vec);
        loop {
            let page = self.page(state, after.as_deref(), PAGE)?;
            let full = page.len() == PAGE;
            for (key, stored) in page {
                if to.is_some_and(|to| key.as_slice() >= to) {
                    return Ok(out);
                }
                after = Some(key.clone());
                out.push((key, stored));
            }
            if !full {
                return Ok(out);
            }
        }
    }
}

/// One state of a [`ClusterState`], for a query's reads.
struct ClusterReader {
    state: Arc<ClusterState>,
    name: String,
}

// What the owners answer, or fail to, comes over NATS: another store's.
impl StateReader for ClusterReader {
    fn get(&self, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        self.state.get(&self.name, key).map_err(StoreError::Backend)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        self.state.range(&self.name, Some(from), Some(to)).map_err(StoreError::Backend)
    }
}

/// The cluster's committed state, as a query reads it.
pub struct ClusterSnapshot(pub Arc<ClusterState>);

impl Snapshot for ClusterSnapshot {
    fn state(&self, _topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>, StoreError> {
        Ok(Some(Box::new(ClusterReader { state: Arc::clone(&self.0), name: state.to_owned() })))
    }

    fn others(&self, _topology: &str, _table: &str) -> Result<OtherEntries, StoreError> {
        Ok(Vec::new())
    }
}

/// This host's answer to `request`, from its own copy, over the slots in
/// `ready` (those it owns and has restored).
pub fn answer(db: &Db, request: &ReadRequest, ready: &BTreeSet<(String, u32)>, slots: u32) -> ReadAnswer {
    let outcome = (|| {
        let state = request.state.as_str();
        if let Some(slot) = request.slots.iter().find(|s| !ready.contains(&(state.to_owned(), **s))) {
            bail!("slot {slot} of state {state} is not this host's, or {NOT_RESTORED}");
        }
        let asked: BTreeSet<u32> = request.slots.iter().copied().collect();
        let is_ready = |key: &[u8]| asked.contains(&slot_of(key, slots));
        let entries = match &request.key {
            Some(key) => {
                let key = hex::decode(key).context("the key is not hex")?;
                if !is_ready(&key) {
                    bail!("slot {} of state {state} was not asked of this host", slot_of(&key, slots));
                }
                db.stored(&request.topology, state, &key)?.map(|stored| (key, stored)).into_iter().collect()
            }
            None => {
                let after = request.after.as_deref().map(hex::decode).transpose().context("`after` is not hex")?;
                let limit = request.limit.clamp(1, PAGE);
                db.stored_page(&request.topology, state, after.as_deref(), limit, &is_ready)?
            }
        };
        anyhow::Ok(entries)
    })();
    match outcome {
        Ok(entries) => ReadAnswer {
            entries: entries.into_iter().map(|(k, s)| (hex::encode(k), hex::encode(s.encode()))).collect(),
            more: false,
            error: None,
        },
        Err(e) => ReadAnswer { error: Some(format!("{e:#}")), ..ReadAnswer::default() },
    }
}
