//! `weir publish --kafka BOOTSTRAP --topic T`: the lines of a file into a
//! Kafka topic, one record a line, spread over its partitions round robin
//! or by a key (`--key`, as for a stream), each produce request
//! acknowledged by the broker before the next of its partition.

use super::publish::{Lines, PublishArgs, Spread};
use anyhow::{Context, Result, anyhow, bail};
use rskafka::client::partition::Compression;
use rskafka::record::Record;
use std::time::Instant;
use weir_io::kafka::{Failure, Kafka};

/// Records per produce request: a broker sends whole record batches to a
/// fetch, so smaller ones let a reader take no more than it keeps.
const CHUNK: usize = 500;

pub fn run(args: &PublishArgs, topic: &str) -> Result<()> {
    let config = args.kafka.config()?.context("weir publish --topic needs the brokers: --kafka HOST:PORT")?;
    weir_plan::subject::check_topic(topic)?;
    let spread = Spread::parse(args.key.as_deref())?;
    let mut lines = Lines::open(&args.file)?;
    let mut kafka = Kafka::connect(&config, "weir publish")?;
    let started = Instant::now();
    let partitions = match kafka.partitions(topic) {
        Ok(partitions) => partitions,
        Err(Failure::Fatal(_)) if args.create => {
            let client = kafka.client().map_err(Failure::into_error)?;
            let controller = client.controller_client()?;
            kafka
                .runtime
                .block_on(controller.create_topic(topic, args.partitions, 1, 10_000))
                .with_context(|| format!("creating Kafka topic {topic} at {}", config.servers()))?;
            eprintln!("created Kafka topic {topic} with {} partitions", args.partitions);
            kafka.partitions(topic).map_err(Failure::into_error)?
        }
        Err(e) => return Err(e.into_error()),
    };
    let mut clients = Vec::with_capacity(partitions.len());
    for &partition in &partitions {
        clients.push(kafka.partition(topic, partition).map_err(Failure::into_error)?);
    }
    let mut pending: Vec<Vec<Record>> = vec![Vec::new(); partitions.len()];
    let mut index = 0u64;
    let now = rskafka::chrono::DateTime::from_timestamp_millis(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as i64,
    )
    .unwrap_or_default();
    let flush = |kafka: &Kafka, partition: usize, records: Vec<Record>| -> Result<()> {
        let client = &clients[partition];
        let n = records.len();
        kafka.runtime.block_on(client.produce(records, Compression::NoCompression)).map_err(|e| {
            anyhow!("producing {n} lines to partition {} of Kafka topic {topic}: {e}", partitions[partition])
        })?;
        Ok(())
    };
    while let Some(text) = lines.next()? {
        let number = index + 1;
        let at = spread.pick(text, index, number, partitions.len())?;
        pending[at].push(Record { key: None, value: Some(text.to_vec()), headers: Default::default(), timestamp: now });
        if pending[at].len() >= CHUNK {
            flush(&kafka, at, std::mem::take(&mut pending[at]))?;
        }
        index += 1;
    }
    for (at, records) in pending.into_iter().enumerate() {
        if !records.is_empty() {
            flush(&kafka, at, records)?;
        }
    }
    if index == 0 && args.file.as_os_str() != "-" {
        bail!("{} holds no lines to publish", args.file.display());
    }
    println!(
        "published {index} lines to Kafka topic {topic} over {} partitions in {:.2}s",
        partitions.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
