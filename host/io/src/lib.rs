//! `weir-io`: where batches come from and go to: the spouts (files,
//! directories, generators, guest spouts, NATS JetStream), the sinks'
//! outbox and publishing, and the NATS client they share. It may not
//! depend on the engine that drives them.

pub mod kafka;
pub mod nats;
pub mod sink;
pub mod spout;
