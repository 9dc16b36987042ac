//! This test binary run again as a child process, for the proofs that need processes to die
//! or race: the child runs only one of its tests, told what to do by a JSON spec in an
//! environment variable, and prints its results as lines the parent reads back.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use idem::prelude::{DispatchError, Dispatched};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A running child.
#[derive(Debug)]
pub struct Child {
    name: String,
    process: std::process::Child,
    out: PathBuf,
    err: PathBuf,
}

/// A child that exited, and everything it wrote.
#[derive(Debug)]
pub struct Exited {
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Child {
    /// Start this binary's test `test` alone, with `spec` as JSON in the environment variable
    /// `env`; its output goes to `{name}.out` and `{name}.err` in `dir`.
    pub fn spawn(
        test: &str,
        env: &str,
        spec: &impl Serialize,
        dir: &Path,
        name: &str,
    ) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| format!("the test binary: {e}"))?;
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        let spec = serde_json::to_string(spec).map_err(|e| format!("the spec: {e}"))?;
        let file = |path: &Path| File::create(path).map_err(|e| format!("{}: {e}", path.display()));
        let process = Command::new(exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(env, spec)
            .stdin(Stdio::null())
            .stdout(file(&out)?)
            .stderr(file(&err)?)
            .spawn()
            .map_err(|e| format!("spawn the child {name}: {e}"))?;
        Ok(Child {
            name: name.to_owned(),
            process,
            out,
            err,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.try_wait().expect("wait for a child")
    }

    /// What it has written to its standard error so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Wait until it exits; a child still running after `deadline` is killed and reported as
    /// hung (a safety net, not a measurement).
    pub fn wait(mut self, deadline: Duration) -> Result<Exited, String> {
        let pid = self.pid();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.process.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if started.elapsed() > deadline {
                let _ = self.process.kill();
                let _ = self.process.wait();
                return Err(format!(
                    "child {} ({pid}) hung: still running after {deadline:?}",
                    self.name
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok(Exited {
            pid,
            status,
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err).unwrap_or_default(),
        })
    }
}

impl Exited {
    /// The results it printed with [`report`] under `prefix`.
    pub fn results<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>, String> {
        self.stdout
            .lines()
            .filter_map(|l| l.find(prefix).map(|at| &l[at + prefix.len()..]))
            .map(|l| serde_json::from_str(l).map_err(|e| format!("bad result line {l:?}: {e}")))
            .collect()
    }

    /// Everything it wrote, for a failure message.
    pub fn dump(&self) -> String {
        format!(
            "child {} exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.pid, self.status, self.stdout, self.stderr
        )
    }
}

/// What a child reports of one dispatch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reported {
    /// The child's name for the call.
    pub call: String,
    /// `ok`, or the `DispatchError::code()` of the failure.
    pub code: String,
    /// The record key of a result, or of an Unknown outcome.
    pub key: Option<String>,
    pub deduplicated: bool,
    pub attempts: u32,
    pub output_json: Option<String>,
    pub error: Option<String>,
}

impl Reported {
    /// The report of `result`, the dispatch of the call the child names `call`.
    pub fn of(call: &str, result: &Result<Dispatched, DispatchError>) -> Reported {
        match result {
            Ok(d) => Reported {
                call: call.to_owned(),
                code: "ok".into(),
                key: d.key.as_ref().map(|k| k.as_str().to_owned()),
                deduplicated: d.deduplicated,
                attempts: d.attempts,
                output_json: Some(d.output_json.clone()),
                error: None,
            },
            Err(e) => Reported {
                call: call.to_owned(),
                code: e.code().into(),
                key: match e {
                    DispatchError::OutcomeUnknown { key, .. } => Some(key.as_str().to_owned()),
                    _ => None,
                },
                deduplicated: false,
                attempts: 0,
                output_json: None,
                error: Some(e.to_string()),
            },
        }
    }
}

/// In a child: print `result` as a line the parent finds by `prefix`. On a line of its own,
/// since the test harness may have printed the test's name without one.
pub fn report(prefix: &str, result: &impl Serialize) {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\n{prefix}{}",
        serde_json::to_string(result).expect("a result line")
    )
    .expect("stdout");
    out.flush().expect("stdout");
}
