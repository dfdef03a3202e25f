//! Where a log spout's emission that found nothing left it (JetStream,
//! Kafka): what to watch for more, which batch that emission followed, and
//! whether the last wait saw nothing come.

/// A log spout, caught up; `W`: where each partition's next message will be.
pub struct CaughtUp<W> {
    /// What the wait watches.
    pub watch: W,
    /// The metadata of the batch the emission followed.
    previous: Option<Vec<u8>>,
    /// The last wait saw nothing come: asking the server again would find
    /// nothing either (the next wait sees what comes meanwhile).
    pub quiet: bool,
}

impl<W> CaughtUp<W> {
    /// Caught up at `watch`, after the batch of `previous`.
    pub fn after(watch: W, previous: Option<&[u8]>) -> CaughtUp<W> {
        CaughtUp { watch, previous: previous.map(<[u8]>::to_vec), quiet: false }
    }

    /// Whether an emission after `previous` finds nothing without asking:
    /// the spout is caught up after that very batch and its last wait saw
    /// nothing come. Spends the wait's word: the next emission asks.
    pub fn nothing_new(caught_up: &mut Option<CaughtUp<W>>, previous: Option<&[u8]>) -> bool {
        caught_up.as_mut().is_some_and(|c| c.previous.as_deref() == previous && std::mem::take(&mut c.quiet))
    }
}
