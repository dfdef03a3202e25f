//! A real Kafka broker for the tests: tansu 0.6.0 with its sqlite storage,
//! on a free loopback port in a fresh directory, started by the tests
//! themselves (one shared by a test binary's tests, each with topics of its
//! own, and brokers of their own for the tests that kill one). A guard's
//! drop kills it; so does the end of the test process, however it ends.
//!
//! The binary: `WEIR_TANSU`, else `scripts/ensure-services`' tools dir
//! (`$WEIR_TOOLS_DIR`, by default `~/.local/share/weir-tools`), else the
//! PATH.

use super::*;
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::{Record, RecordAndOffset};
use std::collections::BTreeMap;

/// A running tansu broker.
pub struct KafkaBroker {
    /// Killed when dropped, before its directory goes.
    service: Service,
    dir: tempfile::TempDir,
    /// The loopback port it listens on.
    pub port: u16,
    runtime: tokio::runtime::Runtime,
    /// Arguments it is started with besides its listener and storage.
    extra: Vec<String>,
}

/// Where the tansu binary is.
pub fn tansu_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WEIR_TANSU") {
        return PathBuf::from(path);
    }
    let installed = super::tools_dir().join("bin/tansu");
    if installed.is_file() {
        return installed;
    }
    service_binary("WEIR_TANSU", "tansu", None, "tansu (scripts/ensure-services installs it with cargo install)")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl KafkaBroker {
    /// Starts a broker of its own.
    pub fn start() -> KafkaBroker {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let mut broker = KafkaBroker {
            service: Service::default(),
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            runtime,
            extra: Vec::new(),
        };
        broker.launch();
        broker
    }

    /// `127.0.0.1:PORT`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the broker process on its port over its store, and waits
    /// until it takes connections.
    fn launch(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let mut command = Command::new(tansu_binary());
        command
            .current_dir(self.dir.path())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .args(&self.extra)
            .env_remove("STORAGE_ENGINE")
            .env_remove("LISTENER_URL")
            .env_remove("ADVERTISED_LISTENER_URL");
        let port = self.port;
        let ready = move || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        self.service.launch_polling("tansu", &mut command, &self.dir.path().join("tansu.log"), &ready);
    }

    /// Kills the broker with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        self.service.kill();
    }

    /// Starts the killed broker again, on its port, over its store.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Starts the broker again with `extra` arguments (`--authentication`:
    /// every client must log in), on its port, over its store.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|a| a.to_string()).collect();
        self.restart();
    }

    /// Makes a user who logs in with SCRAM-SHA-256, through tansu's own
    /// `tansu user create` (an AlterUserScramCredentials request).
    pub fn create_scram_user(&self, name: &str, password: &str) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let output = Command::new(tansu_binary())
            .args(["user", "create", "--broker", &url, "--mechanism", "scram256", "--iterations", "4096"])
            .args([name, password])
            .output()
            .expect("run tansu user create");
        assert!(output.status.success(), "tansu user create: {}", String::from_utf8_lossy(&output.stderr));
    }

    fn client(&self) -> Client {
        // Short waits, bounded: a topic just made may be unknown for a moment
        // (the client's own default waits grow to minutes).
        let backoff = rskafka::BackoffConfig {
            init_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(200),
            base: 2.0,
            deadline: Some(Duration::from_secs(30)),
        };
        let builder = ClientBuilder::new(vec![self.bootstrap()]).backoff_config(backoff);
        self.runtime.block_on(builder.build()).expect("connect to tansu")
    }

    /// Creates `topic` with `partitions` partitions, and waits until the
    /// broker lists them.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let client = self.client();
        let controller = client.controller_client().unwrap();
        self.runtime.block_on(controller.create_topic(topic, partitions, 1, 5_000)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.partitions(topic) != partitions {
            assert!(Instant::now() < deadline, "topic {topic} was made but is not listed");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Appends `values` to `partition` of `topic`, each with `key` and a
    /// header `source: test`; their offsets.
    pub fn produce(&self, topic: &str, partition: i32, values: &[Vec<u8>], key: Option<&[u8]>) -> Vec<i64> {
        self.produce_with(topic, partition, values, key, true)
    }

    fn produce_with(
        &self,
        topic: &str,
        partition: i32,
        values: &[Vec<u8>],
        key: Option<&[u8]>,
        header: bool,
    ) -> Vec<i64> {
        let client = self.client();
        self.runtime.block_on(async {
            let partition =
                client.partition_client(topic.to_owned(), partition, UnknownTopicHandling::Retry).await.unwrap();
            let mut offsets = Vec::new();
            for chunk in values.chunks(500) {
                let records = chunk
                    .iter()
                    .map(|value| Record {
                        key: key.map(<[u8]>::to_vec),
                        value: Some(value.clone()),
                        headers: if header {
                            [("source".to_owned(), b"test".to_vec())].into_iter().collect()
                        } else {
                            Default::default()
                        },
                        timestamp: rskafka::chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap(),
                    })
                    .collect();
                offsets.extend(partition.produce(records, Compression::NoCompression).await.unwrap());
            }
            offsets
        })
    }

    /// Spreads `lines` over `partitions` partitions of `topic`, round robin
    /// (line i to partition i % partitions).
    pub fn produce_lines<S: AsRef<str>>(&self, topic: &str, partitions: i32, lines: &[S]) {
        let mut per: Vec<Vec<Vec<u8>>> = vec![Vec::new(); partitions as usize];
        for (i, line) in lines.iter().enumerate() {
            per[i % partitions as usize].push(line.as_ref().as_bytes().to_vec());
        }
        for (partition, values) in per.iter().enumerate() {
            self.produce_with(topic, partition as i32, values, None, false);
        }
    }

    /// Every record of `partition` of `topic`.
    pub fn records(&self, topic: &str, partition: i32) -> Vec<RecordAndOffset> {
        let client = self.client();
        self.runtime.block_on(async {
            let partition =
                client.partition_client(topic.to_owned(), partition, UnknownTopicHandling::Retry).await.unwrap();
            let latest = partition.get_offset(OffsetAt::Latest).await.unwrap();
            let mut offset = partition.get_offset(OffsetAt::Earliest).await.unwrap();
            let mut out: Vec<RecordAndOffset> = Vec::new();
            while offset < latest {
                let (records, _) = partition.fetch_records(offset, 1..(8 << 20), 1000).await.unwrap();
                let Some(last) = records.last().map(|r| r.offset) else { break };
                out.extend(records.into_iter().filter(|r| r.offset >= offset));
                offset = last + 1;
            }
            out
        })
    }

    /// How many partitions `topic` has.
    pub fn partitions(&self, topic: &str) -> i32 {
        let client = self.client();
        let topics = self.runtime.block_on(client.list_topics()).unwrap();
        topics.into_iter().find(|t| t.name == topic).map_or(0, |t| t.partitions.len() as i32)
    }

    /// Adds a partition to `topic`, while the broker runs; its number.
    /// tansu 0.6 answers no CreatePartitions request, so its sqlite store
    /// is changed as its own CreateTopics writes a partition (the topic's
    /// count, the partition's row and its watermark's): the broker lists
    /// the new partition in its next metadata answer, and takes records
    /// into it.
    pub fn add_partition(&self, topic: &str) -> i32 {
        const ADD: &str = "import sqlite3, sys\n\
            db = sqlite3.connect(sys.argv[1], timeout=30)\n\
            with db:\n\
            \x20   (topic, n) = db.execute('select id, partitions from topic where name = ?', (sys.argv[2],)).fetchone()\n\
            \x20   db.execute('update topic set partitions = ? where id = ?', (n + 1, topic))\n\
            \x20   row = db.execute('insert into topition (topic, partition) values (?, ?)', (topic, n)).lastrowid\n\
            \x20   db.execute('insert into watermark (topition) values (?)', (row,))\n\
            print(n)\n";
        let db = self.dir.path().join("tansu.db");
        let output = Command::new("python3").args(["-c", ADD]).arg(&db).arg(topic).output().expect("run python3");
        assert!(output.status.success(), "adding a partition: {}", String::from_utf8_lossy(&output.stderr));
        let added: i32 = String::from_utf8(output.stdout).unwrap().trim().parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.partitions(topic) != added + 1 {
            assert!(Instant::now() < deadline, "partition {added} of {topic} was added but is not listed");
            std::thread::sleep(Duration::from_millis(50));
        }
        added
    }

    /// Deletes `topic` (tansu 0.6's sqlite storage has no DeleteRecords:
    /// asking for it panics the broker).
    pub fn delete_topic(&self, topic: &str) {
        let client = self.client();
        let controller = client.controller_client().unwrap();
        self.runtime.block_on(controller.delete_topic(topic, 5_000)).unwrap();
    }

    /// Every record of every partition of `topic`, by partition.
    pub fn all_records(&self, topic: &str) -> BTreeMap<i32, Vec<RecordAndOffset>> {
        (0..self.partitions(topic)).map(|p| (p, self.records(topic, p))).collect()
    }
}

static KAFKA: SharedLog<KafkaBroker> = SharedLog::new(KafkaBroker::start);

/// The broker this test binary's tests share, each with topics of its own.
pub fn shared_kafka() -> &'static KafkaBroker {
    KAFKA.log()
}

/// The canonical corpus of 50,000 sentences, produced once per test binary
/// into the shared broker's 4-partition topic `corpus`, round robin.
pub fn corpus_topic() -> &'static Corpus {
    KAFKA.corpus(|broker, corpus| {
        let lines: Vec<String> = std::fs::read_to_string(&corpus.path).unwrap().lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), 50_000);
        broker.create_topic("corpus", 4);
        broker.produce_lines("corpus", 4, &lines);
    })
}
