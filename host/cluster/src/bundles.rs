//! The cluster's bundles, stored once in a JetStream object store under
//! their content's SHA-256, so that every host loads the same bytes: a
//! bundle read back is checked against its name before anything uses it.

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, object_store};
use tokio::io::AsyncReadExt;

/// The object store's bucket. One for every cluster on the NATS server:
/// objects are named by their content, so clusters cannot collide.
pub const BUCKET: &str = "weir-bundles";

async fn store(js: &jetstream::Context) -> Result<object_store::ObjectStore> {
    if let Ok(store) = js.get_object_store(BUCKET).await {
        return Ok(store);
    }
    let config = object_store::Config {
        bucket: BUCKET.to_owned(),
        description: Some("weir: the bundles deployed to clusters".into()),
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    };
    js.create_object_store(config).await.with_context(|| format!("creating JetStream object store {BUCKET}"))
}

/// Stores `bytes` unless it is stored already; returns its name (its
/// SHA-256, in hex).
pub async fn put(js: &jetstream::Context, bytes: &[u8]) -> Result<String> {
    let digest = weir_engine::bundle::sha256_hex(bytes);
    let store = store(js).await?;
    if store.info(&digest).await.is_ok_and(|info| info.size == bytes.len()) {
        return Ok(digest);
    }
    store
        .put(digest.as_str(), &mut &bytes[..])
        .await
        .with_context(|| format!("storing bundle {digest} in JetStream object store {BUCKET}"))?;
    Ok(digest)
}

/// Reads bundle `digest` back, refusing one larger than `max_bytes` or whose
/// bytes are not what its name says.
pub async fn get(js: &jetstream::Context, digest: &str, max_bytes: usize) -> Result<Vec<u8>> {
    let doing = || format!("reading bundle {digest} from JetStream object store {BUCKET}");
    let store = store(js).await.with_context(doing)?;
    let object = store.get(digest).await.with_context(doing)?;
    let size = object.info().size;
    if size > max_bytes {
        bail!("bundle {digest} in JetStream object store {BUCKET} is {size} bytes, over the {max_bytes} allowed");
    }
    let mut bytes = Vec::with_capacity(size);
    object.take(max_bytes as u64 + 1).read_to_end(&mut bytes).await.with_context(doing)?;
    if bytes.len() > max_bytes || weir_engine::bundle::sha256_hex(&bytes) != digest {
        bail!("bundle {digest} in JetStream object store {BUCKET} does not hold the bytes its name is the SHA-256 of");
    }
    Ok(bytes)
}

/// Removes bundle `digest`; one already gone is no error.
pub async fn remove(js: &jetstream::Context, digest: &str) -> Result<()> {
    let store = store(js).await?;
    match store.delete(digest).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == object_store::DeleteErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing bundle {digest} from JetStream object store {BUCKET}")),
    }
}
