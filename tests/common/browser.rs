//! A real headless Chromium for the dashboard's tests, driven over W3C
//! WebDriver (Debian's `chromedriver`) with plain HTTP/JSON calls: one
//! browser for a test binary, quit when dropped. `scripts/ensure-services`
//! installs both when they are missing.

use base64::Engine;
use serde_json::{Value, json};
use std::io::{BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a wait for the page may take before the test fails.
pub const PAGE_WAIT: Duration = Duration::from_secs(60);

/// The viewport every page is shown (and photographed) at.
pub const VIEWPORT: (u32, u32) = (1280, 800);

/// What WebDriver calls an element reference's key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Flags a headless Chromium needs here: as root the sandbox must be off,
/// and with no network it must not try to reach its own services.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,800",
];

/// An element of the page, as WebDriver refers to it; passed to scripts as it is.
#[derive(Clone, Debug)]
pub struct Element(Value);

impl From<Value> for Element {
    /// An element a script returned.
    fn from(reference: Value) -> Element {
        assert!(reference[ELEMENT].is_string(), "not an element: {reference}");
        Element(reference)
    }
}

impl Element {
    fn id(&self) -> &str {
        self.0[ELEMENT].as_str().unwrap_or_else(|| panic!("not an element reference: {}", self.0))
    }
}

/// A browser session.
pub struct Browser {
    driver: Child,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
    /// Where screenshots go.
    pub screenshots: PathBuf,
}

fn find_program(names: &[&str]) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!("{} is not installed: run scripts/ensure-services (Debian's chromium and chromium-driver)", names[0]);
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile.
    pub fn start(screenshots: &Path) -> Browser {
        let driver_path = find_program(&["chromedriver"]);
        let chromium = find_program(&["chromium", "chromium-browser"]);
        let mut driver = Command::new(driver_path)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own group, so that whatever it leaves behind can be ended.
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let port = read_port(&mut driver);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .proxy(None)
            .build()
            .into();
        let profile = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
            "unhandledPromptBehavior": "dismiss",
        }}});
        let base = format!("http://127.0.0.1:{port}");
        let created = call(&agent, "POST", &format!("{base}/session"), Some(&capabilities));
        let id = created["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}"));
        std::fs::create_dir_all(screenshots).unwrap();
        let browser = Browser {
            driver,
            session: format!("{base}/session/{id}"),
            agent,
            _profile: profile,
            screenshots: screenshots.to_owned(),
        };
        browser.set_viewport(VIEWPORT);
        browser
    }

    /// Shows pages (and photographs them) at `width` x `height` CSS
    /// pixels, whatever the window around them.
    pub fn set_viewport(&self, (width, height): (u32, u32)) {
        self.cdp(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        call(&self.agent, method, &format!("{}{path}", self.session), body.as_ref())
    }

    /// A DevTools protocol command, through chromedriver.
    fn cdp(&self, command: &str, params: Value) -> Value {
        self.call("POST", "/goog/cdp/execute", Some(json!({"cmd": command, "params": params})))
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) with `args` in the page; its result.
    pub fn run(&self, script: &str, args: &[Value]) -> Value {
        self.call("POST", "/execute/sync", Some(json!({ "script": script, "args": args })))
    }

    /// Runs `script` until it returns something other than null, false or
    /// an empty string or list, and returns that; fails the test, with a
    /// screenshot of the page, when it has not within [`PAGE_WAIT`].
    pub fn wait_for(&self, what: &str, script: &str, args: &[Value]) -> Value {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let value = self.run(script, args);
            let empty = match &value {
                Value::Null | Value::Bool(false) => true,
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            };
            if !empty {
                return value;
            }
            if Instant::now() > deadline {
                let shot = self.screenshot(&format!("failed-{}", what.replace(|c: char| !c.is_alphanumeric(), "-")));
                let text = self.run("return document.body.innerText", &[]);
                panic!("the page never showed {what} (last: {value}; see {}); it shows:\n{text}", shot.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first element matching `css`, waiting for one.
    pub fn find(&self, css: &str) -> Element {
        let found =
            self.wait_for(&format!("an element {css}"), "return document.querySelector(arguments[0])", &[json!(css)]);
        Element(found)
    }

    /// Clicks `element` as a user would.
    pub fn click(&self, element: &Element) {
        self.call("POST", &format!("/element/{}/click", element.id()), Some(json!({})));
    }

    /// Types `text` into `element` as a user would, after what it holds.
    pub fn type_into(&self, element: &Element, text: &str) {
        self.call("POST", &format!("/element/{}/value", element.id()), Some(json!({ "text": text })));
    }

    /// Empties a text field.
    pub fn clear(&self, element: &Element) {
        self.call("POST", &format!("/element/{}/clear", element.id()), Some(json!({})));
    }

    /// Chooses `file` in a file input.
    pub fn choose_file(&self, element: &Element, file: &Path) {
        self.type_into(element, file.to_str().unwrap());
    }

    /// What `element` shows, as a user reads it.
    pub fn text(&self, element: &Element) -> String {
        self.call("GET", &format!("/element/{}/text", element.id()), None).as_str().unwrap_or_default().to_owned()
    }

    /// Saves what the viewport shows as `<screenshots>/<name>.png`; its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = self.call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD.decode(encoded.as_str().unwrap()).unwrap();
        let path = self.screenshots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// What the page wrote to its console since the last call (errors
    /// among them, a refused Content-Security-Policy's too).
    pub fn console(&self) -> Vec<Value> {
        self.call("POST", "/se/log", Some(json!({"type": "browser"}))).as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Quitting the session quits the browser, and everything it started;
        // then chromedriver goes, with whatever is still in its group.
        let _ = self.agent.delete(&self.session).call();
        // SAFETY: kill(2) of the process group of our own child, not yet reaped.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

/// Reads chromedriver's "... started successfully on port N." line, for
/// at most [`PAGE_WAIT`]; then drains what else it prints, so that it never
/// blocks on a full pipe.
fn read_port(driver: &mut Child) -> u16 {
    let mut out = BufReader::new(driver.stdout.take().unwrap());
    let (told, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        let marker = b"on port ";
        let port = loop {
            if out.read(&mut byte).unwrap_or(0) != 1 {
                break Err(format!("chromedriver exited before it listened: {}", String::from_utf8_lossy(&seen)));
            }
            seen.push(byte[0]);
            if let Some(at) = seen.windows(marker.len()).rposition(|w| w == marker)
                && seen.ends_with(b".")
                && String::from_utf8_lossy(&seen).contains("successfully")
            {
                let digits = String::from_utf8_lossy(&seen[at + marker.len()..seen.len() - 1]).into_owned();
                break digits.parse().map_err(|_| format!("no port in {:?}", String::from_utf8_lossy(&seen)));
            }
        };
        let _ = told.send(port);
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    match heard.recv_timeout(PAGE_WAIT) {
        Ok(Ok(port)) => port,
        failed => {
            // SAFETY: kill(2) of the process group of our own child, not yet reaped.
            unsafe { libc::kill(-(driver.id() as i32), libc::SIGKILL) };
            let _ = driver.wait();
            match failed {
                Ok(Err(why)) => panic!("{why}"),
                _ => panic!("chromedriver did not say its port within {PAGE_WAIT:?}"),
            }
        }
    }
}

/// One WebDriver call: its `value`; fails the test on a WebDriver error.
fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<&Value>) -> Value {
    let request = ureq::http::Request::builder().method(method).uri(url);
    let sent = match body {
        Some(body) => agent.run(request.header("Content-Type", "application/json").body(body.to_string()).unwrap()),
        None => agent.run(request.body(()).unwrap()),
    };
    let mut response = sent.unwrap_or_else(|e| panic!("WebDriver {method} {url}: {e}"));
    let status = response.status().as_u16();
    let text = response.body_mut().with_config().limit(64 << 20).read_to_string().unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("WebDriver answered {text:?}: {e}"));
    assert!(status == 200, "WebDriver {method} {url} answered {status}: {}", answer["value"]);
    answer["value"].clone()
}

/// The width and height of a PNG, from its header.
pub fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let word = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}
