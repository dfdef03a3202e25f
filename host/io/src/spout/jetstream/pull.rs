//! One read of a pull consumer over core NATS: requests on
//! `$JS.API.CONSUMER.MSG.NEXT`, the messages on an inbox of the read's own,
//! and each message's stream sequence, timestamp and pending count taken
//! from its reply subject, with no JetStream context per message.

use anyhow::{Result, anyhow, bail};
use async_nats::{Client, Message, StatusCode};
use futures_util::{FutureExt, StreamExt};
use weir_config::NATS_REQUEST_TIMEOUT;

/// Messages one pull request asks for at most: well inside what the client
/// buffers for a subscription (65,536), so that none is dropped.
const PULL_MAX: usize = 10_000;

/// A message read, and what its reply subject says of it.
pub struct Delivered {
    pub message: Message,
    pub sequence: u64,
    /// When the server stored it, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The consumer's messages left after this one.
    pub pending: u64,
}

/// What one read found, in stream order.
pub struct Pulled {
    pub messages: Vec<Delivered>,
    /// A message past the end of the range was met (and not kept).
    pub beyond: bool,
    /// The read reached its bytes and let the rest of its last request's
    /// messages go by (not kept).
    pub cut: bool,
}

/// How a read given each message as it came ended.
#[derive(Default)]
pub struct Taken {
    pub count: usize,
    /// The last message's stream sequence.
    pub last: Option<u64>,
    /// A message past the end of the range was met (and not given).
    pub beyond: bool,
    /// That message and every later one the request that met it brought
    /// (the consumer stands after the last), in order, for a reader that
    /// goes on from them.
    pub over: Vec<Delivered>,
    /// `each` asked for no more.
    pub stopped: bool,
}

/// Reads up to `max` messages of consumer `consumer` of stream `stream`,
/// stopping before any message past sequence `until`; fewer when the
/// consumer has no more now, or once the messages kept hold `max_bytes`
/// (the first is kept whatever its size).
pub async fn read(
    client: &Client,
    stream: &str,
    consumer: &str,
    max: usize,
    until: Option<u64>,
    max_bytes: usize,
) -> Result<Pulled> {
    let mut messages = Vec::with_capacity(max.min(PULL_MAX));
    let mut bytes = 0;
    let taken = read_each(client, stream, consumer, max, until, |delivered| {
        bytes += delivered.message.length;
        messages.push(delivered);
        Ok(if bytes >= max_bytes { Flow::Stop } else { Flow::More })
    })
    .await?;
    Ok(Pulled { messages, beyond: taken.beyond, cut: taken.stopped })
}

/// Whether a read goes on after a message.
pub enum Flow {
    More,
    /// No further message is wanted: the read ends at once, and the
    /// messages its last request asked for are let go by.
    Stop,
}

/// As [`read`], giving `each` every message as it comes, so that none is
/// held past its use (each holds a piece of the client's read buffer,
/// which can then be used again); an error from `each`, or its
/// [`Flow::Stop`], ends the read.
pub async fn read_each(
    client: &Client,
    stream: &str,
    consumer: &str,
    max: usize,
    until: Option<u64>,
    mut each: impl FnMut(Delivered) -> Result<Flow>,
) -> Result<Taken> {
    let api = format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}");
    // Each request answers on an inbox of its own, so that the status that
    // ends one is never taken for the end of the next.
    let inbox = client.new_inbox();
    let mut subscription = client.subscribe(format!("{inbox}.*")).await?;
    let mut taken = Taken::default();
    let mut request = 0u64;
    while taken.count < max {
        request += 1;
        let reply = format!("{inbox}.{request}");
        let asked = (max - taken.count).min(PULL_MAX);
        let body = format!(r#"{{"batch":{asked},"no_wait":true}}"#);
        client.publish_with_reply(api.clone(), reply.clone(), body.into()).await?;
        let mut got = 0;
        while got < asked {
            // A server gone away says nothing, hence the timeout; a message
            // already there is taken without one (a timer a message costs).
            let next = match subscription.next().now_or_never() {
                Some(next) => next,
                None => match tokio::time::timeout(NATS_REQUEST_TIMEOUT, subscription.next()).await {
                    Ok(next) => next,
                    Err(_) => bail!("no answer within {NATS_REQUEST_TIMEOUT:?}"),
                },
            };
            let Some(message) = next else { bail!("the connection closed") };
            match message.status {
                None | Some(StatusCode::OK) => {}
                Some(_) if message.subject.as_str() != reply => continue,
                Some(StatusCode::IDLE_HEARTBEAT) => continue,
                // Nothing more now.
                Some(StatusCode::NOT_FOUND | StatusCode::TIMEOUT) => return Ok(taken),
                Some(status) => {
                    bail!(
                        "the server answered {status} ({})",
                        message.description.as_deref().unwrap_or("no description")
                    )
                }
            }
            let delivered = delivered(message)?;
            if taken.beyond || until.is_some_and(|until| delivered.sequence > until) {
                // The server sent the request's messages on: they are kept,
                // so that the consumer's place is known.
                taken.beyond = true;
                taken.over.push(delivered);
                got += 1;
                continue;
            }
            taken.last = Some(delivered.sequence);
            taken.count += 1;
            if let Flow::Stop = each(delivered)? {
                taken.stopped = true;
                return Ok(taken);
            }
            got += 1;
        }
        if taken.beyond {
            return Ok(taken);
        }
    }
    Ok(taken)
}

fn delivered(message: Message) -> Result<Delivered> {
    let reply = message.reply.as_ref().map_or("", |r| r.as_str());
    let (sequence, nanos, pending) =
        ack_info(reply).ok_or_else(|| anyhow!("a message of {} without its metadata ({reply:?})", message.subject))?;
    Ok(Delivered { sequence, timestamp_ms: (nanos / 1_000_000) as i64, pending, message })
}

/// The stream sequence, timestamp in nanoseconds and pending count that a
/// JetStream message's reply subject holds: `$JS.ACK.` then stream,
/// consumer, delivered, stream sequence, consumer sequence, timestamp and
/// pending, after a domain and an account hash in the newer form.
fn ack_info(reply: &str) -> Option<(u64, u64, u64)> {
    let rest = reply.strip_prefix("$JS.ACK.")?.as_bytes();
    let mut tokens: [&[u8]; 9] = [b""; 9];
    let mut n = 0;
    for token in rest.split(|b| *b == b'.') {
        if let Some(slot) = tokens.get_mut(n) {
            *slot = token;
        }
        n += 1;
    }
    let at = match n {
        7 => 0,
        n if n >= 9 => 2,
        _ => return None,
    };
    Some((number(tokens[at + 3])?, number(tokens[at + 5])?, number(tokens[at + 6])?))
}

/// A token of decimal digits as a number: read per message, so digit by
/// digit rather than through a string's parse.
fn number(token: &[u8]) -> Option<u64> {
    if token.is_empty() {
        return None;
    }
    token.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_subject_gives_sequence_timestamp_and_pending_in_both_forms() {
        let v1 = "$JS.ACK.corpus.c1.1.4021.1005.1790230470084404000.37";
        assert_eq!(ack_info(v1), Some((4021, 1790230470084404000, 37)));
        let v2 = "$JS.ACK._.HASH.corpus.c1.1.4021.1005.1790230470084404000.37.tok.extra";
        assert_eq!(ack_info(v2), Some((4021, 1790230470084404000, 37)));
        assert_eq!(ack_info("$JS.ACK.corpus.c1.1.x.1005.17.37"), None);
        assert_eq!(ack_info("$JS.ACK.corpus.c1.1.4021"), None);
        assert_eq!(ack_info("_INBOX.abc.1"), None);
        assert_eq!(ack_info(""), None);
        // Signs, empty tokens and numbers past 64 bits are not numbers.
        assert_eq!(ack_info("$JS.ACK.corpus.c1.1.+4021.1005.17.37"), None);
        assert_eq!(ack_info("$JS.ACK.corpus.c1.1..1005.17.37"), None);
        assert_eq!(ack_info("$JS.ACK.corpus.c1.1.4021.1005.18446744073709551616.37"), None);
        assert_eq!(ack_info("$JS.ACK.corpus.c1.1.18446744073709551615.1.0.0"), Some((u64::MAX, 0, 0)));
    }
}
