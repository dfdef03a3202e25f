//! Windowed aggregation: [`Window`] and the `window` operation, and the
//! stream of the tuples a window found late.

use super::aggregates::IntoAggregator;
use super::graph::{GroupedStream, Stream, names};
use crate::topology::{AggregatorDef, NodeDef, OperationDef, StateDef, StateKind, WindowDef};
use std::rc::Rc;

/// How a window operation cuts its stream into windows: by a count of
/// tuples per group (Trident's), or by a timestamp field (event time).
#[derive(Clone, Debug)]
pub struct Window(WindowDef);

impl Window {
    /// Trident's tumbling count window: every `size` tuples of a group.
    pub fn tumbling_count(size: u64) -> Window {
        Window(WindowDef::Count { size, slide: size })
    }

    /// Trident's sliding count window: every `slide` tuples of a group, the
    /// last `size`.
    pub fn sliding_count(size: u64, slide: u64) -> Window {
        Window(WindowDef::Count { size, slide })
    }

    /// Trident's tumbling duration window: `size_ms` of processing time, by
    /// when the host emitted each batch.
    pub fn tumbling_duration(size_ms: u64) -> Window {
        Window(WindowDef::Duration { size_ms, slide_ms: size_ms })
    }

    /// Trident's sliding duration window: `size_ms` of processing time,
    /// one starting every `slide_ms`.
    pub fn sliding_duration(size_ms: u64, slide_ms: u64) -> Window {
        Window(WindowDef::Duration { size_ms, slide_ms })
    }

    /// Tumbling event-time windows of `size_ms` by the timestamp (in
    /// milliseconds) in `field`.
    pub fn tumbling(field: &str, size_ms: u64) -> Window {
        Window::sliding(field, size_ms, size_ms)
    }

    /// Sliding event-time windows of `size_ms`, one starting every
    /// `slide_ms`, by the timestamp (in milliseconds) in `field`.
    pub fn sliding(field: &str, size_ms: u64, slide_ms: u64) -> Window {
        let field = field.to_owned();
        Window(WindowDef::EventTime {
            field,
            size_ms,
            slide_ms,
            max_delay_ms: 0,
            lateness_ms: 0,
            idle_timeout_ms: None,
        })
    }

    /// Event-time session windows by the timestamp (in milliseconds) in
    /// `field`: a group's session ends after `gap_ms` without a tuple.
    pub fn session(field: &str, gap_ms: u64) -> Window {
        let field = field.to_owned();
        Window(WindowDef::Session { field, gap_ms, max_delay_ms: 0, lateness_ms: 0, idle_timeout_ms: None })
    }

    /// Event time: timestamps may come up to `ms` out of order (a spout
    /// partition's watermark trails its greatest timestamp by this much).
    pub fn max_delay_ms(mut self, ms: u64) -> Window {
        if let WindowDef::EventTime { max_delay_ms, .. } | WindowDef::Session { max_delay_ms, .. } = &mut self.0 {
            *max_delay_ms = ms;
        }
        self
    }

    /// Event time: a window still takes tuples for `ms` after the
    /// watermark passes its end, and closes then.
    pub fn lateness_ms(mut self, ms: u64) -> Window {
        if let WindowDef::EventTime { lateness_ms, .. } | WindowDef::Session { lateness_ms, .. } = &mut self.0 {
            *lateness_ms = ms;
        }
        self
    }

    /// Event time, with a spout that deals into several partitions: a
    /// partition that has brought tuples stops holding the watermark back
    /// once the greatest timestamp seen has moved on by more than `ms`
    /// without a tuple of it (by default it holds it back until it brings
    /// more).
    pub fn idle_timeout_ms(mut self, ms: u64) -> Window {
        if let WindowDef::EventTime { idle_timeout_ms, .. } | WindowDef::Session { idle_timeout_ms, .. } = &mut self.0 {
            *idle_timeout_ms = Some(ms);
        }
        self
    }
}

impl Stream {
    fn window_node(
        &self,
        window: Window,
        state: &str,
        group: Vec<String>,
        input: Vec<String>,
        aggregator: impl IntoAggregator,
        output: Vec<String>,
    ) -> Stream {
        self.then("window", |t, id| {
            let kind = aggregator.register(t, id);
            let state = StateDef { name: state.to_owned(), kind: StateKind::Opaque, cache_size: None };
            let aggregator = AggregatorDef { id: id.to_owned(), kind, input, output };
            OperationDef::Window { window: window.0, state, group, aggregator }
        })
    }

    /// Trident's `tumblingWindow` and `slidingWindow`, and event-time
    /// windows: aggregates each window of the stream, keeping the open
    /// windows in the state `state`, exactly once. Each window's result is
    /// emitted once, when it closes: `window_start`, `window_end`, then
    /// `output`.
    pub fn window<const I: usize, const O: usize>(
        &self,
        window: Window,
        state: &str,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.window_node(window, state, Vec::new(), names(input), aggregator, names(output))
    }

    /// On a window's stream: the tuples the window found late (every window
    /// they fall into had closed), as they came, with the fields of the
    /// window's input. A late tuple is dropped from the windows either way.
    pub fn late_stream(&self) -> Stream {
        let mut topology = self.topology.borrow_mut();
        let index = topology.def.nodes.len();
        let window = &topology.def.nodes[self.node];
        let inputs = vec![window.inputs.first().copied().unwrap_or(self.node), self.node];
        let parallelism = window.parallelism;
        topology.def.nodes.push(NodeDef {
            id: format!("late-tuples-{index}"),
            inputs,
            parallelism,
            op: OperationDef::LateTuples,
        });
        Stream { topology: Rc::clone(&self.topology), node: index }
    }
}

impl GroupedStream {
    /// [`Stream::window`] per group: each group's windows, output after the
    /// group fields.
    pub fn window<const I: usize, const O: usize>(
        &self,
        window: Window,
        state: &str,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.stream.window_node(window, state, self.group.clone(), names(input), aggregator, names(output))
    }
}
