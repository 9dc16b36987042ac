//! A crash harness for your own tools: run a scenario again and again, killing the worker
//! (a real child process, SIGKILL) at every point where a crash changes what happens, resume
//! it the way an agent is resumed (the same run and the same calls, in another process, the
//! dead worker's leases ended), and check your providers' own ledger.
//!
//! The points are the ones the worker reaches, in order: before and after each claim, before
//! and after each journaled step (an approval consumed, a precondition passed, your
//! `ctx.step`s, an undo's), before and after each body (after the effect, before its record),
//! after each outcome recorded, left unknown or given back. A first run (the survey) finds them; then,
//! for each, a fresh store and a fresh ledger, a worker killed there, and a worker that
//! resumes. Each point's verdict:
//!
//! - **held**: every effect as many times as in the survey, none lost unless a call was left
//!   for a person (Unknown, or a case), nothing irreversible run without its approval;
//! - **twice**: an effect your ledger shows more than once (the planted defect of an effect
//!   sent before its step is journaled, or of a write that is not idempotent re-run);
//! - **lost**: an effect of the survey that never happened, and nothing left for a person;
//! - **unapproved**: an `irreversible` call recorded without the approval that ran it;
//! - **not reached**: the killed worker finished without reaching the point (a scenario whose
//!   points vary from run to run): not held, nothing was tested there.
//!
//! A scenario is an async function of a [`Setup`]: it builds its dispatcher over
//! [`Setup::store`] (a SQLite file of the run's own), passes it through [`Setup::instrument`],
//! and dispatches its calls, writing its providers' effects under [`Setup::dir`]. Errors
//! from a dispatch are answers, not failures: a resumed call may be answered Unknown. The
//! test then reads the ledger back with the function given to [`CrashTest::effects`]:
//!
//! ```no_run
//! use std::path::Path;
//! use idem::testing::{CrashTest, Setup};
//!
//! async fn transfer(setup: Setup) {
//!     let registry = idem::Registry::builder().build().unwrap();
//!     let dispatcher = setup.instrument(idem::Dispatcher::new(registry, setup.store()).unwrap());
//!     // ... dispatch the calls, the providers writing to setup.dir().join("ledger")
//!     # let _ = dispatcher;
//! }
//!
//! fn ledger(dir: &Path) -> Vec<String> {
//!     std::fs::read_to_string(dir.join("ledger")).unwrap_or_default().lines().map(str::to_owned).collect()
//! }
//!
//! #[test]
//! fn a_transfer_survives_every_crash() {
//!     CrashTest::new(transfer).effects(ledger).run().assert_held();
//! }
//! ```
//!
//! The test runs its own binary again as the workers (the test's name, which libtest gives
//! its thread, selects it; [`CrashTest::test_name`] overrides it). A program of its own whose
//! `main` runs a crash test (what `idem crashtest PROGRAM` runs) is run again as it is.
//! `IDEM_CRASHTEST_POINT=7` runs point 7 alone, to replay it.

mod report;
mod worker;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::store::layer::Layer;
use idem_core::store::sqlite::SqliteStore;
use idem_core::{ListFilter, Outcome, RecordState, StateKind, Store, ToolClass};
use serde_json::{Value, json};

pub use report::{PointVerdict, Report, Verdict};
use worker::{BodyPoints, Points, StorePoints};

use crate::approval::{APPROVAL_STEP, GRANT_STEP};
use crate::dispatch::Dispatcher;

/// The environment variable that tells a worker its role (`survey`, `kill`, `resume`).
const ROLE: &str = "IDEM_CRASHTEST";
/// The point a killed worker stops at.
const AT: &str = "IDEM_CRASHTEST_AT";
/// The folder of the worker's store and ledger.
const DIR: &str = "IDEM_CRASHTEST_DIR";
/// The point to run alone, to replay it.
pub const REPLAY: &str = "IDEM_CRASHTEST_POINT";
/// What a worker's line of facts starts with on its standard output.
const FACTS: &str = "idem-crashtest-facts: ";
/// The file a killed worker writes its point's label to before it dies.
const KILLED_AT: &str = "killed-at";
/// The longest a worker may take; one that takes longer is killed and reported.
const WORKER_DEADLINE: Duration = Duration::from_secs(120);

type Scenario = Box<dyn Fn(Setup) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A crash test of a scenario (see the module docs).
pub struct CrashTest {
    scenario: Scenario,
    effects: fn(&Path) -> Vec<String>,
    test_name: Option<String>,
    replay: Option<usize>,
}

/// What a scenario is given: its own store and folder, and the worker's instruments.
pub struct Setup {
    dir: PathBuf,
    store: Arc<dyn Store>,
    points: Arc<Points>,
    dispatcher: Arc<Mutex<Option<Dispatcher>>>,
}

impl Setup {
    /// The folder of this run's store and of your providers' ledger (a fresh one per run).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store to build the dispatcher over: a SQLite file in [`Setup::dir`], counting the
    /// worker's points. In the worker that resumes, the dead worker's leases have ended, as
    /// they would have by the time someone restarts the agent.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The dispatcher with the worker's points around each body (an [`Execution`] of the
    /// harness's, which replaces one the dispatcher had); dispatch through what it returns.
    ///
    /// [`Execution`]: crate::dispatch::Execution
    pub fn instrument(&self, dispatcher: Dispatcher) -> Dispatcher {
        let dispatcher = dispatcher.with_execution(Arc::new(BodyPoints(self.points.clone())));
        *self.dispatcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(dispatcher.clone());
        dispatcher
    }
}

impl CrashTest {
    /// A crash test of `scenario`.
    pub fn new<F, Fut>(scenario: F) -> Self
    where
        F: Fn(Setup) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        CrashTest {
            scenario: Box::new(move |setup| Box::pin(scenario(setup))),
            effects: |_| Vec::new(),
            test_name: None,
            replay: None,
        }
    }

    /// Run point `at` alone, to replay it (as `IDEM_CRASHTEST_POINT=<at>` does).
    pub fn replay(mut self, at: usize) -> Self {
        self.replay = Some(at);
        self
    }

    /// How to read your providers' ledger back from a run's folder: one line per effect as
    /// applied (an effect applied twice is there twice).
    pub fn effects(mut self, effects: fn(&Path) -> Vec<String>) -> Self {
        self.effects = effects;
        self
    }

    /// The name libtest knows the test by, when its thread's name is not it.
    pub fn test_name(mut self, name: impl Into<String>) -> Self {
        self.test_name = Some(name.into());
        self
    }

    /// Run the test: in the test's process, every point and its verdict; in a worker (this
    /// binary run again by the test), the worker's role, after which the process exits.
    pub fn run(self) -> Report {
        // The workers start a runtime of their own, which cannot be done inside another.
        if tokio::runtime::Handle::try_current().is_ok() {
            return Report::failed(
                "a crash test runs from a plain `#[test]` (or `fn main`), not inside an async runtime such as `#[tokio::test]`: its workers start their own",
            );
        }
        if let Ok(role) = std::env::var(ROLE) {
            self.work(&role);
        }
        // A test is run again by its name, which libtest gives its thread; a program of its
        // own (`fn main`, run by `idem crashtest`) is run again as it is.
        let name = match (&self.test_name, std::thread::current().name()) {
            (Some(name), _) => name.clone(),
            (None, Some("main")) => String::new(),
            (None, Some(name)) => name.to_owned(),
            (None, None) => {
                return Report::failed(
                    "this thread has no name to run the test again by: give the test's name with `CrashTest::test_name`",
                );
            }
        };
        let root = scratch(if name.is_empty() { "main" } else { &name });
        let mut report = self.drive(&name, &root);
        match report.held() {
            true => {
                let _ = std::fs::remove_dir_all(&root);
            }
            false => report.kept = Some(root),
        }
        report
    }

    /// The test's side: the survey, then each point killed and resumed.
    fn drive(&self, name: &str, root: &Path) -> Report {
        let survey_dir = root.join("survey");
        let survey = match self.worker(name, "survey", None, &survey_dir) {
            Ok(Ran::Finished(facts)) => facts,
            Ok(Ran::Killed) => return Report::failed("the survey worker was killed"),
            Err(why) => return Report::failed(&format!("the survey did not run: {why}")),
        };
        let baseline = (self.effects)(&survey_dir);
        let labels = strings(&survey["points"]);
        if labels.is_empty() {
            return Report::failed(
                "the survey reached no point: does the scenario dispatch through `setup.instrument(dispatcher)` over `setup.store()`?",
            );
        }
        let mut report = Report::new(labels.clone(), baseline.clone());
        let only = match (self.replay, std::env::var(REPLAY).ok()) {
            (Some(at), _) => Some(at),
            (None, None) => None,
            (None, Some(text)) => match text.trim().parse() {
                Ok(at) => Some(at),
                Err(_) => {
                    return Report::failed(&format!(
                        "{REPLAY}={text:?} is not a point's number (0 to {})",
                        labels.len() - 1
                    ));
                }
            },
        };
        if let Some(at) = only
            && at >= labels.len()
        {
            return Report::failed(&format!(
                "the scenario has no point {at}: the survey reached {} (0 to {})",
                labels.len(),
                labels.len() - 1
            ));
        }
        for (at, label) in labels.iter().enumerate() {
            if only.is_some_and(|o| o != at) {
                continue;
            }
            let dir = root.join(format!("point-{at}"));
            let verdict = self.point(name, at, label, &dir, &baseline);
            report.push(PointVerdict::new(at, label.clone(), verdict));
        }
        report
    }

    /// One point: a worker killed there, one that resumes, the ledger judged.
    fn point(
        &self,
        name: &str,
        at: usize,
        label: &str,
        dir: &Path,
        baseline: &[String],
    ) -> Verdict {
        match self.worker(name, "kill", Some(at), dir) {
            Ok(Ran::Killed) => {}
            Ok(Ran::Finished(_)) => return Verdict::NotReached,
            Err(why) => return Verdict::Failed(why),
        }
        let reached = std::fs::read_to_string(dir.join(KILLED_AT)).unwrap_or_default();
        if reached != label {
            return Verdict::Failed(format!(
                "the killed worker's point {at} was `{reached}`, the survey's `{label}`: the scenario's points vary from run to run"
            ));
        }
        let facts = match self.worker(name, "resume", None, dir) {
            Ok(Ran::Finished(facts)) => facts,
            Ok(Ran::Killed) => return Verdict::Failed("the resuming worker was killed".into()),
            Err(why) => return Verdict::Failed(why),
        };
        let effects = (self.effects)(dir);
        report::judge(baseline, &effects, &facts)
    }

    /// Run this test's binary again as a worker of `role`.
    fn worker(&self, name: &str, role: &str, at: Option<usize>, dir: &Path) -> Result<Ran, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("no test binary: {e}"))?;
        let mut command = Command::new(exe);
        match name.is_empty() {
            false => command.args([name, "--exact", "--nocapture", "--test-threads=1"]),
            // A program of its own: run again with its own arguments.
            true => command.args(std::env::args_os().skip(1)),
        };
        command.env(ROLE, role).env(DIR, dir).env_remove(REPLAY);
        // To files, never pipes: a chatty worker cannot block on a full pipe, and a process
        // it started cannot hold the test waiting for the pipe to close.
        let out = dir.join(format!("{role}.out"));
        let err = dir.join(format!("{role}.err"));
        let file = |path: &Path| {
            std::fs::File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        command
            .stdout(Stdio::from(file(&out)?))
            .stderr(Stdio::from(file(&err)?));
        if let Some(at) = at {
            command.env(AT, at.to_string());
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() > WORKER_DEADLINE => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "the {role} worker took longer than {WORKER_DEADLINE:?}"
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("the {role} worker could not be waited for: {e}")),
            }
        };
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(libc::SIGKILL) {
            return Ok(Ran::Killed);
        }
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        let facts = stdout
            .lines()
            .find_map(|line| line.find(FACTS).map(|i| &line[i + FACTS.len()..]))
            .and_then(|text| serde_json::from_str(text).ok());
        match (status.success(), facts) {
            (true, Some(facts)) => Ok(Ran::Finished(facts)),
            _ => Err(format!(
                "the {role} worker ended with {status} and no facts (its output: {}): {}",
                err.display(),
                tail(&std::fs::read_to_string(&err).unwrap_or_default())
            )),
        }
    }

    /// The worker's side: run the scenario in `role`, print what the test needs, exit.
    fn work(&self, role: &str) -> ! {
        let done = self.work_as(role);
        match done {
            Ok(facts) => {
                println!("{FACTS}{facts}");
                std::process::exit(0)
            }
            Err(why) => {
                eprintln!("idem crash test worker ({role}): {why}");
                std::process::exit(3)
            }
        }
    }

    fn work_as(&self, role: &str) -> Result<Value, String> {
        let dir = PathBuf::from(std::env::var(DIR).map_err(|_| format!("{DIR} is not set"))?);
        let kill_at = match role {
            "kill" => Some((
                std::env::var(AT)
                    .ok()
                    .and_then(|a| a.parse().ok())
                    .ok_or_else(|| format!("{AT} is not a point"))?,
                dir.join(KILLED_AT),
            )),
            _ => None,
        };
        let points = Arc::new(Points::new(kill_at));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("no runtime: {e}"))?;
        runtime.block_on(async {
            let sqlite = SqliteStore::open(dir.join("records.db")).map_err(|e| e.to_string())?;
            if role == "resume" {
                end_leases(&sqlite).await?;
            }
            let store: Arc<dyn Store> = Arc::new(StorePoints(points.clone()).layer(sqlite));
            let dispatcher = Arc::new(Mutex::new(None));
            let setup = Setup {
                dir: dir.clone(),
                store: store.clone(),
                points: points.clone(),
                dispatcher: dispatcher.clone(),
            };
            (self.scenario)(setup).await;
            let instrumented = dispatcher.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let Some(instrumented) = instrumented else {
                return Err("the scenario never called `setup.instrument(dispatcher)`".to_owned());
            };
            let (unknown, unapproved) = settled(&*store, &instrumented).await?;
            Ok(json!({
                "points": points.labels(),
                "unknown": unknown,
                "unapproved": unapproved,
            }))
        })
    }
}

/// How a worker ended.
enum Ran {
    /// It finished the scenario, with its facts.
    Finished(Value),
    /// It was killed (SIGKILL) at its point.
    Killed,
}

/// After a worker resumed: how many calls are left for a person (Unknown, cases included),
/// and the `irreversible` calls recorded as applied without the approval that ran them.
async fn settled(
    store: &dyn Store,
    dispatcher: &Dispatcher,
) -> Result<(usize, Vec<String>), String> {
    let list = |state| ListFilter {
        state: Some(state),
        tenant: None,
        limit: 100_000,
        after: None,
    };
    let unknown = store
        .list(list(StateKind::Unknown))
        .await
        .map_err(|e| e.to_string())?
        .len();
    let completed = store
        .list(list(StateKind::Completed))
        .await
        .map_err(|e| e.to_string())?;
    let registry = dispatcher.registry();
    let unapproved = completed
        .iter()
        .filter(|r| {
            registry
                .get(&r.tool)
                .is_some_and(|t| t.class == ToolClass::Irreversible)
        })
        .filter(|r| {
            matches!(
                &r.state,
                RecordState::Completed {
                    outcome: Outcome::Success(_),
                    ..
                }
            )
        })
        // An approval, or a person's standing grant, authorised it.
        .filter(|r| {
            !r.steps
                .iter()
                .any(|s| s.step == APPROVAL_STEP || s.step == GRANT_STEP)
        })
        .map(|r| r.tool.clone())
        .collect();
    Ok((unknown, unapproved))
}

/// The dead worker's leases ended, as they have by the time someone restarts the agent:
/// what the store does when a lease runs out, done now, without moving any clock (records'
/// TTLs, approvals and windows keep their time).
async fn end_leases(store: &dyn Store) -> Result<(), String> {
    let held = store
        .list(ListFilter {
            state: Some(StateKind::InProgress),
            tenant: None,
            limit: 100_000,
            after: None,
        })
        .await
        .map_err(|e| e.to_string())?;
    for record in held {
        // A lease that ended already cannot be renewed, and needs nothing.
        let _ = store.renew(&record.key, record.fence, Duration::ZERO).await;
    }
    Ok(())
}

/// A fresh folder for one test's runs, never one an earlier run left.
fn scratch(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "idem-crashtest-{safe}-{}-{n}-{nanos}",
        std::process::id()
    ))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The last lines of a worker's standard error, for a report.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}
