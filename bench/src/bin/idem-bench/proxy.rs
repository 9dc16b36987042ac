//! The proxy row (issue #14): calls per second from one rmcp client over stdio to a bare
//! upstream (`mcp-upstream`, a plain rmcp server with the bench's no-op tools) and to the
//! same upstream behind `idem mcp-proxy`, whose configuration classifies the tools
//! (`bench/proxy/proxy.toml`); every write through the proxy carries a fresh key and is a
//! first execution, recorded in a fresh SQLite file (`--store`, synchronous FULL). A second
//! baseline, the same upstream behind a plain forwarding rmcp proxy (`mcp-forward`), splits
//! the gap into the second hop's share and idem's. Each contender has its own processes;
//! they take turns as in [`crate::turns`]. Client, proxy and upstream are separate
//! processes on a 2-core machine shared with builds, so the ratios carry process-scheduling
//! noise the in-process mcp row does not; the CPU time is not reported (this process's
//! would be the client's alone).
//!
//! `idem-bench proxy <idem-binary> <proxy.toml> <dir> [rounds] [calls per batch] [concurrency]`

use std::path::{Path, PathBuf};

use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use tokio::process::Command;

use crate::mcp::remove_database;
use crate::turns::{Contender, Cpu, numbers, take_turns};

/// The proxies' databases, in the run's directory.
const STORES: [&str; 2] = ["proxy-read.db", "proxy-write.db"];

pub fn run(args: &[String]) -> Result<(), String> {
    let [idem, config, dir, ..] = args else {
        return Err(
            "usage: proxy <idem-binary> <proxy.toml> <dir> [rounds] [calls per batch] [concurrency]"
                .into(),
        );
    };
    let [rounds, calls, concurrency] = numbers(
        args,
        3,
        [(100, "rounds"), (20, "calls per batch"), (1, "concurrency")],
    )?;
    let upstream = bench_binary("mcp-upstream")?;
    let forward = bench_binary("mcp-forward")?;
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stores = STORES.map(|name| dir.join(name));
    for store in &stores {
        remove_database(store);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let ran = rt.block_on(async {
        let bare = || Command::new(&upstream);
        let forwarded = || {
            let mut command = Command::new(&forward);
            command.arg("--").arg(&upstream);
            command
        };
        let proxied = |store: &PathBuf| proxy_command(idem, config, store, &upstream);
        let write = "noop_idempotent_write";
        let contenders = vec![
            contender("upstream/read", &[], "noop_read", false, bare()).await?,
            contender("upstream", &[], write, true, bare()).await?,
            contender("forward/read", &[0], "noop_read", false, forwarded()).await?,
            contender("forward", &[1], write, true, forwarded()).await?,
            contender(
                "proxy/read",
                &[0, 2],
                "noop_read",
                false,
                proxied(&stores[0]),
            )
            .await?,
            contender(
                "proxy/idempotent_write/sqlite-full",
                &[1, 3],
                write,
                true,
                proxied(&stores[1]),
            )
            .await?,
        ];
        take_turns(
            "proxy",
            &contenders,
            rounds,
            calls,
            concurrency,
            Cpu::ClientOnly,
        )
        .await?;
        for c in contenders {
            let _ = c.client.cancel().await;
        }
        Ok(())
    });
    drop(rt);
    for store in &stores {
        remove_database(store);
    }
    ran
}

/// `idem mcp-proxy` with the configuration `config` and the store `store` in front of
/// `upstream`, logging warnings only.
pub(crate) fn proxy_command(
    idem: impl AsRef<std::ffi::OsStr>,
    config: impl AsRef<std::ffi::OsStr>,
    store: impl AsRef<std::ffi::OsStr>,
    upstream: &Path,
) -> Command {
    let mut command = Command::new(idem);
    command
        .arg("mcp-proxy")
        .arg("--config")
        .arg(config)
        .arg("--store")
        .arg(store)
        .arg("--")
        .arg(upstream)
        .env("IDEM_LOG", "warn");
    command
}

/// The bench's binary `name`, beside this one.
pub(crate) fn bench_binary(name: &str) -> Result<PathBuf, String> {
    let path = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name(name);
    match path.exists() {
        true => Ok(path),
        false => Err(format!(
            "{} is missing: build the bench's binaries first",
            path.display()
        )),
    }
}

/// A client of the server `command` starts, after the handshake.
async fn contender(
    name: &'static str,
    baselines: &[usize],
    tool: &'static str,
    keyed: bool,
    command: Command,
) -> Result<Contender, String> {
    Ok(Contender {
        name,
        baselines: baselines.to_vec(),
        tool,
        keyed,
        first_execution: keyed && name.starts_with("proxy/"),
        client: connect(name, command).await?,
        _serving: None,
    })
}

/// A client of the server `command` starts as a child process, after the handshake.
pub(crate) async fn connect(
    name: &str,
    command: Command,
) -> Result<RunningService<RoleClient, ()>, String> {
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    let (transport, _) = TokioChildProcess::builder(command)
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    ().serve(transport)
        .await
        .map_err(|e| format!("{name}: the handshake with {program} failed: {e}"))
}
