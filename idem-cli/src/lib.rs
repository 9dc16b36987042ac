#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cli;
pub mod env;
mod exit;
mod keys;
mod notify;
mod operate;
mod present;
#[cfg(feature = "mcp-proxy")]
mod serve;
mod store;
mod ui;

#[cfg(feature = "mcp-proxy")]
use std::net::SocketAddr;
#[cfg(feature = "mcp-proxy")]
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

#[cfg(feature = "mcp-proxy")]
use clap::Args;
use clap::{Parser, Subcommand};
#[cfg(feature = "mcp-proxy")]
use idem_mcp::proxy::{McpProxy, ProxyConfig, Upstream, UpstreamSpec, starting_config};

use exit::{EXIT_CODES, Exit, Failure};

/// The log filter unless `IDEM_LOG` sets one. The store drivers' own warnings about a lost
/// connection are left out: the command's error names the store and what to do.
const DEFAULT_LOG: &str = "info,rmcp=warn,deadpool_postgres=error,redis=error";

#[derive(Parser)]
#[command(
    name = "idem",
    version,
    about = "Exactly-once effects for the tools LLM agents call: the operator's commands.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The records of calls: list, show, resolve an unknown outcome, release, purge.
    #[command(after_help = EXIT_CODES)]
    Records(cli::RecordsArgs),
    /// Calls waiting for a person's approval (every irreversible call, and those a tool's
    /// approval rule selects): list, show, approve, deny.
    #[command(after_help = EXIT_CODES)]
    Approvals(cli::ApprovalsArgs),
    /// Calls sent to a person (a tool's `escalate`): list, show, and decide one (run it
    /// again, resolve it, or have its run undone).
    #[command(after_help = EXIT_CODES)]
    Cases(cli::CasesArgs),
    /// A run's account (every call of it and what became of it), and undoing a run.
    #[command(after_help = EXIT_CODES)]
    Runs(cli::RunsArgs),
    /// The decision log: every decision a person made, a hash chain in the store; list it,
    /// verify it link by link, export it signed.
    #[command(after_help = EXIT_CODES)]
    Audit(cli::AuditArgs),
    /// Standing grants: a tool's calls for a tenant, a run or a session, for a time, within
    /// argument bounds, run without asking; add, list, revoke.
    #[command(after_help = EXIT_CODES)]
    Grants(cli::GrantsArgs),
    /// Run a crash test (`idem::testing`): a scenario program, or a test binary and a test's
    /// name; exits 0 only if every point held.
    #[command(after_help = EXIT_CODES)]
    Crashtest(cli::CrashtestArgs),
    /// Counts by state, tool and tenant, the oldest unknown outcome, pending approvals.
    #[command(after_help = EXIT_CODES)]
    Stats(cli::StatsArgs),
    /// Serve the approval inbox: a web page for the same decisions, behind a token.
    #[command(after_help = ui::HELP)]
    Ui(ui::UiArgs),
    /// Send each call pending approval to Slack, Teams or a webhook, once, with Approve /
    /// Deny buttons; serve their signed callbacks and decide as the button showed.
    #[command(after_help = notify::HELP)]
    Notify(notify::NotifyArgs),
    /// Serve an upstream MCP server's tools, each under the policy of the class the
    /// configuration gives it: a call re-sent with the same key is replayed, never run
    /// twice.
    #[cfg(feature = "mcp-proxy")]
    #[command(after_help = PROXY_HELP)]
    McpProxy(ProxyArgs),
}

#[cfg(feature = "mcp-proxy")]
const PROXY_HELP: &str = "\
Examples:
  idem mcp-proxy init --output proxy.toml -- npx -y @modelcontextprotocol/server-memory
  idem mcp-proxy --config proxy.toml -- npx -y @modelcontextprotocol/server-memory
  idem mcp-proxy --config proxy.toml --http 127.0.0.1:8080 --upstream-url http://127.0.0.1:8000/mcp

A client passes its key in each call's `_meta`: {\"io.idem/idempotency-key\": \"...\"}.
Tools the configuration does not classify, or marks `unreviewed = true`, are not served.

Environment:
  IDEM_PROXY_SECRET_KEY     hex key sealing secret arguments (tools with `secret`)
  IDEM_PROXY_APPROVAL_KEYS  id:hex,... verifying approvals (irreversible tools)
  IDEM_PROXY_TOKENS         token=tenant,... bearer tokens accepted with --http
  IDEM_LOG                  log filter on stderr (default: info)";

#[cfg(feature = "mcp-proxy")]
#[derive(Args)]
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
struct ProxyArgs {
    #[command(subcommand)]
    action: Option<ProxyAction>,
    /// The configuration: the class and policy of each upstream tool (`init` writes one).
    #[arg(long, value_name = "FILE", required = true)]
    config: Option<PathBuf>,
    /// Where records live: a SQLite file's path, `redis://...`, `redis-cluster://HOST:PORT,...`,
    /// `postgres://...`, or `memory` (gone when the proxy stops)
    /// [default: the configuration's `store`, else idem-proxy.db]
    #[arg(long, value_name = "PATH|URL")]
    store: Option<String>,
    /// Serve over Streamable HTTP at this address (endpoint `/mcp`) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// With `--http`: a `Host` header to accept besides localhost (repeat for more).
    #[arg(long = "allow-host", value_name = "HOST", requires = "http")]
    allow_hosts: Vec<String>,
    /// Reach the upstream at this Streamable HTTP URL instead of starting it.
    #[arg(long, value_name = "URL", conflicts_with = "upstream")]
    upstream_url: Option<String>,
    /// The upstream server's command and arguments, after `--` [default: the
    /// configuration's `[upstream]`].
    #[arg(last = true, value_name = "UPSTREAM")]
    upstream: Vec<String>,
}

#[cfg(feature = "mcp-proxy")]
#[derive(Subcommand)]
enum ProxyAction {
    /// Write a starting configuration listing every upstream tool, its class suggested from
    /// its (untrusted) annotations and marked `unreviewed = true`.
    Init(InitArgs),
}

#[cfg(feature = "mcp-proxy")]
#[derive(Args)]
struct InitArgs {
    /// Write to this file (never over an existing one) instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Reach the upstream at this Streamable HTTP URL instead of starting it.
    #[arg(long, value_name = "URL", conflicts_with = "upstream")]
    upstream_url: Option<String>,
    /// How long to wait for the upstream's handshake and tool list, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    timeout_secs: u64,
    /// The upstream server's command and arguments, after `--`.
    #[arg(
        last = true,
        value_name = "UPSTREAM",
        required_unless_present = "upstream_url"
    )]
    upstream: Vec<String>,
}

/// Run the `idem` command line on this process's arguments, as the binary does.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    logging();
    // A proxy over stdio serves one client, whose messages it reads, forwards and answers in
    // turn: on one thread each step is a function call, where worker threads would hand every
    // message from one to the other (a wake-up and a context switch each, most of its time at
    // one call at a time). Everything else, the HTTP proxy included, runs on worker threads.
    let mut builder = match serves_one_client(&cli.command) {
        true => tokio::runtime::Builder::new_current_thread(),
        false => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    let outcome = runtime.block_on(run(cli.command));
    // An upstream child is already closed; don't wait for rmcp's other tasks.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", present::visible_line(&failure.message));
            ExitCode::from(failure.code as u8)
        }
    }
}

/// Whether `command` is `idem mcp-proxy` over stdio (one client).
fn serves_one_client(command: &Command) -> bool {
    #[cfg(feature = "mcp-proxy")]
    if let Command::McpProxy(args) = command {
        return args.http.is_none() && args.action.is_none();
    }
    let _ = command;
    false
}

async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Records(args) => cli::records(args).await,
        Command::Approvals(args) => cli::approvals(args).await,
        Command::Cases(args) => cli::cases(args).await,
        Command::Crashtest(args) => cli::crashtest(args),
        Command::Runs(args) => cli::runs(args).await,
        Command::Audit(args) => cli::audit(args).await,
        Command::Grants(args) => cli::grants(args).await,
        Command::Stats(args) => cli::stats(args).await,
        Command::Ui(args) => ui::serve(args).await,
        Command::Notify(args) => notify::serve(args).await,
        #[cfg(feature = "mcp-proxy")]
        Command::McpProxy(args) => {
            let ran = match args.action {
                Some(ProxyAction::Init(init_args)) => init(init_args).await,
                None => proxy(args).await,
            };
            ran.map_err(|e| Failure::new(Exit::Failed, e))
        }
    }
}

/// Logs on standard error (standard output is the protocol's), filtered by `IDEM_LOG`.
fn logging() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;
    let default = || Targets::from_str(DEFAULT_LOG).unwrap_or_default();
    let filter = match std::env::var(env::LOG) {
        Err(_) => default(),
        Ok(spec) => Targets::from_str(&spec).unwrap_or_else(|e| {
            eprintln!(
                "warning: {}={spec:?} is not a log filter ({e}); using `info`",
                env::LOG
            );
            default()
        }),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .init();
}

#[cfg(feature = "mcp-proxy")]
/// The upstream given on the command line, if any.
fn upstream_of(command: Vec<String>, url: Option<String>) -> Result<Option<UpstreamSpec>, String> {
    match url {
        Some(url) => UpstreamSpec::url(url)
            .map(Some)
            .map_err(|e| format!("--upstream-url {e}")),
        None => Ok(UpstreamSpec::command(command, Default::default())),
    }
}

#[cfg(feature = "mcp-proxy")]
async fn proxy(args: ProxyArgs) -> Result<(), String> {
    let path = args.config.ok_or("--config FILE is required")?;
    let config = ProxyConfig::load(&path).map_err(|e| e.to_string())?;
    let upstream = upstream_of(args.upstream, args.upstream_url)?;
    let keys = keys::from_env()?;
    let spec = args
        .store
        .or_else(|| config.store.clone())
        .unwrap_or_else(|| store::DEFAULT_STORE.to_owned());
    let (store, described) = store::open(&spec).await?;
    let proxy = McpProxy::start(&config, upstream)
        .await
        .map_err(|e| e.to_string())?;
    let server = match proxy.server(store, keys) {
        Ok(server) => server,
        Err(e) => {
            proxy.upstream().shutdown().await;
            return Err(e.to_string());
        }
    };
    let served: Vec<&str> = proxy.registry().iter().map(|t| t.name()).collect();
    tracing::info!(
        "serving {} tool(s) of `{}` ({}), records in {described}, namespace `{}`",
        served.len(),
        proxy.upstream().spec(),
        served.join(", "),
        config.namespace,
    );
    let served = match args.http {
        None => serve::stdio(server).await,
        Some(addr) => serve::http(server, addr, &args.allow_hosts).await,
    };
    proxy.upstream().shutdown().await;
    served
}

#[cfg(feature = "mcp-proxy")]
async fn init(args: InitArgs) -> Result<(), String> {
    let spec = upstream_of(args.upstream, args.upstream_url)?
        .ok_or("give the upstream's command after `--`, or --upstream-url")?;
    if args.timeout_secs == 0 {
        return Err("--timeout-secs must be more than zero".into());
    }
    if let Some(path) = &args.output
        && path.exists()
    {
        return Err(format!(
            "{} exists: init never writes over a configuration; choose another --output, or delete it",
            path.display()
        ));
    }
    let wait = Duration::from_secs(args.timeout_secs);
    let upstream = Upstream::connect(spec.clone(), wait)
        .await
        .map_err(|e| e.to_string())?;
    let tools = upstream.tools().await;
    upstream.shutdown().await;
    let tools = tools.map_err(|e| e.to_string())?;
    let text = starting_config(Some(&spec), &tools);
    match &args.output {
        None => print!("{text}"),
        Some(path) => {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            file.write_all(text.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            tracing::info!(
                "wrote {} with {} tool(s) of `{spec}`: review each class, then delete its `unreviewed = true`",
                path.display(),
                tools.len()
            );
        }
    }
    Ok(())
}
