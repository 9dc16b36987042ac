//! A Redis Cluster of a test's own: `scripts/redis-cluster` starts three primaries (and, if
//! asked, a replica or more of each) on free ports, in a directory of their own; the helpers
//! read its layout and drive its nodes with `redis-cli`; dropping it stops every node by pid.
//! Only the standard library, so the facade's tests include this file as it is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running cluster.
pub struct Cluster {
    dir: PathBuf,
    /// The nodes' URLs, `redis://127.0.0.1:PORT`.
    pub nodes: Vec<String>,
}

/// A primary, by port, with its first replica's port and the slot ranges it owns.
pub struct Shard {
    pub primary: String,
    pub replica: Option<String>,
    pub slots: Vec<(u32, u32)>,
}

impl Cluster {
    fn script() -> PathBuf {
        // The facade's tests and idem-core's include this file; both sit one level below the
        // workspace root or at it.
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        [
            manifest.join("scripts/redis-cluster"),
            manifest.join("../scripts/redis-cluster"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .expect("scripts/redis-cluster")
    }

    fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
        Command::new("bash")
            .arg(Self::script())
            .args(args)
            .output()
            .expect("scripts/redis-cluster runs")
    }

    /// Start three primaries with `replicas` replicas each, joined and ready.
    pub fn start(replicas: u32) -> Cluster {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("idem-test-cluster-{}-{nanos}", std::process::id()));
        let replicas = replicas.to_string();
        let out = Self::run(&["start".as_ref(), dir.as_os_str(), replicas.as_ref()]);
        assert!(
            out.status.success(),
            "the cluster starts: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let nodes = String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(',')
            .map(str::to_owned)
            .collect();
        Cluster { dir, nodes }
    }

    /// The port of a node's URL.
    pub fn port(url: &str) -> &str {
        url.rsplit(':').next().unwrap_or(url)
    }

    /// The pid of the node on `port`.
    pub fn pid(&self, port: &str) -> u32 {
        let file = self.dir.join(port).join("redis.pid");
        std::fs::read_to_string(&file)
            .expect("the node's pid file")
            .trim()
            .parse()
            .expect("a pid")
    }

    /// Start the node on `port` again after it was killed: it rejoins with its cluster
    /// configuration and no data.
    pub fn restart(&self, port: &str) {
        let out = Self::run(&["restart".as_ref(), self.dir.as_os_str(), port.as_ref()]);
        assert!(out.status.success(), "the node on {port} starts again");
    }

    /// What `redis-cli` prints for `args` sent to the node on `port` (empty if it is down).
    pub fn cli(port: &str, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", port])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).replace('\r', ""))
            .unwrap_or_default()
    }

    /// The primaries, as the first node sees them (`CLUSTER NODES`).
    pub fn shards(&self) -> Vec<Shard> {
        let table = Self::cli(Self::port(&self.nodes[0]), &["cluster", "nodes"]);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let port = |row: &Vec<&str>| {
            let address = row[1].split('@').next().unwrap_or_default();
            Self::port(address).to_owned()
        };
        rows.iter()
            .filter(|row| row.len() > 8 && row[2].contains("master"))
            .map(|primary| Shard {
                primary: port(primary),
                replica: rows
                    .iter()
                    .find(|row| row.len() > 3 && row[2].contains("slave") && row[3] == primary[0])
                    .map(port),
                slots: primary[8..]
                    .iter()
                    .filter_map(|range| {
                        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                        Some((lo.parse().ok()?, hi.parse().ok()?))
                    })
                    .collect(),
            })
            .collect()
    }

    /// The index in `shards` of the primary that owns the Redis key `name`.
    pub fn owner(shards: &[Shard], name: &str) -> usize {
        let slot: u32 = Self::cli(&shards[0].primary, &["cluster", "keyslot", name])
            .trim()
            .parse()
            .expect("a slot");
        shards
            .iter()
            .position(|s| s.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi))
            .expect("a primary owns every slot")
    }

    /// Wait until the node on `port` reports the line `field` in `INFO replication` (a
    /// safety net of 30 s, not a measurement).
    pub fn await_replication(port: &str, field: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !Self::cli(port, &["info", "replication"])
            .lines()
            .any(|l| l == field)
        {
            assert!(
                Instant::now() < deadline,
                "the node on {port} never reported {field}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Self::run(&["stop".as_ref(), self.dir.as_os_str()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
