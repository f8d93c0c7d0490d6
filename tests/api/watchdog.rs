//! What a failing or hanging test shows: the in-process server's log, and a watchdog that
//! stops the binary, naming the test and printing the end of its log, when a test hangs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{mpsc, Mutex};

/// Seconds a test may run before the whole binary stops, naming it
/// (`CUSTODIAN_TEST_WATCHDOG_SECS`, default 900; the slowest test takes a few minutes): a
/// test that hangs fails the run at once, with its name and log, instead of holding CI to its
/// limit.
const WATCHDOG_SECS: u64 = 900;

/// Log lines kept per test thread for the watchdog to print.
const RECENT_LINES: usize = 300;

/// The last [`RECENT_LINES`] log lines of each watched test, by thread name, with the
/// watchdog's number (a thread that runs several tests arms one per test).
static RECENT: Mutex<BTreeMap<String, (u64, VecDeque<String>)>> = Mutex::new(BTreeMap::new());

/// Numbers the watchdogs.
static ARMINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The in-process server's log goes through the test harness's capture (the server runs on the
/// test's own thread), so a failing test prints it and a passing one stays quiet; its last
/// lines are also kept for the watchdog. `CUSTODIAN_TEST_LOG` sets the filter (default
/// `custodian=info`).
pub fn init_test_log() {
    use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt};
    let filter = tracing_subscriber::EnvFilter::try_from_env("CUSTODIAN_TEST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("custodian=info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_test_writer())
        .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(|| Recent))
        .try_init();
}

/// Appends what it is given to the calling thread's lines in [`RECENT`], when that thread is
/// watched.
struct Recent;

impl std::io::Write for Recent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let thread = std::thread::current();
        let Some(name) = thread.name() else { return Ok(buf.len()) };
        if let Ok(mut recent) = RECENT.lock() {
            if let Some((_, lines)) = recent.get_mut(name) {
                if lines.len() == RECENT_LINES {
                    lines.pop_front();
                }
                lines.push_back(String::from_utf8_lossy(buf).into_owned());
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `text` and a newline to stderr past libtest's capture (where `eprintln!` from a test's
/// thread, or a thread it spawned, goes), so that the run's log shows it whatever the test's
/// outcome.
pub fn say(text: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{text}\n").as_bytes());
}

/// Arms the watchdog of the calling test, disarmed when its thread ends (libtest runs each test
/// on a thread of its own) or when the same thread arms it again (`--test-threads=1` runs
/// every test on one thread).
pub fn watch_this_test() {
    thread_local! {
        static ARMED: std::cell::RefCell<Option<mpsc::Sender<()>>> = const { std::cell::RefCell::new(None) };
    }
    let limit = std::env::var("CUSTODIAN_TEST_WATCHDOG_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(WATCHDOG_SECS);
    let name = std::thread::current().name().unwrap_or("a test").to_string();
    let number = ARMINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut recent) = RECENT.lock() {
        recent.insert(name.clone(), (number, VecDeque::new()));
    }
    // Removes this test's lines, unless a later test on the thread has them now.
    let forget = move |name: &str| {
        let mut recent = RECENT.lock().ok()?;
        let mine = recent.get(name).is_some_and(|(n, _)| *n == number);
        mine.then(|| recent.remove(name)).flatten().map(|(_, lines)| lines)
    };
    let (disarm, armed) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        // Only a drop of the sender ends the wait early: nothing is ever sent.
        match armed.recv_timeout(std::time::Duration::from_secs(limit)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let lines = forget(&name).unwrap_or_default();
                // The process ends before libtest would print the capture.
                say(&format!(
                    "\n{name} is still running after {limit} s (CUSTODIAN_TEST_WATCHDOG_SECS): \
                     stopping the suite. Its last {} log lines:\n{}",
                    lines.len(),
                    lines.iter().map(String::as_str).collect::<String>()
                ));
                std::process::exit(101);
            }
            _ => {
                forget(&name);
            }
        }
    });
    ARMED.with(|a| *a.borrow_mut() = Some(disarm));
}
