//! The mcp row (issue #14): calls per second from one rmcp client through idem's MCP server,
//! against a plain rmcp server serving the same no-op tools ([`idem_bench::mcp::Plain`]:
//! same names, same arguments, same structured output), over the same transport with the
//! same client. Each idem contender's baseline is the plain server answering the same
//! request (a read without `_meta`, a write with a fresh key in `_meta`, which the plain
//! server ignores); see [`crate::turns`] for how they take turns.
//!
//! The transport is an in-process pipe (`tokio::io::duplex`): the client and every server
//! run on one current-thread runtime, so a batch's time is what the client, the transport
//! and the server spend on its calls, and neither process scheduling nor a second core that
//! a concurrent build happens to leave idle favours one contender. rmcp frames and parses
//! every message as it would over stdio (newline-delimited JSON over `AsyncRead` and
//! `AsyncWrite`); the proxy row measures stdio between processes.
//!
//! `idem-bench mcp <dir> [rounds] [calls per batch] [concurrency]`: one JSON line per
//! contender. `<dir>` holds the SQLite contenders' databases (deleted before and after).

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use idem::mcp::McpServer;
use idem::{MemoryStore, SqliteStore, Store, store::Synchronous};
use idem_bench::mcp::Plain;
use idem_bench::{TENANT, dispatcher};
use rmcp::model::{InitializeResult, ProtocolVersion};
use rmcp::service::{RunningService, serve_directly};
use rmcp::{ClientHandler, RoleClient, RoleServer, Service};

use crate::turns::{Contender, Cpu, call, numbers, take_turns};

/// What a contender's server is.
enum Serving<'p> {
    /// The plain rmcp server.
    Plain,
    /// idem's MCP server on a memory store with room for this many records.
    Memory(usize),
    /// idem's MCP server on a fresh SQLite database at this path, at this `synchronous`.
    Sqlite(&'p Path, Synchronous),
}

/// The SQLite contenders' databases, in the run's directory.
const SQLITE_FILES: [&str; 2] = ["mcp-full.db", "mcp-normal.db"];

pub fn run(args: &[String]) -> Result<(), String> {
    let Some(dir) = args.first() else {
        return Err("usage: mcp <dir> [rounds] [calls per batch] [concurrency]".into());
    };
    let [rounds, calls, concurrency] = numbers(
        args,
        1,
        [(300, "rounds"), (20, "calls per batch"), (1, "concurrency")],
    )?;
    in_dir(Path::new(dir), async |dir| {
        let contenders = contenders(dir, (rounds + 1) * calls)?;
        take_turns("mcp", &contenders, rounds, calls, concurrency, Cpu::Report).await
    })
}

/// `mcp-profile <dir> <contender> [calls] [concurrency]`: one contender's calls and nothing
/// else, for callgrind:
/// `valgrind --tool=callgrind target/release/idem-bench mcp-profile target/results idem/read 3000`
pub fn profile(args: &[String]) -> Result<(), String> {
    let [dir, name, ..] = args else {
        return Err("usage: mcp-profile <dir> <contender> [calls] [concurrency]".into());
    };
    let [calls, concurrency] = numbers(args, 2, [(3000, "calls"), (1, "concurrency")])?;
    in_dir(Path::new(dir), async |dir| {
        let all = contenders(dir, calls + 1)?;
        let names: Vec<_> = all.iter().map(|c| c.name).collect();
        let c = all
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| format!("unknown contender {name:?} (expected one of: {names:?})"))?;
        // What the contender answers, as the client read it (to compare sizes).
        let sample = call(c.client.peer(), c.tool, c.keyed.then_some("sample")).await?;
        let sample = serde_json::to_string(&sample).map_err(|e| e.to_string())?;
        eprintln!("{name} answers: {sample}");
        let took = c.batch("p", calls, concurrency).await?;
        eprintln!(
            "{name}: {calls} calls in {:?} ({:?} CPU)",
            took.wall, took.cpu
        );
        Ok(())
    })
}

/// Run `body` on a current-thread runtime with `dir` for the databases, removed after.
fn in_dir(dir: &Path, body: impl AsyncFnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let ran = rt.block_on(body(dir));
    drop(rt);
    for file in SQLITE_FILES {
        remove_database(&dir.join(file));
    }
    ran
}

/// Every contender, connected; room in the memory stores for `records` records, so they do
/// not grow mid-round.
fn contenders(dir: &Path, records: usize) -> Result<Vec<Contender>, String> {
    let [full, normal] = SQLITE_FILES.map(|name| dir.join(name));
    let write = "noop_idempotent_write";
    Ok(vec![
        contender("rmcp/read", None, "noop_read", false, Serving::Plain)?,
        contender("rmcp", None, write, true, Serving::Plain)?,
        contender(
            "idem/read",
            Some(0),
            "noop_read",
            false,
            Serving::Memory(records),
        )?,
        contender(
            "idem/idempotent_write/memory",
            Some(1),
            write,
            true,
            Serving::Memory(records),
        )?,
        contender(
            "idem/idempotent_write/sqlite-full",
            Some(1),
            write,
            true,
            Serving::Sqlite(&full, Synchronous::Full),
        )?,
        contender(
            "idem/idempotent_write/sqlite-normal",
            Some(1),
            write,
            true,
            Serving::Sqlite(&normal, Synchronous::Normal),
        )?,
    ])
}

/// A contender served as `serving`, connected.
fn contender(
    name: &'static str,
    baseline: Option<usize>,
    tool: &'static str,
    keyed: bool,
    serving: Serving<'_>,
) -> Result<Contender, String> {
    let (client, server) = match serving {
        Serving::Plain => connect(Plain::new()),
        Serving::Memory(records) => idem_server(Arc::new(
            MemoryStore::new().with_capacity(4 * records + 4096),
        ))?,
        Serving::Sqlite(path, synchronous) => {
            remove_database(path);
            let store = SqliteStore::open(path)
                .and_then(|s| s.with_synchronous(synchronous))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            idem_server(Arc::new(store))?
        }
    };
    Ok(Contender {
        name,
        baselines: baseline.into_iter().collect(),
        tool,
        keyed,
        first_execution: keyed && !matches!(serving, Serving::Plain),
        client,
        _serving: Some(server),
    })
}

/// A client connected to a server, and the server's half.
type Connected = (RunningService<RoleClient, ()>, Box<dyn Any>);

/// idem's MCP server over the bench's dispatcher on `store`, connected.
fn idem_server(store: Arc<dyn Store>) -> Result<Connected, String> {
    let server = McpServer::new(dispatcher(store), TENANT).map_err(|e| e.to_string())?;
    Ok(connect(server))
}

/// A client connected to `server` over an in-process pipe, as tests/mcp.rs connects them:
/// both sides skip the handshake, the client taking the server to speak the 2026-07-28
/// revision.
fn connect<S: Service<RoleServer> + 'static>(server: S) -> Connected {
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    let client_info = ClientHandler::get_info(&());
    let serving = serve_directly::<RoleServer, _, _, _, _>(server, server_side, Some(client_info));
    let mut peer = InitializeResult::default();
    peer.protocol_version = ProtocolVersion::V_2026_07_28;
    let client = serve_directly::<RoleClient, _, _, _, _>((), client_side, Some(peer.into()));
    (client, Box::new(serving))
}

/// Delete a SQLite database and its WAL files, if there.
pub fn remove_database(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
