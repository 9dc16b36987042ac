//! A private `redis-server` for tests that must reconfigure, flush, restart or replicate a
//! server: the shared one is never touched that way.
//!
//! Each server runs on a free port with its own temporary directory, without persistence
//! unless the test asks for it, and is killed (by the child handle this helper spawned) when
//! dropped.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::services::unavailable;

/// How long a server may take to answer its first `PING`.
const START_BUDGET: Duration = Duration::from_secs(10);

/// Whether a test that needs a private server should run: `redis-server` is on the `PATH`.
/// Without it the test prints why it is skipped, unless `IDEM_REQUIRE_SERVICES=1`, which
/// makes a missing binary a failure.
pub fn available(test: &str) -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        unavailable(
            test,
            "`redis-server` is not installed",
            "install `redis-server` to run it",
        );
    }
    found
}

/// A `redis-server` child process on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start a server with these extra arguments (e.g. `["--maxmemory-policy",
    /// "allkeys-lru"]`). Persistence is off unless the arguments turn it on.
    pub async fn start(args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                args: args.clone(),
                dir: tempfile::tempdir().expect("a temporary directory"),
            };
            if server.spawn().await {
                return server;
            }
        }
        panic!("could not start a private redis-server");
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A plain connection, for the test's own commands.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to the private server")
    }

    /// Kill the server (SIGKILL: no shutdown save) and start it again on the same port with
    /// the same arguments. Without persistence it comes back empty.
    pub async fn restart(&mut self) {
        self.stop();
        assert!(self.spawn().await, "the private redis-server restarts");
    }

    /// Kill the server and wait for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freeze the server (SIGSTOP): it keeps its connections but answers nothing, as a
    /// replica stuck behind a slow disk or a partition does.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Let a frozen server run again (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running server");
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {}", child.id());
    }

    /// Start the process and wait for its first `PONG`; `false` if it exited (e.g. the port
    /// was taken).
    async fn spawn(&mut self) -> bool {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir_path())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn().expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + START_BUDGET;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(_)) = child.try_wait()
            {
                self.child = None;
                return false;
            }
            if self.ping().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop();
        false
    }

    async fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            return false;
        };
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .is_ok()
    }

    fn dir_path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
