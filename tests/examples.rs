//! The examples under `examples/`, each run as its README runs it: the real
//! `weir` binary, the example's component, a real redb file, and exact
//! answers from `weir query` and `weir state scan`.

mod common;

use common::kill::{Point, Restarts};
use common::*;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file under an example's directory.
fn example_file(example: &str, file: &str) -> PathBuf {
    Path::new(REPO_ROOT).join("examples").join(example).join(file)
}

/// Appends `lines` to the input file, creating it if needed.
fn append(input: &Path, lines: &[&str]) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(input).unwrap();
    for line in lines {
        writeln!(file, "{line}").unwrap();
    }
}

/// Result tuples in a fixed order, for queries whose tuples come in any.
fn sorted(result: Json) -> Json {
    let mut tuples = result.as_array().unwrap_or_else(|| panic!("{result} is not an array")).clone();
    tuples.sort_by_key(|t| t.to_string());
    Json::Array(tuples)
}

/// A map state's entries as `[key fields, value]` pairs, sorted by key.
fn entries(data: &Path, topology: &str, state: &str) -> Vec<Json> {
    let mut entries: Vec<Json> =
        scan(data, topology, state).into_iter().map(|e| json!([e["key"], e["value"]])).collect();
    entries.sort_by_key(|e| e[0].to_string());
    entries
}

#[test]
fn word_count_answers_the_words_query_as_lines_are_fed() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = (dir.path().join("sentences.txt"), dir.path().join("data"));
    let feed = |lines: &[&str]| {
        append(&input, lines);
        weir_ok(&run_args(WORD_COUNT, &data, &input, &[]));
    };
    let words = |args: &str| query(&data, "word-count", "words", args);

    feed(&["hello the man said", "the"]);
    assert_eq!(words("the"), json!([[2]]));
    assert_eq!(words("hello"), json!([[1]]));

    feed(&["the man on the moon", "where are you"]);
    assert_eq!(words("the"), json!([[4]]));
    assert_eq!(words("man"), json!([[2]]));
    assert_eq!(words("man where you the"), json!([[8]]));

    feed(&["the the"]);
    assert_eq!(words("the"), json!([[6]]));

    feed(&["the"]);
    assert_eq!(words("the"), json!([[7]]));
    assert_eq!(words(""), json!([[0]]));
}

/// `examples/reach/data/reach.json`: the lookup data and the expected answers.
fn reach_json() -> Json {
    serde_json::from_str(&std::fs::read_to_string(example_file("reach", "data/reach.json")).unwrap()).unwrap()
}

#[test]
fn reach_input_holds_exactly_the_lookup_data_of_reach_json() {
    let json = reach_json();
    let text = std::fs::read_to_string(example_file("reach", "data/reach.txt")).unwrap();
    let mut tweeters = serde_json::Map::new();
    let mut followers = serde_json::Map::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [kind, key, list] = parts[..] else { panic!("{line:?}") };
        let names: Vec<Json> = list.split(',').map(|n| json!(n)).collect();
        let map = if kind == "tweeters" { &mut tweeters } else { &mut followers };
        map.insert(key.to_owned(), Json::Array(names));
    }
    assert_eq!(Json::Object(tweeters), json["tweeters"]);
    assert_eq!(Json::Object(followers), json["followers"]);
}

#[test]
fn reach_counts_the_distinct_followers_of_a_urls_tweeters() {
    let data = tempfile::tempdir().unwrap();
    let input = example_file("reach", "data/reach.txt");
    weir_ok(&run_args(REACH, data.path(), &input, &["--batch-size", "3"]));
    let expected = reach_json()["expected_reach"].as_object().unwrap().clone();
    assert_eq!(expected.len(), 4);
    for (url, reach) in expected {
        assert_eq!(query(data.path(), "reach", "reach", &url), json!([[reach]]), "reach of {url}");
    }
    assert_eq!(
        entries(data.path(), "reach", "tweeters"),
        [
            json!([["engineering.twitter.com/blog/5"], "adam,david,sally,nathan"]),
            json!([["foo.com/blog/1"], "sally,bob,tim,george,nathan"]),
            json!([["tech.backtype.com/blog/123"], "tim,mike,john"]),
        ]
    );
}

#[test]
fn reach_takes_in_names_appended_to_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = (dir.path().join("reach.txt"), dir.path().join("data"));
    std::fs::copy(example_file("reach", "data/reach.txt"), &input).unwrap();
    weir_ok(&run_args(REACH, &data, &input, &[]));
    // george gains followers, one of whom (alex) foo.com already reached;
    // tim gains one; a new URL is tweeted by bob alone.
    append(&input, &["followers george alex,zoe", "followers tim alex,quinn", "tweeters new.example/1 bob"]);
    weir_ok(&run_args(REACH, &data, &input, &["--batch-size", "1"]));
    let reach = |url: &str| query(&data, "reach", "reach", url);
    assert_eq!(reach("foo.com/blog/1"), json!([[18]]));
    assert_eq!(reach("engineering.twitter.com/blog/5"), json!([[14]]));
    assert_eq!(reach("tech.backtype.com/blog/123"), json!([[8]]));
    assert_eq!(reach("new.example/1"), json!([[6]]));
    let tim = entries(&data, "reach", "followers").into_iter().find(|e| e[0] == json!(["tim"])).unwrap();
    assert_eq!(tim[1], json!("alex,quinn"));
}

#[test]
fn location_keeps_the_latest_location_and_answers_in_bulk() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = (dir.path().join("locations.txt"), dir.path().join("data"));
    std::fs::copy(example_file("location", "data/locations.txt"), &input).unwrap();
    // One batch: alice moves from Paris to Tokyo within it.
    weir_ok(&run_args(LOCATION, &data, &input, &["--batch-size", "100"]));
    let location = |args: &str| sorted(query(&data, "location", "location", args));
    assert_eq!(location("alice bob zed"), json!([["alice", "Tokyo"], ["bob", "Lagos"]]));
    assert_eq!(location("zed"), json!([]));
    assert_eq!(
        entries(&data, "location", "locations"),
        [
            json!([["alice"], "Tokyo"]),
            json!([["bob"], "Lagos"]),
            json!([["carol"], "Lima"]),
            json!([["dave"], "Oslo"]),
            json!([["erin"], "Lagos"]),
        ]
    );
    assert_eq!(
        entries(&data, "location", "arrivals"),
        [
            json!([["Lagos"], 2]),
            json!([["Lima"], 1]),
            json!([["Oslo"], 1]),
            json!([["Paris"], 1]),
            json!([["Tokyo"], 1]),
        ]
    );

    append(&input, &["bob Cairo"]);
    weir_ok(&run_args(LOCATION, &data, &input, &[]));
    assert_eq!(location("alice bob carol"), json!([["alice", "Tokyo"], ["bob", "Cairo"], ["carol", "Lima"]]));
    let arrivals = entries(&data, "location", "arrivals");
    assert_eq!(arrivals[0], json!([["Cairo"], 1]));
    assert_eq!(arrivals.len(), 6);
}

#[test]
fn location_over_batches_of_two_lines_gives_the_same_state() {
    let data = tempfile::tempdir().unwrap();
    weir_ok(&run_args(LOCATION, data.path(), &example_file("location", "data/locations.txt"), &["--batch-size", "2"]));
    assert_eq!(
        sorted(query(data.path(), "location", "location", "erin alice")),
        json!([["alice", "Tokyo"], ["erin", "Lagos"]])
    );
    assert_eq!(entries(data.path(), "location", "arrivals").len(), 5);
}

/// The single value of the `global-count` state.
fn global_count(data: &Path) -> i64 {
    let entries = scan(data, "global-count", "count");
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0]["value"].as_i64().unwrap()
}

#[test]
fn global_count_counts_every_line_once_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = (dir.path().join("lines.txt"), dir.path().join("data"));
    let lines: Vec<String> = (1..=1000).map(|n| n.to_string()).collect();
    append(&input, &lines.iter().map(String::as_str).collect::<Vec<_>>()[..]);
    weir_ok(&run_args(GLOBAL_COUNT, &data, &input, &["--batch-size", "100"]));
    assert_eq!(global_count(&data), 1000);
    // Nothing new: the count stays.
    weir_ok(&run_args(GLOBAL_COUNT, &data, &input, &["--batch-size", "100"]));
    assert_eq!(global_count(&data), 1000);
    append(&input, &["1001", "1002", "1003"]);
    weir_ok(&run_args(GLOBAL_COUNT, &data, &input, &["--batch-size", "2"]));
    assert_eq!(global_count(&data), 1003);
}

#[test]
fn global_count_answers_its_query() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = (dir.path().join("lines.txt"), dir.path().join("data"));
    append(&input, &["a", "b", "c"]);
    weir_ok(&run_args(GLOBAL_COUNT, &data, &input, &[]));
    assert_eq!(query(&data, "global-count", "count", ""), json!([[3]]));
}

#[test]
fn global_count_is_exact_after_being_killed_mid_run() {
    let corpus = corpus_20k();
    let data = tempfile::tempdir().unwrap();
    let args = run_args(GLOBAL_COUNT, data.path(), &corpus.path, &["--batch-size", "10"]);
    let mut restarts = Restarts::new([&args[..], &["--max-pending", "4"]].concat(), data.path(), "global-count");
    for txid in [23, 611] {
        restarts.kill_at(Point::AfterCommit, txid);
        assert_eq!(global_count(data.path()), txid as i64 * 10);
    }
    weir_ok(&args);
    assert_eq!(global_count(data.path()), 20_000);
}

#[test]
fn map_filter_counts_normalised_words_without_stop_words() {
    let data = tempfile::tempdir().unwrap();
    let output = weir_ok(&run_args(MAP_FILTER, data.path(), &example_file("map-filter", "data/sentences.txt"), &[]));
    assert_eq!(
        entries(data.path(), "map-filter", "counts"),
        [
            json!([["barks"], 1]),
            json!([["brown"], 1]),
            json!([["dog"], 2]),
            json!([["fox"], 3]),
            json!([["jumps"], 1]),
            json!([["lazy"], 1]),
            json!([["quick"], 2]),
            json!([["runs"], 1]),
            json!([["wins"], 1]),
        ]
    );
    let log = text(&output);
    assert_eq!(log.matches("kept fox").count(), 3, "{log}");
    assert!(!log.contains("kept the") && !log.contains("kept over"), "{log}");
    assert_eq!(query(data.path(), "map-filter", "count", "Fox quick THE"), json!([[5]]));
    assert_eq!(query(data.path(), "map-filter", "count", "the"), json!([[0]]));
}

/// `examples/clickstream` as its README runs it: generated clicks published
/// into 4 partitions, counted per page and per user, per-page counts
/// published by a sink; killed after a commit and after a publish.
#[test]
fn clickstream_counts_pages_and_users_exactly_and_publishes_each_batchs_page_counts_once() {
    let nats = common::nats::NatsServer::start();
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let (clicks, data) = (dir.path().join("clicks.jsonl"), dir.path().join("data"));
    let script = example_file("clickstream", "gen_clicks.py");
    let generated = std::process::Command::new("python3").arg(&script).args(["-n", "6000", "--seed", "7"]).output();
    let generated = generated.unwrap();
    assert!(generated.status.success(), "{}", String::from_utf8_lossy(&generated.stderr));
    std::fs::write(&clicks, &generated.stdout).unwrap();
    let clicks = clicks.to_str().unwrap();
    let publish = ["publish", "--nats", &url, "--stream", "clicks", "--subjects", "clicks.{0..3}"];
    weir_ok(&[&publish[..], &["--key", "json:user", "--create", clicks]].concat());
    let output = ["publish", "--nats", &url, "--stream", "page-counts", "--subjects", "page-counts", "--create"];
    weir_ok(&[&output[..], &["/dev/null"]].concat());

    let args = vec!["run", CLICKSTREAM, "--data", data.to_str().unwrap(), "--nats", &url, "--batch-size", "100"];
    let mut restarts = Restarts::new(args, &data, "clickstream");
    restarts.kill_at(Point::AfterCommit, 3);
    restarts.kill_at(Point::AfterPublish, 6);
    restarts.finish();

    let (mut pages, mut users) = (BTreeMap::new(), BTreeMap::new());
    for line in std::fs::read_to_string(clicks).unwrap().lines() {
        let click: Json = serde_json::from_str(line).unwrap();
        *pages.entry(click["page"].as_str().unwrap().to_owned()).or_insert(0i64) += 1;
        *users.entry(click["user"].as_str().unwrap().to_owned()).or_insert(0i64) += 1;
    }
    let state = |name: &str| -> BTreeMap<String, i64> {
        scan(&data, "clickstream", name)
            .into_iter()
            .map(|e| (e["key"][0].as_str().unwrap().to_owned(), e["value"].as_i64().unwrap()))
            .collect()
    };
    assert_counts_eq(&state("per-page"), &pages);
    assert_counts_eq(&state("per-user"), &users);
    assert_eq!(query(&data, "clickstream", "page", "/cart"), json!([[pages["/cart"]]]));

    // The output: each committed txid's counts once, each page's last one exact.
    let last = last_committed(&data, "clickstream");
    let mut ids = std::collections::BTreeSet::new();
    let mut latest: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for (id, payload) in nats.messages("page-counts") {
        let parts: Vec<&str> = id.split('/').collect();
        assert_eq!(parts[..2], ["clickstream", "page-counts"], "{id}");
        let (txid, n): (u64, u32) = (parts[2].parse().unwrap(), parts[3].parse().unwrap());
        assert!(ids.insert((txid, n)), "{id} is published twice");
        let message: Json = serde_json::from_slice(&payload).unwrap();
        let (page, count) = (message["page"].as_str().unwrap().to_owned(), message["count"].as_i64().unwrap());
        let entry = latest.entry(page).or_insert((0, 0));
        assert!(txid > entry.0 && count > entry.1, "{id}: {message} does not follow {entry:?}");
        *entry = (txid, count);
    }
    let txids: std::collections::BTreeSet<u64> = ids.iter().map(|(txid, _)| *txid).collect();
    assert_eq!(txids, (1..=last).collect());
    assert_counts_eq(&latest.into_iter().map(|(page, (_, count))| (page, count)).collect(), &pages);
}

/// Every state the sensor-windows example keeps its results and emission
/// counts in.
const SENSOR_STATES: [&str; 6] = [
    "minute-averages",
    "minute-averages-emitted",
    "five-minute-maxima",
    "five-minute-maxima-emitted",
    "sessions",
    "sessions-emitted",
];

/// The sensor-windows example's results in `data`, state by state.
fn sensor_results(data: &Path) -> BTreeMap<&'static str, Vec<Json>> {
    SENSOR_STATES.iter().map(|&state| (state, scan(data, "sensor-windows", state))).collect()
}

#[test]
fn sensor_windows_give_the_same_windows_once_each_however_often_killed() {
    let dir = tempfile::tempdir().unwrap();
    let run_to_end = |data: &Path| {
        weir_ok(&["run", SENSOR_WINDOWS, "--data", data.to_str().unwrap(), "--batch-size", "100"]);
    };
    let straight = dir.path().join("straight");
    run_to_end(&straight);
    let want = sensor_results(&straight);
    for state in SENSOR_STATES {
        assert!(want[state].len() > 20, "{state} holds only {} windows", want[state].len());
        if state.ends_with("-emitted") {
            let twice: Vec<&Json> = want[state].iter().filter(|e| e["value"] != 1).collect();
            assert!(twice.is_empty(), "{state}: windows emitted more than once: {twice:?}");
        }
    }
    // Late readings were counted, and queries answer from the windows.
    let open = scan(&straight, "sensor-windows", "open-minutes");
    let late = open.iter().find(|e| e["key"] == json!([false])).map(|e| e["value"].as_i64().unwrap());
    assert!(late.is_some_and(|n| n > 0), "no late readings counted: {open:?}");
    let average = &want["minute-averages"][0];
    let args = format!("{} {}", average["key"][0].as_str().unwrap(), average["key"][1]);
    assert_eq!(query(&straight, "sensor-windows", "average", &args), json!([[average["value"]]]));

    let killed = dir.path().join("killed");
    let data = killed.to_str().unwrap();
    let args = vec!["run", SENSOR_WINDOWS, "--data", data, "--batch-size", "100", "--max-pending", "8"];
    let mut restarts = Restarts::new(args, &killed, "sensor-windows");
    restarts.kill_seeded(19, 12, 15);
    run_to_end(&killed);
    let got = sensor_results(&killed);
    for state in SENSOR_STATES {
        assert_eq!(got[state], want[state], "{state} after {} kills", restarts.kills.len());
    }
}

#[test]
fn the_windowed_word_count_stores_each_closed_minute_once_and_keeps_the_open_one() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("timed.txt");
    // The watermark trails the greatest timestamp by a second: a minute
    // closes once a line a second past its end has come; the last line is
    // late for the first minute, closed by then.
    append(&input, &["0 a b", "59000 a", "60500 b", "61000 a c", "125000 c", "1000 a"]);
    let data = dir.path().join("data");
    weir_ok(&run_args(WORD_COUNT_WINDOWED, &data, &input, &["--batch-size", "2"]));
    let topology = "word-count-windowed";
    assert_eq!(
        entries(&data, topology, "minute-counts"),
        [
            json!([[0, "a"], 2]),
            json!([[0, "b"], 1]),
            json!([[60000, "a"], 1]),
            json!([[60000, "b"], 1]),
            json!([[60000, "c"], 1]),
        ]
    );
    // The third minute is still open; the late line was counted, not kept.
    let open = entries(&data, topology, "open-minutes");
    assert_eq!(open, [json!([[180000, 120000, "c"], 1]), json!([[false], 1]), json!([[null], 125000])]);
}
