//! `weir publish`: publish the lines of a file into a NATS JetStream
//! stream, one message a line, spread over the stream's partition subjects
//! round-robin or by a key, each publish acknowledged by the server. With
//! `--kafka` and `--topic` the lines go into a Kafka topic instead
//! (`publish_kafka`, which shares these arguments and the spread).

use super::nats::NatsArgs;
use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, context::PublishAckFuture};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_config::{MAX_JETSTREAM_PARTITIONS, NATS_REQUEST_TIMEOUT, PUBLISH_ACKS_IN_FLIGHT};
use weir_io::nats::{Nats, subject};

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// The file whose lines to publish, one message each (without the line
    /// ending); - reads standard input.
    pub file: PathBuf,
    /// The stream to publish into.
    #[arg(long, required_unless_present = "topic")]
    stream: Option<String>,
    /// The partition subjects to spread the lines over. Braces expand:
    /// 'clicks.{0..7}' is clicks.0 to clicks.7, 'ads.{eu,us}' is ads.eu and
    /// ads.us. Repeatable.
    #[arg(long = "subjects", value_name = "SUBJECTS", required_unless_present = "topic")]
    subjects: Vec<String>,
    /// Create the stream (file storage, taking these subjects) if it does
    /// not exist.
    #[arg(long)]
    pub create: bool,
    /// Pick each line's subject by a hash of a key instead of round-robin:
    /// word:N (the line's N-th whitespace-separated word, from 1) or
    /// json:FIELD (the line is a JSON object; the member FIELD).
    #[arg(long, value_name = "SPEC")]
    pub key: Option<String>,
    #[command(flatten)]
    nats: NatsArgs,
    /// The Kafka topic to publish into (with --kafka), instead of a stream:
    /// the lines are spread over its partitions.
    #[arg(long, conflicts_with_all = ["stream", "subjects"])]
    pub topic: Option<String>,
    /// With --topic and --create: the partitions of the topic made.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=100_000))]
    pub partitions: i32,
    #[command(flatten)]
    pub kafka: super::kafka::KafkaArgs,
}

/// How a line's subject is chosen.
#[derive(Debug, PartialEq)]
pub(super) enum Spread {
    RoundRobin,
    Word(usize),
    Json(String),
}

impl Spread {
    pub(super) fn parse(spec: Option<&str>) -> Result<Spread> {
        let Some(spec) = spec else { return Ok(Spread::RoundRobin) };
        match spec.split_once(':') {
            Some(("word", n)) => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Spread::Word(n)),
                _ => bail!("--key {spec}: the word's number counts from 1"),
            },
            Some(("json", field)) if !field.is_empty() => Ok(Spread::Json(field.to_owned())),
            _ => bail!("--key {spec}: give word:N or json:FIELD"),
        }
    }

    /// The index of line `index` (`line`, numbered `number` in messages)
    /// among `partitions` subjects.
    pub(super) fn pick(&self, line: &[u8], index: u64, number: u64, partitions: usize) -> Result<usize> {
        let key: Vec<u8> = match self {
            Spread::RoundRobin => return Ok((index % partitions as u64) as usize),
            Spread::Word(n) => match line.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()).nth(n - 1) {
                Some(word) => word.to_vec(),
                None => bail!("line {number} has no word {n} to key on"),
            },
            Spread::Json(field) => {
                let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
                    .with_context(|| format!("line {number} is not a JSON object to key on"))?;
                match object.get(field) {
                    Some(serde_json::Value::String(s)) => s.as_bytes().to_vec(),
                    Some(other) => other.to_string().into_bytes(),
                    None => bail!("line {number} has no member {field:?} to key on"),
                }
            }
        };
        Ok((fnv1a(&key) % partitions as u64) as usize)
    }
}

/// FNV-1a: a hash that stays the same from one version to the next, so
/// that a key keeps its subject.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x100000001b3))
}

/// The subjects `pattern` stands for, braces expanded, in order.
fn expand(pattern: &str) -> Result<Vec<String>> {
    let Some(open) = pattern.find('{') else { return Ok(vec![pattern.to_owned()]) };
    let close = open + pattern[open..].find('}').with_context(|| format!("{pattern}: a {{ without its }}"))?;
    let (head, inner, tail) = (&pattern[..open], &pattern[open + 1..close], &pattern[close + 1..]);
    let choices: Vec<String> = match inner.split_once("..") {
        Some((a, b)) if a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok() => {
            let (a, b) = (a.parse::<u64>()?, b.parse::<u64>()?);
            if b < a || b - a >= MAX_JETSTREAM_PARTITIONS as u64 {
                bail!("{pattern}: {{{inner}}} must count up, by at most {MAX_JETSTREAM_PARTITIONS}");
            }
            (a..=b).map(|n| n.to_string()).collect()
        }
        _ => inner.split(',').map(str::to_owned).collect(),
    };
    let rests = expand(tail)?;
    let mut out = Vec::new();
    for choice in &choices {
        for rest in &rests {
            out.push(format!("{head}{choice}{rest}"));
            if out.len() > MAX_JETSTREAM_PARTITIONS {
                bail!("{pattern} stands for more than {MAX_JETSTREAM_PARTITIONS} subjects");
            }
        }
    }
    Ok(out)
}

/// The subjects of every `--subjects`, expanded and checked.
fn partition_subjects(patterns: &[String]) -> Result<Vec<String>> {
    let mut subjects = Vec::new();
    for pattern in patterns {
        for s in expand(pattern)? {
            subject::check(&s)?;
            if subject::is_wildcard(&s) {
                bail!("--subjects {s}: a message is published to a subject, not a wildcard");
            }
            if !subjects.contains(&s) {
                subjects.push(s);
            }
        }
    }
    if subjects.len() > MAX_JETSTREAM_PARTITIONS {
        bail!("more than {MAX_JETSTREAM_PARTITIONS} subjects");
    }
    Ok(subjects)
}

/// The stream, created first if asked and missing; its subjects must take
/// every one of `subjects`.
async fn stream(nats: &Nats, args: &PublishArgs, name: &str, subjects: &[String]) -> Result<()> {
    use jetstream::context::GetStreamErrorKind;
    let found = match nats.jetstream.get_stream(&name).await {
        Ok(mut stream) => Some(stream.info().await?.config.subjects.clone()),
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(api) if api.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND => None,
            _ => return Err(e).with_context(|| format!("looking up stream {} at {}", name, nats.server)),
        },
    };
    let taken = match found {
        Some(taken) => taken,
        None if args.create => {
            let config = jetstream::stream::Config {
                name: name.to_owned(),
                subjects: subjects.to_vec(),
                storage: jetstream::stream::StorageType::File,
                ..Default::default()
            };
            nats.jetstream
                .create_stream(config)
                .await
                .with_context(|| format!("creating stream {} at {}", name, nats.server))?;
            eprintln!("created stream {} with subjects {}", name, subjects.join(", "));
            return Ok(());
        }
        None => {
            bail!("stream {} does not exist on the NATS server at {}: add --create to create it", name, nats.server)
        }
    };
    if let Some(missing) = subjects.iter().find(|s| !taken.iter().any(|t| subject::matches(t, s))) {
        bail!("stream {} does not take subject {missing} (its subjects: {})", name, taken.join(", "));
    }
    Ok(())
}

/// Waits for the oldest publish in flight to be acknowledged.
async fn acknowledged(in_flight: &mut VecDeque<(u64, PublishAckFuture)>, last: &mut u64) -> Result<()> {
    let Some((number, ack)) = in_flight.pop_front() else { return Ok(()) };
    let ack = tokio::time::timeout(NATS_REQUEST_TIMEOUT * 2, ack)
        .await
        .with_context(|| format!("line {number} was not acknowledged in time"))?
        .with_context(|| format!("publishing line {number}"))?;
    *last = (*last).max(ack.sequence);
    Ok(())
}

/// The lines of a file to publish (`-`: standard input), each without
/// its line ending.
pub(super) struct Lines {
    reader: BufReader<Box<dyn Read>>,
    line: Vec<u8>,
    file: PathBuf,
}

impl Lines {
    /// Opens `file`.
    pub(super) fn open(file: &Path) -> Result<Lines> {
        let input: Box<dyn Read> = if file.as_os_str() == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?)
        };
        Ok(Lines { reader: BufReader::with_capacity(1 << 20, input), line: Vec::new(), file: file.to_owned() })
    }

    /// The next line; `None` at the end.
    pub(super) fn next(&mut self) -> Result<Option<&[u8]>> {
        self.line.clear();
        let read = self.reader.read_until(b'\n', &mut self.line);
        if read.with_context(|| format!("reading {}", self.file.display()))? == 0 {
            return Ok(None);
        }
        let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        Ok(Some(text.strip_suffix(b"\r").unwrap_or(text)))
    }
}

pub fn run(args: PublishArgs) -> Result<()> {
    let config = args.nats.config()?.context("weir publish needs the server: --nats URL")?;
    let name = args.stream.clone().context("weir publish needs --stream (or --topic with --kafka)")?;
    subject::check_stream_name(&name)?;
    let subjects = partition_subjects(&args.subjects)?;
    let spread = Spread::parse(args.key.as_deref())?;
    let mut lines = Lines::open(&args.file)?;
    let nats = Nats::connect(&config, "weir publish")?;
    let started = Instant::now();
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    let (published, last) = nats.runtime.block_on(async {
        stream(&nats, &args, &name, &subjects).await?;
        let mut in_flight = VecDeque::with_capacity(PUBLISH_ACKS_IN_FLIGHT);
        let (mut index, mut last) = (0u64, 0u64);
        while let Some(text) = lines.next()? {
            let number = index + 1;
            let subject = &subjects[spread.pick(text, index, number, subjects.len())?];
            let ack = nats
                .jetstream
                .publish(subject.clone(), bytes::Bytes::copy_from_slice(text))
                .await
                .with_context(|| format!("publishing line {number} to {subject}"))?;
            in_flight.push_back((number, ack));
            if in_flight.len() >= PUBLISH_ACKS_IN_FLIGHT {
                acknowledged(&mut in_flight, &mut last).await?;
            }
            index += 1;
            if index % 1000 == 0 {
                bar.set_message(format!("{index} lines published to stream {name}"));
            }
        }
        while !in_flight.is_empty() {
            acknowledged(&mut in_flight, &mut last).await?;
        }
        anyhow::Ok((index, last))
    })?;
    bar.finish_and_clear();
    println!(
        "published {published} lines to stream {name} over {} subjects in {:.2}s; last sequence {last}",
        subjects.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_to_subjects_in_order() {
        assert_eq!(expand("p.{0..3}").unwrap(), ["p.0", "p.1", "p.2", "p.3"]);
        assert_eq!(expand("ads.{eu,us}.{1..2}").unwrap(), ["ads.eu.1", "ads.eu.2", "ads.us.1", "ads.us.2"]);
        assert_eq!(expand("plain").unwrap(), ["plain"]);
        assert!(expand("p.{3..1}").unwrap_err().to_string().contains("must count up"));
        assert!(expand("p.{0..99999}").is_err());
        assert!(expand("p.{0").unwrap_err().to_string().contains("without its }"));
        assert!(partition_subjects(&["p.*".into()]).unwrap_err().to_string().contains("not a wildcard"));
    }

    #[test]
    fn a_key_picks_the_same_subject_every_time() {
        let words = Spread::parse(Some("word:2")).unwrap();
        let a = words.pick(b"x user-7 y", 0, 1, 4).unwrap();
        assert_eq!(a, words.pick(b"z user-7", 9, 10, 4).unwrap());
        assert!(words.pick(b"one", 0, 3, 4).unwrap_err().to_string().contains("line 3 has no word 2"));
        let json = Spread::parse(Some("json:user")).unwrap();
        assert_eq!(json.pick(br#"{"user":"user-7"}"#, 0, 1, 4).unwrap(), a);
        assert!(json.pick(b"nope", 0, 5, 4).unwrap_err().to_string().contains("line 5 is not a JSON object"));
        assert_eq!(Spread::parse(None).unwrap().pick(b"", 6, 7, 4).unwrap(), 2);
        assert!(Spread::parse(Some("word:0")).is_err() && Spread::parse(Some("line")).is_err());
    }
}
