//! The dashboard of `weir serve` in a real headless Chromium, against a
//! real server running a real word count: each page is driven as a user
//! would (typing, clicking, choosing files), read back from what the page
//! shows, checked against the ground truth and the CLI, and photographed
//! at 1280x800 into target/screenshots/; then every page again at 1,400
//! and 400 px wide, checked to fit its viewport and by axe-core (vendored
//! in dashboard/vendor/, pinned by dashboard/package-lock.json) for WCAG 2
//! A/AA violations. One server and one browser for the whole binary, the
//! steps in order, each wait bounded; the server is killed last, to see
//! the page say so.
//!
//! With WEIR_UPDATE_DOCS=1 the topology page's screenshot also replaces
//! docs/dashboard.png, the README's.

mod common;

use common::browser::{Browser, Element, VIEWPORT, png_size};
use common::server::{Server, TOKEN, bundle, escape};
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the markup guest (`markup-word-count`) writes in its logs and errors.
const MARKUP: &str = r#"<img src=x onerror="document.title='injected'"><script>document.title='injected'</script>"#;

/// A deployment name a page must show as text.
const MARKUP_NAME: &str = r#"<img src=x onerror="document.title='injected'"> markup"#;

/// Words of the markup topology's input that are markup themselves.
const MARKUP_WORDS: [&str; 2] = ["<svg/onload=document.title='injected'>", "<b>bold</b>"];

/// The pages photographed, by file name.
const PAGES: [&str; 5] = ["token", "topologies", "topology", "state", "query"];

/// The server, the browser, and the word count's input so far.
struct Dashboard {
    dir: tempfile::TempDir,
    server: Server,
    browser: Browser,
    sentences: Vec<String>,
    /// Sentences of the corpus the word count's input holds.
    fed: usize,
    word_count: PathBuf,
}

/// Runs the checks of `$dashboard` named, in order, each saying in the log
/// which it is: each leaves the server and browser as the next expects.
macro_rules! steps {
    ($dashboard:ident: $($check:ident),* $(,)?) => {
        $(
            eprintln!("dashboard: {}", stringify!($check).replace('_', " "));
            $dashboard.$check();
        )*
    };
}

impl Dashboard {
    fn start() -> Dashboard {
        let dir = tempfile::tempdir().unwrap();
        let sentences: Vec<String> =
            std::fs::read_to_string(&corpus_20k().path).unwrap().lines().map(str::to_owned).collect();
        let server = Server::start(dir.path());
        let word_count = dir.path().join("wc.weir");
        bundle(dir.path(), WORD_COUNT, "wc.weir");
        let mut dashboard = Dashboard {
            browser: Browser::start(&Path::new(REPO_ROOT).join("target/screenshots")),
            dir,
            server,
            sentences,
            fed: 0,
            word_count,
        };
        dashboard.feed(10_000);
        let (status, body) = dashboard.server.api(
            "POST",
            "/v1/topologies?input=in/corpus.txt",
            &std::fs::read(&dashboard.word_count).unwrap(),
        );
        assert_eq!(status, 201, "{body}");
        dashboard.server.wait_for_topology("word-count", 10);
        dashboard
    }

    /// Deploys the `bundle`'s `topology` as `name` over `in/{input}`; the
    /// server must accept it.
    fn deploy(&self, bundle: &[u8], name: &str, topology: &str, input: &str) {
        let path = format!("/v1/topologies?name={name}&topology={topology}&input=in/{input}");
        let (status, body) = self.server.api("POST", &path, bundle);
        assert_eq!(status, 201, "{body}");
    }

    /// Lets the word count's input hold the corpus's first `sentences`.
    fn feed(&mut self, sentences: usize) {
        self.fed = sentences;
        std::fs::write(self.dir.path().join("in/corpus.txt"), self.sentences[..sentences].join("\n") + "\n").unwrap();
    }

    /// The exact counts of the input so far.
    fn truth(&self) -> BTreeMap<String, i64> {
        let lines: Vec<&str> = self.sentences[..self.fed].iter().map(String::as_str).collect();
        count_words(&lines)
    }

    fn url(&self, fragment: &str) -> String {
        format!("{}/{fragment}", self.server.url())
    }

    /// Fails the test when the page shows anything a guest's markup or a
    /// name's made: an element, a script that ran, a refused inline script.
    fn assert_no_markup_took_effect(&self, page: &str) {
        let found = self.browser.run(
            "return { title: document.title,
                      elements: document.querySelectorAll('body img, body script, body b, body svg:not(.graph), body iframe').length,
                      handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length }",
            &[],
        );
        assert_eq!(found["title"], "Weir", "{page}: a script ran");
        assert_eq!(found["elements"], 0, "{page}: markup became elements");
        assert_eq!(found["handlers"], 0, "{page}: markup became an event handler");
        // Refusals the API gave (a 401, a 400) are logged as failed loads;
        // anything else (a script's error, a refused inline script, an
        // injected image's load) is not expected.
        let console = self.browser.console();
        let unexpected: Vec<&Value> = console
            .iter()
            .filter(|entry| {
                let message = entry["message"].as_str().unwrap_or_default();
                let api_refusal = entry["source"] == "network" && message.contains("/v1/");
                (entry["level"] == "SEVERE" && !api_refusal) || message.contains("Content Security Policy")
            })
            .collect();
        assert!(unexpected.is_empty(), "{page}: the console says {unexpected:?}");
    }

    /// The text of the word count's card on the topologies page, by the
    /// class of the element holding it.
    fn card_text(&self, name: &str, class: &str) -> Value {
        self.browser.run(
            "const card = [...document.querySelectorAll('article.topology')].find(a => a.dataset.name === arguments[0]);
             return card?.querySelector(arguments[1])?.textContent ?? null",
            &[json!(name), json!(class)],
        )
    }

    /// The failed card's error: its headline first, at most 8 lines
    /// shown, the rest (a guest's backtrace) in a closed fold. The poison
    /// word count traps at txid 2, so its error ends in a wasm backtrace.
    fn the_failed_card_shows_at_most_8_lines_before_its_fold(&self) {
        let variants = std::fs::read(self.dir.path().join("variants.weir")).unwrap();
        self.deploy(&variants, "poison", "poison-word-count", "markup.txt");
        let halted = self.server.wait_for_status("poison", |s| s["state"] == "failed");
        let error = halted["error"].as_str().unwrap();
        assert!(error.lines().count() > 8, "the trap's error has its backtrace: {error}");
        let card = self.browser.wait_for(
            "the poison card's error",
            "const card = [...document.querySelectorAll('article.topology')].find(a => a.dataset.name === 'poison');
             const block = card?.querySelector('.error-block');
             if (!block) return null;
             const shown = [block.querySelector('.headline-text').textContent,
                            ...(block.querySelector('pre.more')?.textContent.split('\\n') ?? [])];
             const fold = block.querySelector('details.fold');
             return { shown, open: fold?.open ?? null, folded: fold?.querySelector('pre').textContent ?? null,
                      visible: block.querySelector('pre.more')?.getClientRects().length ?? 0,
                      first: card.parentElement.firstElementChild.dataset.name }",
            &[],
        );
        let shown: Vec<&str> = card["shown"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
        assert!(shown.len() <= 8, "{} lines before the fold: {card}", shown.len());
        assert_eq!(shown[0], error.lines().next().unwrap(), "the headline first");
        assert_eq!(card["open"], false, "the fold is closed: {card}");
        // Nothing is lost: shown and folded, the whole error.
        let whole = format!("{}\n{}", shown.join("\n"), card["folded"].as_str().unwrap());
        assert_eq!(whole, error.trim_end(), "{card}");
        // Failed topologies come first.
        assert!(["poison", MARKUP_NAME].contains(&card["first"].as_str().unwrap()), "{card}");
    }

    /// The list page asks once a second for the list with every card's
    /// history, whatever the number of topologies.
    fn the_list_page_makes_one_request_a_tick(&self) {
        self.browser.goto(&self.url(""));
        self.browser.wait_for("the cards", "return document.querySelectorAll('article.topology').length >= 3", &[]);
        self.browser.run("performance.clearResourceTimings(); performance.setResourceTimingBufferSize(10000)", &[]);
        std::thread::sleep(Duration::from_millis(4500));
        let calls = self.browser.run(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname + new URL(e.name).search)
               .filter(p => p.startsWith('/v1/'))",
            &[],
        );
        let calls = calls.as_array().unwrap();
        assert!((3..=6).contains(&calls.len()), "a call a second for 4.5 s: {calls:?}");
        assert!(calls.iter().all(|c| c == "/v1/topologies?history=true"), "{calls:?}");
        let (_, listed) = self.server.api("GET", "/v1/topologies?history=true", b"");
        for status in listed.as_array().unwrap() {
            assert!(status["history"]["at"].is_array(), "{status}");
        }
    }

    /// Every page, at 1,400 and 400 px wide: no wider than its viewport,
    /// no serious or critical WCAG 2 A/AA violation axe-core finds, and
    /// photographed as `<page>-<width>.png`.
    fn every_page_fits_its_viewport_and_axe_finds_no_serious_violation(&self) {
        let axe = std::fs::read_to_string(Path::new(REPO_ROOT).join("dashboard/vendor/axe.min.js")).unwrap();
        let pages = [
            ("list", String::new(), "article.topology .chart[data-points]"),
            ("topology", "#/t/word-count".to_owned(), "svg.graph g.node .time"),
            ("state", "#/t/word-count/state/counts".to_owned(), "table.entries td.key"),
            ("query", "#/t/word-count/query/words".to_owned(), "form.console"),
            ("cluster", "#/cluster".to_owned(), ".no-cluster, table.hosts"),
            ("failure", "#/t/poison".to_owned(), "svg.graph g.node.failing"),
        ];
        let mut found = Vec::new();
        for width in [1400, 400] {
            self.browser.set_viewport((width, 900));
            for (page, fragment, ready) in &pages {
                // A fresh load: each page as a visitor opens it.
                self.browser.goto("about:blank");
                self.browser.goto(&self.url(fragment));
                self.browser.find(ready);
                let fits = self.browser.wait_for(
                    &format!("the {page} page within {width} px"),
                    "const root = document.documentElement;
                     if (root.scrollWidth <= window.innerWidth) return { width: root.scrollWidth };
                     const wide = [...document.querySelectorAll('body *')]
                       .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
                       .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));
                     window.tooWide = { width: root.scrollWidth, wide };
                     return null",
                    &[],
                );
                assert!(fits["width"].as_u64().unwrap() <= u64::from(width), "{page} at {width}: {fits}");
                if self.browser.run("return typeof axe", &[]) != "object" {
                    self.browser.run(&format!("{axe}\nreturn true"), &[]);
                }
                let violations = self.browser.run(
                    "return axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
                                                resultTypes: ['violations'] })
                       .then(r => r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
                         .map(v => ({ id: v.id, impact: v.impact, help: v.help,
                                      nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + ': ' + n.failureSummary) })))",
                    &[],
                );
                if !violations.as_array().unwrap().is_empty() {
                    found.push(format!("{page} at {width} px: {violations:#}"));
                }
                let png = self.browser.screenshot(&format!("{page}-{width}"));
                assert_eq!(png_size(&std::fs::read(png).unwrap()), (width, 900), "{page}-{width}.png");
            }
        }
        self.browser.set_viewport(VIEWPORT);
        assert!(found.is_empty(), "axe-core found:\n{}", found.join("\n"));
        let (status, body) = self.server.api("DELETE", "/v1/topologies/poison?state=drop", b"");
        assert_eq!(status, 204, "{body}");
    }

    /// With the server gone, the page says so within 10 s, shows no run
    /// state as if known, and offers no action.
    fn a_killed_server_is_said_within_10_s_and_nothing_says_running(&mut self) {
        self.browser.goto(&self.url("#/t/word-count"));
        self.browser.wait_for(
            "running",
            "return document.querySelector('.headline [data-state]')?.textContent === 'running'",
            &[],
        );
        self.server.child.kill().unwrap();
        self.server.child.wait().unwrap();
        let killed = Instant::now();
        let said = self.browser.wait_for(
            "that the server cannot be reached",
            "const problem = document.getElementById('problem');
             return !problem.hidden && problem.textContent.startsWith('Cannot reach the server') ? problem.textContent : null",
            &[],
        );
        assert!(killed.elapsed() < Duration::from_secs(10), "said after {:?}: {said}", killed.elapsed());
        let page = self.browser.run(
            "return { running: [...document.querySelectorAll('.badge')].filter(b => /running/.test(b.textContent)).length,
                      enabled: [...document.querySelectorAll('main button')].filter(b => !b.disabled).map(b => b.textContent) }",
            &[],
        );
        assert_eq!(page, json!({ "running": 0, "enabled": [] }));
        self.browser.screenshot("unreachable");
    }

    /// A time window's node shows its kind and size, its watermark and the
    /// late tuples it found, as the API says them.
    fn a_window_node_shows_its_watermark_and_late_tuples_as_the_api_does(&self) {
        let readings = self.dir.path().join("in/readings.txt");
        let generated = std::process::Command::new("python3")
            .arg(Path::new(REPO_ROOT).join("tests/windows_reference.py"))
            .args(["generate", "--seed", "7", "-n", "3000", "-o"])
            .arg(&readings)
            .status()
            .unwrap();
        assert!(generated.success());
        let windows = bundle(self.dir.path(), WINDOWS, "windows.weir");
        self.deploy(&windows, "windows", "time-tumbling", "readings.txt");
        let status = self.server.wait_for_topology("windows", 3);
        let (_, definition) = self.server.api("GET", "/v1/topologies/windows/definition", b"");
        let window = definition["nodes"].as_array().unwrap().iter().find(|n| n["op"]["op"] == "window").unwrap();
        let id = window["id"].as_str().unwrap();
        let (watermark, late) = (status["watermarks"][id].clone(), status["late_tuples"][id].clone());
        assert!(watermark.is_i64() && late.as_u64().is_some_and(|n| n > 0), "{status}");
        // Its open windows are the window keys (an integer end first) its
        // state holds: counted apart, through the state's own pages.
        let open = status["open_windows"][id].clone();
        let state = window["op"]["state"].as_str().or(window["op"]["state"]["name"].as_str()).unwrap();
        let (code, entries) = self.server.api("GET", &format!("/v1/topologies/windows/states/{state}?limit=1000"), b"");
        assert_eq!(code, 200, "{entries}");
        let held = entries.as_array().unwrap().iter().filter(|e| e["key"][0].is_i64()).count();
        assert!(held > 0 && open.as_u64() == Some(held as u64), "{held} windows held: {status}");
        let (_, metrics) = self.server.http("GET", "/metrics", None, b"");
        assert!(
            metrics.contains(&format!("weir_open_windows{{topology=\"windows\",operator=\"{id}\"}} {held}\n")),
            "{metrics}"
        );
        self.browser.goto(&self.url("#/t/windows"));
        let shown = self.browser.wait_for(
            "the window's figures",
            "const g = document.querySelector(`svg.graph g.node[data-id='${arguments[0]}']`);
             return g?.dataset.watermark && g.dataset.open ? { watermark: Number(g.dataset.watermark),
               late: Number(g.dataset.late), open: Number(g.dataset.open),
               detail: g.querySelector('text.detail').textContent, time: g.querySelector('text.time').textContent,
               rates: g.querySelector('text.rates').textContent } : null",
            &[json!(id)],
        );
        assert_eq!((&shown["watermark"], &shown["late"], &shown["open"]), (&watermark, &late, &open), "{shown}");
        assert!(shown["rates"].as_str().unwrap().contains(&format!(" · {held} open · ")), "{shown}");
        let at = chrono_free_utc(watermark.as_i64().unwrap());
        assert_eq!(shown["time"], format!("watermark {at}"), "{shown}");
        assert!(shown["rates"].as_str().unwrap().ends_with(&format!("late {late}")), "{shown}");
        assert!(shown["detail"].as_str().unwrap().starts_with("event time "), "{shown}");
        self.browser.screenshot("window");
        let (status, body) = self.server.api("DELETE", "/v1/topologies/windows?state=drop", b"");
        assert_eq!(status, 204, "{body}");
    }

    fn a_wrong_token_shows_the_401_and_nothing_else(&self) {
        self.browser.goto(&self.url(""));
        let token = self.browser.find("form.token input[type=password]");
        // A first visit sent no token: asked for one, with no error shown.
        let first = self.browser.run(
            "return { errors: [...document.querySelectorAll('.error, .problem')].filter(e => e.getClientRects().length)
                                .map(e => e.outerHTML),
                      heading: document.querySelector('form.token h1').textContent }",
            &[],
        );
        assert_eq!(first, json!({ "errors": [], "heading": "This server wants its token" }));
        self.browser.type_into(&token, "wrong-token");
        self.browser.run("document.querySelector('form.token').dataset.asked = 'before'", &[]);
        self.browser.click(&self.browser.find("form.token button"));
        // Asked again, by a form of its own.
        let said = self.browser.wait_for(
            "the 401",
            "const form = document.querySelector('form.token:not([data-asked])');
             return form?.querySelector('.error')?.textContent ?? null",
            &[],
        );
        let said = said.as_str().unwrap();
        assert!(
            said.contains("The server answered 401: a valid `Authorization: Bearer <token>` header is required"),
            "{said}"
        );
        let page = self.browser.run(
            "return { text: document.body.innerText, cards: document.querySelectorAll('article').length,
                      kept: sessionStorage.getItem('weir-token') }",
            &[],
        );
        assert!(!page["text"].as_str().unwrap().contains("word-count"), "{page}");
        assert_eq!((page["cards"].clone(), page["kept"].clone()), (json!(0), Value::Null), "{page}");
        self.browser.screenshot("token");
        let token = self.browser.find("form.token input[type=password]");
        self.browser.clear(&token);
        self.browser.type_into(&token, TOKEN);
        self.browser.click(&self.browser.find("form.token button"));
    }

    fn a_401_on_any_later_page_asks_again_and_shows_nothing_else(&self) {
        let kept =
            self.browser.run("return [sessionStorage.getItem('weir-token'), document.cookie, location.href]", &[]);
        assert_eq!(kept[0], TOKEN, "the token is kept in the tab's session storage");
        assert_eq!(kept[1], "", "and in no cookie");
        assert!(!kept[2].as_str().unwrap().contains(TOKEN), "nor in the URL: {kept}");
        self.browser.goto(&self.url("#/t/word-count"));
        self.browser.find("svg.graph");
        // The server's token changed, say: the page's next refresh gets 401.
        self.browser.run("sessionStorage.setItem('weir-token', 'stale')", &[]);
        self.browser.find("form.token .error");
        let page = self
            .browser
            .run("return { graph: document.querySelectorAll('svg.graph').length, text: document.body.innerText }", &[]);
        assert_eq!(page["graph"], 0, "{page}");
        assert!(!page["text"].as_str().unwrap().contains("word-count"), "{page}");
        self.browser.type_into(&self.browser.find("form.token input[type=password]"), TOKEN);
        self.browser.click(&self.browser.find("form.token button"));
        // The same page again.
        self.browser.find("svg.graph");
        self.browser.goto(&self.url(""));
    }

    fn the_topologies_page_lists_the_word_count_whose_txid_rises_and_chart_has_points(&mut self) {
        let txid = |d: &Dashboard| d.card_text("word-count", ".txid").as_str().map(|t| t.replace(',', ""));
        self.browser.wait_for("the word count's card", "return document.querySelector('article.topology .txid')", &[]);
        assert_eq!(self.card_text("word-count", "[data-state]"), "running");
        assert_eq!(txid(self).as_deref(), Some("10"));
        let before = 10;
        // More input while the page is watched: the txid it shows rises.
        self.feed(12_000);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let shown: u64 = txid(self).unwrap_or_default().parse().unwrap_or(0);
            if shown == 12 {
                break;
            }
            assert!(shown >= before && Instant::now() < deadline, "the page shows txid {shown}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its other figures, as the API gives them (the page refreshes
        // every second; the run is idle at txid 12).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = self.server.wait_for_topology("word-count", 12);
            let shown = |class: &str| self.card_text("word-count", class).as_str().unwrap_or_default().replace(',', "");
            let count = |field: &str| match &status[field] {
                Value::Null => "–".to_owned(),
                value => value.to_string(),
            };
            let ms = |class: &str, field: &str| {
                let shown: Option<f64> = shown(class).strip_suffix(" ms").and_then(|ms| ms.parse().ok());
                shown.zip(status[field].as_f64()).is_some_and(|(shown, want)| (shown - want).abs() <= 0.006)
            };
            let same = shown(".replays") == count("replays")
                && shown(".spout-lag") == count("spout_lag")
                && ms(".commit-p50", "commit_p50_ms")
                && ms(".commit-p99", "commit_p99_ms");
            if same {
                break;
            }
            let card = self.card_text("word-count", ".figures");
            assert!(Instant::now() < deadline, "the card shows {card} for {status}");
            std::thread::sleep(Duration::from_millis(200));
        }
        // The chart holds samples and has drawn the tuples/s line (#16a34a).
        let drawn = self.browser.wait_for(
            "a chart with points",
            "const card = [...document.querySelectorAll('article.topology')].find(a => a.dataset.name === 'word-count');
             const chart = card?.querySelector('.chart');
             const canvas = chart?.querySelector('canvas');
             if (!canvas || Number(chart.dataset.points) < 3) return null;
             const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
             let green = 0;
             for (let i = 0; i < pixels.length; i += 4)
               if (pixels[i] === 22 && pixels[i + 1] === 163 && pixels[i + 2] === 74 && pixels[i + 3] === 255) green++;
             return green > 20 ? { points: Number(chart.dataset.points), green } : null",
            &[],
        );
        assert!(drawn["points"].as_u64().unwrap() >= 3, "{drawn}");
        // The lag's unit, as the API says it: a file spout counts bytes.
        let (_, status) = self.server.api("GET", "/v1/topologies/word-count", b"");
        assert_eq!(status["spout_lag_unit"], "bytes", "{status}");
        let labels = self.card_text("word-count", ".figures");
        assert!(labels.as_str().unwrap().contains("spout lag, bytes"), "{labels}");
        self.assert_no_markup_took_effect("the topologies page");
        self.browser.screenshot("topologies");
    }

    fn the_topology_page_draws_a_node_per_operator_named_as_weir_inspect_names_them(&self) {
        let link = self.browser.run(
            "return [...document.querySelectorAll('article.topology h2 a')].find(a => a.textContent === 'word-count')",
            &[],
        );
        self.browser.click(&Element::from(link));
        let drawn = self.browser.wait_for(
            "the stream graph",
            "const nodes = [...document.querySelectorAll('svg.graph g.node.op')];
             return nodes.length ? nodes.map(g => ({ name: g.querySelector('text.name').textContent,
                                                       kind: g.dataset.kind, parallelism: Number(g.dataset.parallelism) })) : null",
            &[],
        );
        let inspected = weir_ok(&["inspect", "--json", self.word_count.to_str().unwrap()]);
        let manifest: Value = serde_json::from_slice(&inspected.stdout).unwrap();
        let nodes = manifest["topologies"][0]["definition"]["nodes"].as_array().unwrap();
        let want: Vec<Value> = nodes
            .iter()
            .map(|n| json!({ "name": n["id"], "kind": n["op"]["op"], "parallelism": n["parallelism"].as_u64().unwrap_or(1) }))
            .collect();
        assert_eq!(drawn.as_array().unwrap(), &want, "the graph's nodes against weir inspect's");
        let states = self
            .browser
            .run("return [...document.querySelectorAll('svg.graph g.node.state')].map(g => g.dataset.id)", &[]);
        assert_eq!(states, json!(["counts"]));
        // Time per batch, for the guest's operator, and the live charts.
        let split = self.browser.wait_for(
            "split's time per batch",
            "const t = document.querySelector('svg.graph g.node[data-id=split] text.time')?.textContent;
             return t && t.endsWith('ms a batch') ? t : null",
            &[],
        );
        let ms: f64 = split.as_str().unwrap().trim_end_matches(" ms a batch").parse().unwrap();
        assert!(ms > 0.0, "{split}");
        // The host's own nodes are timed too: the built-in count's.
        self.browser.wait_for(
            "count's time per batch",
            "return document.querySelector('svg.graph g.node[data-id=count] text.time')?.textContent.endsWith('ms a batch')",
            &[],
        );
        // Tuples in and out of split: its totals are the run's (every
        // sentence in, every word out), and its rates the API's last
        // interval's, shown as text.
        let status = self.server.wait_for_topology("word-count", 12);
        let words: i64 = self.truth().values().sum();
        let shown = self.browser.wait_for(
            "split's tuples in and out",
            "const g = document.querySelector('svg.graph g.node[data-id=split]');
             return g?.dataset.tuplesIn && Number(g.dataset.tuplesIn) === arguments[0]
               ? { tuples_in: Number(g.dataset.tuplesIn), tuples_out: Number(g.dataset.tuplesOut),
                   in_per_s: Number(g.dataset.inPerS), out_per_s: Number(g.dataset.outPerS),
                   text: g.querySelector('text.rates').textContent } : null",
            &[status["tuples"].clone()],
        );
        assert_eq!(status["operator_tuples"]["split"], json!({ "tuples_in": status["tuples"], "tuples_out": words }));
        assert_eq!((&shown["tuples_in"], &shown["tuples_out"]), (&status["tuples"], &json!(words)), "{shown}");
        // Idle at txid 12, the last interval's rates are the API's: none,
        // once a second has passed since its last commit.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, history) = self.server.api("GET", "/v1/topologies/word-count/history", b"");
            let rates = &history["operators"]["split"];
            if (rates["in_per_s"].as_f64(), rates["out_per_s"].as_f64()) == (Some(0.0), Some(0.0)) {
                break;
            }
            assert!(Instant::now() < deadline, "split still busy: {history}");
            std::thread::sleep(Duration::from_millis(200));
        }
        let shown = self.browser.wait_for(
            "split idle",
            "const g = document.querySelector('svg.graph g.node[data-id=split]');
             const text = g?.querySelector('text.rates').textContent;
             return text === 'in 0/s · out 0/s · 0% busy' ? { text } : null",
            &[],
        );
        assert_eq!(shown["text"], "in 0/s · out 0/s · 0% busy", "{shown}");
        // The spout is timed like the others, by its emission of each
        // batch, and gives out every tuple the run committed.
        let spout = nodes.iter().find(|n| n["op"]["op"] == "spout").unwrap()["id"].clone();
        assert_eq!(
            status["operator_tuples"][spout.as_str().unwrap()],
            json!({ "tuples_in": 0, "tuples_out": status["tuples"] })
        );
        assert!(status["operator_ms"][spout.as_str().unwrap()].as_f64().is_some_and(|ms| ms > 0.0), "{status}");
        let shown = self.browser.wait_for(
            "the spout's time and tuples out",
            "const g = document.querySelector(`svg.graph g.node[data-id='${arguments[0]}']`);
             const time = g?.querySelector('text.time').textContent;
             return time?.endsWith('ms a batch') && Number(g.dataset.tuplesOut) === arguments[1]
               ? { time, out: Number(g.dataset.tuplesOut), text: g.querySelector('text.rates').textContent } : null",
            &[spout.clone(), status["tuples"].clone()],
        );
        assert!(shown["text"].as_str().unwrap().starts_with("out 0/s"), "{shown}");
        self.browser.wait_for(
            "charts with points",
            "const charts = [...document.querySelectorAll('section.charts .chart')];
             return charts.length === 3 && charts.every(c => Number(c.dataset.points) >= 3)",
            &[],
        );
        // A catch-up spike does not set the scale: five seconds at 50,000
        // tuples/s then steady traffic of about 100, drawn by the page's
        // own chart code and uPlot, scale to the steady traffic, the spike
        // marked at the top and named in the text.
        self.browser.run(
            "import('/assets/chart.js').then(m => {
               const chart = new m.TimeChart(m.THROUGHPUT, { title: 'spike' });
               document.querySelector('section.charts').append(chart.element);
               const at = [...Array(300).keys()].map(i => 1.7e9 + i);
               chart.update({ at, tuples_per_s: at.map((_, i) => (i >= 20 && i < 25 ? 50000 : 100 + (i % 7))) });
               window.spikeChart = chart;
             })",
            &[],
        );
        let spiked = self.browser.wait_for(
            "a chart past a spike",
            "const chart = window.spikeChart;
             return chart?.element.dataset.top ? { top: Number(chart.element.dataset.top),
               above: Number(chart.element.dataset.above), text: chart.text.textContent } : null",
            &[],
        );
        self.browser.run("window.spikeChart.element.remove()", &[]);
        let top = spiked["top"].as_f64().unwrap();
        assert!((106.0..=200.0).contains(&top), "{spiked}");
        assert_eq!(spiked["above"], 5, "{spiked}");
        let text = spiked["text"].as_str().unwrap();
        assert!(text.contains("(peak 50,000") && text.contains("above the scale, marked ▲ at its top"), "{spiked}");
        let failures = self.browser.run("return document.querySelector('.failures-box').textContent", &[]);
        assert_eq!(failures, "No failed attempt since it started.");
        self.assert_no_markup_took_effect("the topology page");
        let shot = self.browser.screenshot("topology");
        if std::env::var_os("WEIR_UPDATE_DOCS").is_some() {
            std::fs::copy(shot, Path::new(REPO_ROOT).join("docs/dashboard.png")).unwrap();
        }
    }

    /// The rows of the state browser's table: key, value, txid.
    fn rows(&self, css: &str) -> Vec<(String, String, String)> {
        let rows = self.browser.run(
            "return [...document.querySelectorAll(arguments[0])].map(tr =>
               [tr.querySelector('.key')?.textContent, tr.querySelector('.value')?.textContent, tr.querySelector('.txid')?.textContent])",
            &[json!(css)],
        );
        serde_json::from_value::<Vec<(String, String, String)>>(rows).unwrap()
    }

    fn the_state_browser_shows_exact_counts_and_pages_through_keys_in_order(&self) {
        self.browser.click(&self.browser.find("a.state-link"));
        let truth = self.truth();
        let mut shown = Vec::new();
        for page in 0..3 {
            let range = format!("keys {}–{}", page * 100 + 1, page * 100 + 100);
            self.browser.wait_for(
                &range,
                "return document.querySelector('.range')?.textContent === arguments[0]",
                &[json!(range)],
            );
            shown.extend(self.rows("table.entries:not(.one) tbody tr"));
            if page < 2 {
                self.browser.click(&self.browser.find("button.next"));
            }
        }
        let want: Vec<(&String, &i64)> = truth.iter().take(300).collect();
        let got: Vec<(&String, i64)> = shown.iter().map(|(k, v, _)| (k, v.parse().unwrap())).collect();
        assert_eq!(got.len(), 300);
        for ((key, count), (want_key, want_count)) in got.iter().zip(&want) {
            assert_eq!((*key, count), (*want_key, *want_count), "keys in order, counts exact");
        }
        let last_committed = self.server.wait_for_topology("word-count", 12)["last_committed"].as_u64().unwrap();
        for (_, _, txid) in &shown {
            assert!((1..=last_committed).contains(&txid.parse().unwrap()), "stored txid {txid}");
        }
        self.browser.screenshot("state");
        // The whole state: its key count, its top keys by value, the keys
        // of a prefix, as the truth has them.
        let summary = self.browser.wait_for(
            "the state's summary",
            "const count = document.querySelector('.key-count')?.dataset.keys;
             const top = [...document.querySelectorAll('table.top tbody tr')].map(tr =>
               [tr.querySelector('.key').textContent, tr.querySelector('.value').textContent]);
             return count && top.length ? { count: Number(count), top } : null",
            &[],
        );
        assert_eq!(summary["count"], truth.len(), "{summary}");
        let mut by_value: Vec<(&String, &i64)> = truth.iter().collect();
        by_value.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let want: Vec<Value> = by_value.iter().take(10).map(|(k, v)| json!([k, v.to_string()])).collect();
        assert_eq!(summary["top"], json!(want), "the top keys, highest first, ties in key order");
        self.browser.type_into(&self.browser.find("#prefix"), "w12");
        self.browser.click(&self.browser.find("form.prefix-form button"));
        let prefixed = self.browser.wait_for(
            "the keys of a prefix",
            "return [...document.querySelectorAll('table.prefixed td.key')].map(td => td.textContent)",
            &[],
        );
        let want: Vec<&String> = truth.keys().filter(|k| k.starts_with("w12")).take(100).collect();
        assert_eq!(prefixed, json!(want));
        // Three words looked up one at a time.
        for word in ["w1", "w7", "w42"] {
            let field = self.browser.find("#lookup-key");
            self.browser.clear(&field);
            self.browser.type_into(&field, word);
            self.browser.click(&self.browser.find("form.lookup button"));
            self.browser.wait_for(
                word,
                "return document.querySelector('.found td.key')?.textContent === arguments[0]",
                &[json!(word)],
            );
            let found = self.rows(".found tbody tr");
            let (status, stored) = self.server.api(
                "GET",
                &format!("/v1/topologies/word-count/states/counts?raw=true&key={}", escape(&json!([word]).to_string())),
                b"",
            );
            assert_eq!(status, 200, "{stored}");
            assert_eq!(found, [(word.to_owned(), truth[word].to_string(), stored["txid"].to_string())], "{word}");
        }
        self.assert_no_markup_took_effect("the state browser");
    }

    fn the_query_console_answers_as_weir_query_does(&self) {
        self.browser.goto(&self.url("#/t/word-count"));
        self.browser.click(&self.browser.find("a.query-link"));
        let args = self.browser.find("#query-args");
        self.browser.type_into(&args, "w1 w7");
        self.browser.click(&self.browser.find("form.console button"));
        let shown = self.browser.wait_for("the answer", "return document.querySelector('pre.json')?.textContent", &[]);
        let shown: Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
        let output = weir()
            .env("WEIR_TOKEN", TOKEN)
            .args([
                "query",
                "--server",
                &self.server.url(),
                "--topology",
                "word-count",
                "--query",
                "words",
                "--args",
                "w1 w7",
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        let cli: Value =
            serde_json::from_str(String::from_utf8(output.stdout).unwrap().lines().last().unwrap()).unwrap();
        let truth = self.truth();
        assert_eq!(shown, cli);
        assert_eq!(shown, json!([[truth["w1"] + truth["w7"]]]));
        let cells = self
            .browser
            .run("return [...document.querySelectorAll('table.results td')].map(td => td.textContent)", &[]);
        assert_eq!(cells, json!([(truth["w1"] + truth["w7"]).to_string()]));
        // Its column is named as the query's result field is, and the answer is timed.
        let (_, fields) = self.server.api("GET", "/v1/topologies/word-count/queries/words", b"");
        let shown = self.browser.run(
            "return { heads: [...document.querySelectorAll('table.results th')].map(th => th.textContent),
                      took: document.querySelector('.took').textContent }",
            &[],
        );
        assert_eq!(shown["heads"], fields["fields"], "{shown}");
        assert!(fields["fields"].as_array().is_some_and(|f| f.len() == 1), "{fields}");
        assert!(shown["took"].as_str().unwrap().starts_with("Answered in "), "{shown}");
        self.assert_no_markup_took_effect("the query console");
        self.browser.screenshot("query");
    }

    fn stop_then_resume_from_the_page_and_counts_end_exact(&mut self) {
        let badge = "return document.querySelector('.headline [data-state]')?.textContent === arguments[0]";
        self.browser.goto(&self.url("#/t/word-count"));
        self.browser.wait_for("running", badge, &[json!("running")]);
        self.browser.click(&self.browser.find("button.stop"));
        self.browser.wait_for("stopped", badge, &[json!("stopped")]);
        assert_eq!(self.server.wait_for_topology("word-count", 12)["state"], "stopped");
        // Stopped, it reads nothing more; its lag counts what came since.
        self.feed(15_000);
        std::thread::sleep(Duration::from_millis(1500));
        let stopped = self.server.wait_for_topology("word-count", 12);
        assert_eq!(stopped["state"], "stopped");
        let behind: usize = self.sentences[12_000..15_000].iter().map(|s| s.len() + 1).sum();
        assert_eq!(stopped["spout_lag"], behind, "{stopped}");
        let shown = behind
            .to_string()
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(",");
        self.browser.wait_for(
            "the lag while stopped",
            "return document.querySelector('.figures .spout-lag')?.textContent === arguments[0]",
            &[json!(shown)],
        );
        self.browser.click(&self.browser.find("button.resume"));
        self.browser.wait_for("running again", badge, &[json!("running")]);
        self.browser.wait_for("txid 15", "return document.querySelector('.figures .txid')?.textContent === '15'", &[]);
        assert_counts_eq(&self.server.counts("word-count"), &self.truth());
    }

    fn a_damaged_bundle_deployed_from_the_page_shows_the_servers_400_reason(&self) {
        let mut damaged = std::fs::read(&self.word_count).unwrap();
        *damaged.last_mut().unwrap() ^= 0xff;
        let path = self.dir.path().join("damaged.weir");
        std::fs::write(&path, damaged).unwrap();
        self.browser.goto(&self.url(""));
        self.browser.wait_for("the list", "return document.querySelector('article.topology')", &[]);
        self.browser.choose_file(&self.browser.find("#deploy-bundle"), &path);
        self.browser.click(&self.browser.find("form.deploy button"));
        let said = self.browser.wait_for(
            "the 400",
            "return document.querySelector('form.deploy .message.error')?.textContent",
            &[],
        );
        let said = said.as_str().unwrap();
        assert!(said.starts_with("The server answered 400: "), "{said}");
        assert!(said.contains("does not match its checksum"), "{said}");
        let (_, listed) = self.server.api("GET", "/v1/topologies", b"");
        assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    }

    fn guest_markup_is_shown_as_text_and_no_script_runs(&self) {
        let input: Vec<String> = [format!("{} {} plain", MARKUP_WORDS[0], MARKUP_WORDS[1])]
            .into_iter()
            .chain((0..1499).map(|_| "plain words here".to_owned()))
            .collect();
        std::fs::write(self.dir.path().join("in/markup.txt"), input.join("\n") + "\n").unwrap();
        let variants = self.dir.path().join("variants.weir");
        bundle(self.dir.path(), TEST_TOPOLOGIES, "variants.weir");
        // Deployed from the page, under a name that is markup too.
        self.browser.goto(&self.url(""));
        self.browser.choose_file(&self.browser.find("#deploy-bundle"), &variants);
        self.browser.type_into(&self.browser.find("#deploy-name"), MARKUP_NAME);
        self.browser.type_into(&self.browser.find("#deploy-topology"), "markup-word-count");
        self.browser.type_into(&self.browser.find("#deploy-input"), "in/markup.txt");
        self.browser.click(&self.browser.find("form.deploy button"));
        // It commits txid 1 after a failed attempt, then halts at txid 2.
        self.browser.wait_for(
            "the markup topology failed",
            "return [...document.querySelectorAll('article.topology')].find(a => a.dataset.name === arguments[0])
               ?.querySelector('[data-state=failed]')",
            &[json!(MARKUP_NAME)],
        );
        assert_eq!(self.card_text(MARKUP_NAME, "h2 a"), MARKUP_NAME);
        let error = self.card_text(MARKUP_NAME, ".error-block");
        assert!(error.as_str().unwrap().contains(&format!("{MARKUP}txid 2 cannot be processed")), "{error}");
        self.the_failed_card_shows_at_most_8_lines_before_its_fold();
        self.assert_no_markup_took_effect("the topologies page, with markup");

        self.browser.goto(&self.url(&format!("#/t/{}", escape(MARKUP_NAME))));
        // Failed attempts and log lines, most recent first: txid 1 failed
        // once; txid 2, replayed with it, halted the topology.
        let failures = self.browser.wait_for(
            "its failures",
            "const rows = [...document.querySelectorAll('table.failures tbody tr')];
             return rows.length >= 2 ? rows.map(tr => [...tr.children].map(td => td.textContent)) : null",
            &[],
        );
        let failures = failures.as_array().unwrap();
        let retried = failures.last().unwrap();
        let want = format!("operator split: retry: {MARKUP}txid 1 fails on its first attempt");
        assert_eq!(
            (&retried[0], &retried[1], &retried[3], &retried[4]),
            (&json!("1"), &json!("0"), &json!("split"), &json!(want)),
            "{failures:?}"
        );
        let halted = &failures[0];
        assert_eq!(halted[0], "2", "{failures:?}");
        assert!(halted[4].as_str().unwrap().contains(&format!("{MARKUP}txid 2 cannot be processed")), "{failures:?}");
        // Each attempt with its time of day, to the second, as the API says it.
        let (_, status) = self.server.api("GET", &format!("/v1/topologies/{}", escape(MARKUP_NAME)), b"");
        let shown_at = self.browser.run(
            "return [...document.querySelectorAll('table.failures td.at time')].map(t => Date.parse(t.getAttribute('datetime')))",
            &[],
        );
        let want_at: Vec<Value> = status["failures"].as_array().unwrap().iter().map(|f| f["at_ms"].clone()).collect();
        assert_eq!(shown_at, json!(want_at), "{status}");
        for row in failures {
            let at = row[2].as_str().unwrap();
            assert!(
                at.len() == 8 && at.chars().filter(|c| *c == ':').count() == 2,
                "a time of day to the second: {row:?}"
            );
        }
        // The failing operator is marked in the graph, and said in words.
        let marked = self.browser.wait_for(
            "the failing node marked",
            "const marked = [...document.querySelectorAll('svg.graph g.node.failing')].map(g => g.dataset.id);
             return marked.length ? { marked, said: document.querySelector('.failing-node').textContent } : null",
            &[],
        );
        assert_eq!(marked["marked"], json!(["split"]), "{marked}");
        assert!(marked["said"].as_str().unwrap().contains("failed in operator split"), "{marked}");
        let logged = self.browser.wait_for(
            "its logs",
            "const lines = [...document.querySelectorAll('ol.logs .line')].map(l => l.textContent);
             return lines.length >= 2 ? lines : null",
            &[],
        );
        for txid in [1, 2] {
            let line = json!(format!("{MARKUP} split starts txid {txid}"));
            assert!(logged.as_array().unwrap().contains(&line), "{line} not in {logged}");
        }
        // Each line with its time; a search keeps the lines holding its text.
        let (_, api_lines) = self.server.api("GET", &format!("/v1/topologies/{}/logs", escape(MARKUP_NAME)), b"");
        assert!(api_lines.as_array().unwrap().iter().all(|l| l["at_ms"].as_u64().is_some_and(|ms| ms > 0)));
        let timed = self.browser.run(
            "return [...document.querySelectorAll('ol.logs li')].every(li => /^\\d\\d:\\d\\d:\\d\\d$/.test(li.querySelector('.at')?.textContent ?? ''))",
            &[],
        );
        assert_eq!(timed, true, "every line has its time");
        self.browser.type_into(&self.browser.find("#log-search"), "starts txid 1");
        let found = self.browser.wait_for(
            "the lines searched for",
            "const lines = [...document.querySelectorAll('ol.logs .line')].map(l => l.textContent);
             return lines.length && lines.every(l => l.includes('starts txid 1')) ? lines : null",
            &[],
        );
        assert!(found.as_array().unwrap().contains(&json!(format!("{MARKUP} split starts txid 1"))), "{found}");
        self.browser.clear(&self.browser.find("#log-search"));
        self.browser.run("document.getElementById('log-search').dispatchEvent(new Event('input'))", &[]);
        // Resumed from the page, it tries txid 2 again: the logs shown
        // follow, with no reload.
        let starts_of_2 = "return [...document.querySelectorAll('ol.logs .line')]
                             .filter(l => l.textContent.endsWith('split starts txid 2')).length";
        let before = self.browser.run(starts_of_2, &[]).as_u64().unwrap();
        self.browser.run("window.notReloaded = true", &[]);
        self.browser.click(&self.browser.find("button.resume"));
        self.browser.wait_for(
            "a log line of the second try",
            &format!("{starts_of_2} > arguments[0] && window.notReloaded === true"),
            &[json!(before)],
        );
        self.browser.wait_for(
            "failed again",
            "return document.querySelector('.headline [data-state]')?.textContent === 'failed'",
            &[],
        );
        let headline = self.browser.run("return document.querySelector('.headline h1').textContent", &[]);
        assert_eq!(headline, MARKUP_NAME);
        self.assert_no_markup_took_effect("the topology page, with markup");

        self.browser.click(&self.browser.find("a.state-link"));
        let keys = self.browser.wait_for(
            "its keys",
            "const keys = [...document.querySelectorAll('table.entries td.key')].map(td => td.textContent);
             return keys.length > 2 ? keys : null",
            &[],
        );
        for word in MARKUP_WORDS {
            assert!(keys.as_array().unwrap().contains(&json!(word)), "{word} not in {keys}");
        }
        self.assert_no_markup_took_effect("the state browser, with markup");
    }

    fn upgrade_and_delete_from_the_page(&self) {
        self.browser.goto(&self.url("#/t/word-count"));
        self.browser.choose_file(&self.browser.find("input.upgrade-bundle"), &self.word_count);
        self.browser.click(&self.browser.find("button.upgrade"));
        self.browser.wait_for(
            "the upgrade",
            "return document.querySelector('.actions .message')?.textContent === 'Upgrading: done.'",
            &[],
        );
        let status = self.server.wait_for_topology("word-count", 15);
        assert_eq!(status["state"], "running");
        // The upgrade is in its history, as the API has it.
        let upgrades = status["deployment"]["upgrades"].as_array().unwrap();
        assert_eq!(upgrades.len(), 1, "{status}");
        let digest = status["deployment"]["bundle"].as_str().unwrap().trim_end_matches(".weir");
        assert_eq!(upgrades[0]["to"], status["deployment"]["bundle"], "{status}");
        let shown = self.browser.wait_for(
            "the upgrade history",
            "return [...document.querySelectorAll('.upgrade-history li')].map(li => li.textContent)",
            &[],
        );
        let shown = shown.as_array().unwrap();
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert!(shown[0].as_str().unwrap().ends_with(&format!("→ {}", &digest[..12])), "{shown:?}");
        // Where it came from: its bundle's digest, its input, its deploy time.
        let facts = self.browser.run(
            "return { digest: document.querySelector('.deployment .digest').title,
                      input: document.querySelector('.deployment .input').textContent,
                      deployed: document.querySelector('.deployment .deployed')?.textContent ?? null }",
            &[],
        );
        assert_eq!(facts["digest"], format!("bundle SHA-256 {digest}"), "{facts}");
        assert_eq!(facts["input"], "input in/corpus.txt", "{facts}");
        assert!(facts["deployed"].as_str().unwrap().starts_with("deployed 20"), "{facts}");

        self.browser.goto(&self.url(&format!("#/t/{}", escape(MARKUP_NAME))));
        // Deleting asks what becomes of the state, then for a confirmation.
        self.browser.click(&self.browser.find("button.delete"));
        let said = self.browser.wait_for(
            "the question",
            "return document.querySelector('.actions .message.error')?.textContent",
            &[],
        );
        assert!(said.as_str().unwrap().contains("keep it or drop it"), "{said}");
        self.browser.click(&self.browser.find("#delete-drop"));
        self.browser.click(&self.browser.find("button.delete"));
        let question = self.browser.wait_for("the confirmation", "const c = document.querySelector('.confirm'); return c && !c.hidden ? c.querySelector('p').textContent : null", &[]);
        assert_eq!(question, format!("Delete {MARKUP_NAME} and drop its state for good?"));
        let (_, listed) = self.server.api("GET", "/v1/topologies", b"");
        assert_eq!(listed.as_array().unwrap().len(), 2, "nothing is deleted before it is confirmed");
        self.browser.click(&self.browser.find("button.confirm-delete"));
        self.browser.wait_for(
            "the list without it",
            "return location.hash === '#/' && document.querySelectorAll('article.topology').length === 1",
            &[],
        );
        let (_, listed) = self.server.api("GET", "/v1/topologies", b"");
        assert_eq!(
            listed.as_array().unwrap().iter().map(|s| s["name"].as_str()).collect::<Vec<_>>(),
            [Some("word-count")]
        );
        let (status, _) = self.server.api("GET", &format!("/v1/topologies/{}/states/counts", escape(MARKUP_NAME)), b"");
        assert_eq!(status, 404);
        assert_counts_eq(&self.server.counts("word-count"), &self.truth());
    }

    fn the_state_browser_shows_an_opaque_states_prev(&self) {
        let variants = bundle(self.dir.path(), TEST_TOPOLOGIES, "variants.weir");
        self.deploy(&variants, "opaque", "word-count-opaque", "corpus.txt");
        self.server.wait_for_topology("opaque", 15);
        self.browser.goto(&self.url("#/t/opaque/state/counts"));
        self.browser.wait_for("the prev column", "return document.querySelector('table.entries td.prev')", &[]);
        let truth = self.truth();
        for word in ["w1", "w7"] {
            let field = self.browser.find("#lookup-key");
            self.browser.clear(&field);
            self.browser.type_into(&field, word);
            self.browser.click(&self.browser.find("form.lookup button"));
            let shown = self.browser.wait_for(
                word,
                "const row = document.querySelector('.found tbody tr');
                 return row?.querySelector('.key')?.textContent === arguments[0]
                   ? [...row.children].map(td => td.textContent) : null",
                &[json!(word)],
            );
            let (status, stored) = self.server.api(
                "GET",
                &format!("/v1/topologies/opaque/states/counts?raw=true&key={}", escape(&json!([word]).to_string())),
                b"",
            );
            assert_eq!(status, 200, "{stored}");
            assert!(stored["prev"].is_i64(), "{stored}");
            let want =
                [word.to_owned(), truth[word].to_string(), stored["txid"].to_string(), stored["prev"].to_string()];
            assert_eq!(shown, json!(want), "{word}");
        }
        self.assert_no_markup_took_effect("the state browser, opaque");
    }

    /// A window of a general aggregator keeps each batch's tuples of a
    /// window as packed bytes in its opaque state: the state browser shows
    /// them decoded, as the tuples the readings hold, never as hex; other
    /// bytes show as text or grouped hex.
    fn the_state_browser_decodes_a_windows_kept_tuples(&self) {
        let readings = std::fs::read_to_string(self.dir.path().join("in/readings.txt")).unwrap();
        let mut values: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
        for line in readings.lines() {
            let fields: Vec<&str> = line.split(',').collect();
            values.entry(fields[0].to_owned()).or_default().insert(fields[2].parse().unwrap());
        }
        let windows = bundle(self.dir.path(), WINDOWS, "windows.weir");
        self.deploy(&windows, "kept", "count-general", "readings.txt");
        self.server.wait_for_topology("kept", 3);
        let (status, entries) = self.server.api("GET", "/v1/topologies/kept/states/open?limit=100&raw=true", b"");
        assert_eq!(status, 200, "{entries}");
        let mut want = Vec::new();
        for entry in entries.as_array().unwrap().iter().filter(|e| e["value"].get("bytes").is_some()) {
            // Keyed by the window's end and start, its sensor, the batch's txid.
            let sensor = entry["key"][2].as_str().unwrap();
            let kept = &entry["value_tuples"];
            let tuples = kept["tuples"].as_array().unwrap();
            assert_eq!(kept["count"].as_u64(), Some(tuples.len() as u64), "{entry}");
            for tuple in tuples {
                let value = tuple[0].as_i64().unwrap();
                assert!(tuple.as_array().unwrap().len() == 1 && values[sensor].contains(&value), "{entry}");
            }
            let listed: Vec<String> = tuples.iter().map(Value::to_string).collect();
            let plural = if tuples.len() == 1 { "" } else { "s" };
            want.push(json!([
                entry["key"].to_string(),
                format!("{} tuple{plural}: {}", tuples.len(), listed.join(" "))
            ]));
        }
        assert!(!want.is_empty(), "{entries}");
        self.browser.goto(&self.url("#/t/kept/state/open"));
        let shown = self.browser.wait_for(
            "the kept tuples",
            "const rows = [...document.querySelectorAll('table.entries:not(.one) tbody tr')]
               .filter(tr => tr.querySelector('.value')?.textContent.includes('tuple'))
               .map(tr => [tr.querySelector('.key').firstChild.textContent, tr.querySelector('.value').textContent]);
             return rows.length ? rows : null",
            &[],
        );
        assert_eq!(shown, json!(want));
        let hex = self.browser.run(
            "return [...document.querySelectorAll('table.entries td.value, table.entries td.prev')]
               .map(td => td.textContent).filter(t => t.includes('bytes'))",
            &[],
        );
        assert_eq!(hex, json!([]), "no value shown as raw bytes");
        // Other bytes: printable UTF-8 as text, anything else as hex in
        // groups of four bytes, each with its size.
        self.browser.run(
            "import('/assets/dom.js').then(m => { window.bytesShown = [
               m.valueText({ bytes: '7769206669' }), m.valueText({ bytes: '00ff10203040' }), m.valueText({ bytes: '' })] })",
            &[],
        );
        let shown = self.browser.wait_for("bytes as text", "return window.bytesShown ?? null", &[]);
        assert_eq!(shown, json!(["\"wi fi\" (5 bytes, UTF-8)", "6 bytes: 00ff1020 3040", "no bytes"]));
        self.browser.screenshot("state-tuples");
        let (status, body) = self.server.api("DELETE", "/v1/topologies/kept?state=drop", b"");
        assert_eq!(status, 204, "{body}");
    }
}

#[test]
fn the_dashboard_in_a_real_browser_shows_and_drives_a_real_server() {
    let mut d = Dashboard::start();
    steps!(d:
        a_wrong_token_shows_the_401_and_nothing_else,
        the_topologies_page_lists_the_word_count_whose_txid_rises_and_chart_has_points,
        the_topology_page_draws_a_node_per_operator_named_as_weir_inspect_names_them,
        the_state_browser_shows_exact_counts_and_pages_through_keys_in_order,
        the_query_console_answers_as_weir_query_does,
        stop_then_resume_from_the_page_and_counts_end_exact,
        a_damaged_bundle_deployed_from_the_page_shows_the_servers_400_reason,
        guest_markup_is_shown_as_text_and_no_script_runs,
        a_window_node_shows_its_watermark_and_late_tuples_as_the_api_does,
        the_list_page_makes_one_request_a_tick,
        every_page_fits_its_viewport_and_axe_finds_no_serious_violation,
        upgrade_and_delete_from_the_page,
        a_401_on_any_later_page_asks_again_and_shows_nothing_else,
        the_state_browser_shows_an_opaque_states_prev,
        the_state_browser_decodes_a_windows_kept_tuples,
        a_killed_server_is_said_within_10_s_and_nothing_says_running,
    );
    for page in PAGES {
        let png = std::fs::read(d.browser.screenshots.join(format!("{page}.png"))).unwrap();
        assert_eq!(png_size(&png), VIEWPORT, "{page}.png");
    }
}

/// `ms` since the epoch as a UTC time of day to the millisecond, as the
/// graph shows a watermark: HH:MM:SS.mmm.
fn chrono_free_utc(ms: i64) -> String {
    let of_day = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (of_day / 3_600_000, of_day / 60_000 % 60, of_day / 1000 % 60, of_day % 1000);
    format!("{h:02}:{m:02}:{s:02}.{milli:03}")
}
