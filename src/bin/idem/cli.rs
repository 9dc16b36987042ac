//! `idem records`, `idem approvals` and `idem stats`: the operator's commands, an aligned
//! table for people and `--json` for scripts.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use idem::store::approvals::ApprovalFilter;
use idem::{Approver, Outcome, PurgeFilter, RecordState, StateKind, ToolError};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::exit::{Exit, Failure};
use crate::operate::{self, Operator, RecordQuery};

/// Where the records are, for every operator command.
#[derive(Args, Clone)]
pub struct StoreArgs {
    /// The store: `sqlite:PATH`, `redis://HOST:PORT` or `postgres://USER@HOST/DB`.
    #[arg(long, env = "IDEM_STORE", value_name = "STORE", global = true)]
    pub store: Option<String>,
    /// The Redis key prefix or PostgreSQL schema the dispatchers were given.
    #[arg(
        long,
        env = "IDEM_STORE_PREFIX",
        value_name = "PREFIX",
        default_value = crate::store::DEFAULT_PREFIX,
        global = true
    )]
    pub prefix: String,
    /// Print JSON for scripts instead of a table (the shapes are in the README).
    #[arg(long, global = true)]
    pub json: bool,
}

impl StoreArgs {
    pub async fn open(&self) -> Result<Operator, Failure> {
        let spec = self.store.as_deref().ok_or_else(|| {
            Failure::new(
                Exit::Usage,
                "no store: give --store sqlite:PATH | redis://HOST:PORT | postgres://USER@HOST/DB, or set IDEM_STORE",
            )
        })?;
        Operator::open(spec, &self.prefix).await
    }
}

/// Who decides: recorded with every approval and denial, and logged with every change.
#[derive(Args, Clone)]
pub struct Identity {
    /// Your identity, recorded with the decision (e.g. an email address).
    #[arg(long = "as", env = "IDEM_APPROVER", value_name = "WHO")]
    pub who: Option<String>,
}

impl Identity {
    pub fn required(&self) -> Result<String, Failure> {
        match self.who.as_deref().map(str::trim) {
            Some(who) if !who.is_empty() => Ok(who.to_owned()),
            _ => Err(Failure::new(
                Exit::Usage,
                "who decides? give --as NAME or set IDEM_APPROVER: the decision is recorded with it",
            )),
        }
    }
}

#[derive(Args)]
pub struct RecordsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(subcommand)]
    pub command: RecordsCommand,
}

#[derive(Subcommand)]
pub enum RecordsCommand {
    /// List records (by default the open ones: in progress and unknown).
    List(ListArgs),
    /// Show one record: its state, arguments (secrets sealed), outcome and journal.
    Show {
        /// The record's key, as `list` shows it.
        key: String,
    },
    /// Settle an in-progress or unknown record with the outcome you established: every call
    /// with its key replays it from now on.
    Resolve(ResolveArgs),
    /// Forget an in-progress or unknown record, so that the call runs again when called:
    /// only when you know its effect did not happen.
    Release(ReleaseArgs),
    /// Delete expired completed records, and unknown ones past their retention.
    Purge(PurgeArgs),
}

/// A state to list.
#[derive(Clone, Copy, ValueEnum)]
pub enum StateArg {
    /// In progress and unknown.
    Open,
    InProgress,
    Unknown,
    Completed,
    /// Every state.
    All,
}

#[derive(Args)]
pub struct ListArgs {
    #[arg(long, value_enum, default_value = "open")]
    pub state: StateArg,
    /// Only this tenant's records.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only this tool's records.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only records created at least this long ago (e.g. `30m`, `2h`, `7d`).
    #[arg(long, value_name = "AGE", value_parser = operate::parse_duration)]
    pub older_than: Option<Duration>,
    /// At most this many.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

#[derive(Args)]
#[group(id = "outcome", required = true, multiple = false)]
pub struct OutcomeArgs {
    /// The call's result, as JSON (what the tool would have returned).
    #[arg(long, value_name = "JSON", group = "outcome")]
    pub value: Option<String>,
    /// Settle it as a terminal failure with this message instead.
    #[arg(long, value_name = "MESSAGE", group = "outcome")]
    pub failure: Option<String>,
}

#[derive(Args)]
pub struct ResolveArgs {
    /// The record's key.
    pub key: String,
    #[command(flatten)]
    pub outcome: OutcomeArgs,
    /// How long the outcome replays [default: the record's TTL, else 24h].
    #[arg(long, value_name = "DURATION", value_parser = operate::parse_duration)]
    pub ttl: Option<Duration>,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

#[derive(Args)]
pub struct ReleaseArgs {
    /// The record's key.
    pub key: String,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

#[derive(Args)]
pub struct PurgeArgs {
    /// Only this tenant's records.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Unknown records older than this are deleted too.
    #[arg(long, value_name = "DURATION", value_parser = operate::parse_duration, default_value = "30d")]
    pub unknown_retention: Duration,
    /// Delete this many per round trip.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
}

#[derive(Args)]
pub struct ApprovalsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

#[derive(Subcommand)]
pub enum ApprovalsCommand {
    /// List the calls waiting for a decision (with --all, decided and expired ones too).
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this tool's.
        #[arg(long)]
        tool: Option<String>,
        /// Decided and expired requests too.
        #[arg(long)]
        all: bool,
    },
    /// Show one request: the exact arguments (secrets sealed), who asked, until when.
    Show {
        /// The request's key, as `list` shows it.
        key: String,
    },
    /// Approve a pending call, as called or with edited arguments; the agent's next call
    /// runs it once.
    Approve(ApproveArgs),
    /// Deny a pending call: the agent's calls are refused with your reason until it expires.
    Deny(DenyArgs),
}

#[derive(Args)]
pub struct ApproveArgs {
    /// The request's key.
    pub key: String,
    /// Approve these arguments instead of the call's (JSON); the agent's call is refused
    /// with them, and runs once called with them.
    #[arg(long, value_name = "JSON", conflicts_with = "edit_file")]
    pub edit: Option<String>,
    /// The edited arguments, from a file.
    #[arg(long, value_name = "FILE")]
    pub edit_file: Option<PathBuf>,
    /// The signing key, `id:hex-secret`, from this file [default: IDEM_APPROVAL_KEY].
    #[arg(long, value_name = "FILE")]
    pub approval_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

#[derive(Args)]
pub struct DenyArgs {
    /// The request's key.
    pub key: String,
    /// Why: the agent's model is told it.
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this tenant's records and approvals.
    #[arg(long)]
    pub tenant: Option<String>,
}

/// A spinner on standard error while a long operation runs (drawn only on a terminal).
fn progress(what: &'static str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message(format!("{what}: 0"));
    bar
}

/// Ask before a change, showing it, unless `yes`.
fn confirm(yes: bool, change: &str) -> Result<(), Failure> {
    eprintln!("{change}");
    if yes {
        return Ok(());
    }
    eprint!("Proceed? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let read = std::io::stdin().lock().read_line(&mut answer);
    let interactive = std::io::stdin().is_terminal();
    match read {
        Ok(_) if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") => Ok(()),
        Ok(0) if !interactive => Err(Failure::new(
            Exit::NotConfirmed,
            "not confirmed (nothing answered the question): nothing changed; pass --yes to skip it",
        )),
        _ => Err(Failure::new(
            Exit::NotConfirmed,
            "not confirmed: nothing changed",
        )),
    }
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// An aligned table: a header row and rows of cells.
fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}...", text.chars().take(max - 3).collect::<String>())
    } else {
        text.to_owned()
    }
}

pub async fn records(args: RecordsArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let json = args.store.json;
    match args.command {
        RecordsCommand::List(list) => {
            let states = match list.state {
                StateArg::Open => vec![None],
                StateArg::InProgress => vec![Some(StateKind::InProgress)],
                StateArg::Unknown => vec![Some(StateKind::Unknown)],
                StateArg::Completed => vec![Some(StateKind::Completed)],
                StateArg::All => vec![
                    Some(StateKind::InProgress),
                    Some(StateKind::Unknown),
                    Some(StateKind::Completed),
                ],
            };
            let query = RecordQuery {
                states,
                tenant: list.tenant,
                tool: list.tool,
                older_than: list.older_than,
                limit: list.limit,
            };
            let bar = progress("records read");
            let found = op
                .records(&query, &|n| bar.set_message(format!("records read: {n}")))
                .await;
            bar.finish_and_clear();
            let found = found?;
            if json {
                print_json(&Value::Array(
                    found.iter().map(operate::record_json).collect(),
                ));
                return Ok(());
            }
            let now = op.now().await?;
            let rows: Vec<Vec<String>> = found
                .iter()
                .map(|r| {
                    vec![
                        r.key.to_string(),
                        r.tool.clone(),
                        r.tenant.clone(),
                        operate::state_name(r.state.kind()).into(),
                        operate::span(r.created_at, now),
                        clip(&detail(&r.state), 60),
                    ]
                })
                .collect();
            table(&["KEY", "TOOL", "TENANT", "STATE", "AGE", "DETAIL"], &rows);
            eprintln!("{} record(s) in {}", found.len(), op.name);
            Ok(())
        }
        RecordsCommand::Show { key } => {
            let record = op.record(&key).await?;
            if json {
                print_json(&operate::record_json(&record));
            } else {
                show_record(&record);
            }
            Ok(())
        }
        RecordsCommand::Resolve(resolve) => {
            let outcome = match (&resolve.outcome.value, &resolve.outcome.failure) {
                (Some(value), _) => {
                    let value: Value = serde_json::from_str(value).map_err(|e| {
                        Failure::new(
                            Exit::Usage,
                            format!("--value is not JSON ({e}): quote a string as '\"text\"'"),
                        )
                    })?;
                    Outcome::success(&value)
                }
                (None, Some(message)) => Outcome::Failure(ToolError::terminal(message)),
                (None, None) => unreachable!("clap requires one of --value and --failure"),
            };
            let who = resolve.identity.required()?;
            let record = op.record(&resolve.key).await?;
            if let RecordState::Completed { .. } = record.state {
                return Err(Failure::new(
                    Exit::Refused,
                    format!(
                        "{}: the record under key {} is already completed; nothing changed",
                        op.name, record.key
                    ),
                ));
            }
            let settled = match &outcome {
                Outcome::Success(text) => format!("completed with {text}"),
                Outcome::Failure(e) => format!("failed: {}", e.message()),
            };
            confirm(
                resolve.yes,
                &format!(
                    "Resolve {} ({} for tenant {}, {}): it becomes {settled}; every call with its key replays that.",
                    record.key,
                    record.tool,
                    record.tenant,
                    detail(&record.state)
                ),
            )?;
            let resolved = op.resolve(&record, &outcome, resolve.ttl).await?;
            tracing::info!(key = %resolved.key, by = %who, "resolved in {}", op.name);
            if json {
                print_json(&operate::record_json(&resolved));
            } else {
                println!("resolved {} by {who}: {settled}", resolved.key);
            }
            Ok(())
        }
        RecordsCommand::Release(release) => {
            let who = release.identity.required()?;
            let record = op.record(&release.key).await?;
            confirm(
                release.yes,
                &format!(
                    "Release {} ({} for tenant {}, {}): the record is deleted and the call runs again when called. Only if its effect did not happen.",
                    record.key,
                    record.tool,
                    record.tenant,
                    detail(&record.state)
                ),
            )?;
            op.release(&record).await?;
            tracing::info!(key = %record.key, by = %who, "released in {}", op.name);
            if json {
                print_json(&serde_json::json!({"released": record.key.as_str()}));
            } else {
                println!("released {} by {who}", record.key);
            }
            Ok(())
        }
        RecordsCommand::Purge(purge) => {
            let filter = PurgeFilter {
                limit: purge.batch as usize,
                tenant: purge.tenant,
                unknown_retention: purge.unknown_retention,
            };
            let bar = progress("expired records deleted");
            let deleted = op
                .purge(&filter, &|n| {
                    bar.set_message(format!("expired records deleted: {n}"))
                })
                .await;
            bar.finish_and_clear();
            let deleted = deleted?;
            if json {
                print_json(&serde_json::json!({"purged": deleted}));
            } else {
                println!("purged {deleted} expired record(s) from {}", op.name);
            }
            Ok(())
        }
    }
}

/// One line on a state: what an operator needs to decide.
fn detail(state: &RecordState) -> String {
    match state {
        RecordState::InProgress { lease_until } => {
            format!("in progress, lease until {}", lease_until.to_rfc3339())
        }
        RecordState::Completed { outcome, .. } => match outcome {
            Outcome::Success(text) => format!("completed: {text}"),
            Outcome::Failure(e) => format!("failed: {}", e.message()),
        },
        RecordState::Unknown { since, last_error } => {
            format!("unknown since {}: {last_error}", since.to_rfc3339())
        }
    }
}

fn show_record(record: &idem::Record) {
    let mut rows = vec![
        ("key", record.key.to_string()),
        ("tool", record.tool.clone()),
        ("tenant", record.tenant.clone()),
        ("state", operate::state_name(record.state.kind()).into()),
        ("detail", detail(&record.state)),
        ("arguments", operate::arguments_text(record)),
        ("fence", record.fence.to_string()),
        ("created", record.created_at.to_rfc3339()),
        ("updated", record.updated_at.to_rfc3339()),
    ];
    if let Some(contract) = &record.contract {
        rows.push(("class", contract.class.to_string()));
        rows.push(("version", contract.version.clone()));
    }
    for step in &record.steps {
        rows.push(("step", format!("{}: {}", step.step, step.value)));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("{k:<width$}  {v}");
    }
}

pub async fn approvals(args: ApprovalsArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let json = args.store.json;
    match args.command {
        ApprovalsCommand::List { tenant, tool, all } => {
            let filter = ApprovalFilter {
                tenant,
                tool,
                pending_only: !all,
                limit: usize::MAX,
            };
            let listed = op.approvals(&filter).await?;
            let now = op.now().await?;
            if json {
                print_json(&Value::Array(
                    listed
                        .iter()
                        .map(|e| operate::approval_json(e, now))
                        .collect(),
                ));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = listed
                .iter()
                .map(|e| {
                    let expires = if e.stands(now) {
                        operate::span(now, e.expires_at)
                    } else {
                        "expired".into()
                    };
                    vec![
                        e.key.to_string(),
                        operate::approval_status(e, now).into(),
                        e.tool.clone(),
                        e.tenant.clone(),
                        format!("{} ago", operate::span(e.requested_at, now)),
                        expires,
                        clip(&e.arguments.to_string(), 60),
                    ]
                })
                .collect();
            table(
                &[
                    "KEY",
                    "STATUS",
                    "TOOL",
                    "TENANT",
                    "REQUESTED",
                    "EXPIRES IN",
                    "ARGUMENTS",
                ],
                &rows,
            );
            eprintln!("{} request(s) in {}", listed.len(), op.name);
            Ok(())
        }
        ApprovalsCommand::Show { key } => {
            let entry = op.approval(&key).await?;
            let now = op.now().await?;
            if json {
                print_json(&operate::approval_json(&entry, now));
            } else {
                show_approval(&entry, now);
            }
            Ok(())
        }
        ApprovalsCommand::Approve(approve) => {
            let who = approve.identity.required()?;
            let key = crate::keys::signing_key(approve.approval_key_file.as_deref())?;
            let edited = match (&approve.edit, &approve.edit_file) {
                (Some(text), _) => Some(parse_edit(text, "--edit")?),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        Failure::new(Exit::Usage, format!("cannot read {}: {e}", path.display()))
                    })?;
                    Some(parse_edit(&text, &path.display().to_string())?)
                }
                (None, None) => None,
            };
            let entry = op.approval(&approve.key).await?;
            let now = op.now().await?;
            op.refuse_decided(&entry, now)?;
            let what = match &edited {
                None => format!("with the arguments as called: {}", entry.arguments),
                Some(edited) => format!(
                    "with EDITED arguments: {edited} (called with {})",
                    entry.arguments
                ),
            };
            confirm(
                approve.yes,
                &format!(
                    "Approve {} for tenant {} (key {}), {what}. Signed by {who} with key `{}`, valid until {}.",
                    entry.tool,
                    entry.tenant,
                    entry.key,
                    key.id(),
                    entry.expires_at.to_rfc3339()
                ),
            )?;
            let approver = Approver::new(who.clone(), key);
            let decided = op.approve(&entry, &approver, edited.as_ref()).await?;
            tracing::info!(key = %decided.key, by = %who, "approved in {}", op.name);
            if json {
                print_json(&operate::approval_json(&decided, now));
            } else {
                println!(
                    "approved {} ({} for {}) by {who}: the agent's next call runs it once",
                    decided.key, decided.tool, decided.tenant
                );
            }
            Ok(())
        }
        ApprovalsCommand::Deny(deny) => {
            let who = deny.identity.required()?;
            let entry = op.approval(&deny.key).await?;
            let now = op.now().await?;
            op.refuse_decided(&entry, now)?;
            confirm(
                deny.yes,
                &format!(
                    "Deny {} for tenant {} (key {}) with arguments {}: its calls are refused with \"{}\" until {}.",
                    entry.tool,
                    entry.tenant,
                    entry.key,
                    entry.arguments,
                    deny.reason,
                    entry.expires_at.to_rfc3339()
                ),
            )?;
            let decided = op.deny(&entry, &who, &deny.reason).await?;
            tracing::info!(key = %decided.key, by = %who, "denied in {}", op.name);
            if json {
                print_json(&operate::approval_json(&decided, now));
            } else {
                println!(
                    "denied {} ({} for {}) by {who}: {}",
                    decided.key, decided.tool, decided.tenant, deny.reason
                );
            }
            Ok(())
        }
    }
}

fn parse_edit(text: &str, source: &str) -> Result<Value, Failure> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Failure::new(Exit::Usage, format!("{source}: not JSON: {e}")))?;
    if !value.is_object() {
        return Err(Failure::new(
            Exit::Usage,
            format!("{source}: edited arguments are a JSON object, as the call's are"),
        ));
    }
    Ok(value)
}

fn show_approval(entry: &idem::store::approvals::PendingApproval, now: idem::Timestamp) {
    let mut rows = vec![
        ("key", entry.key.to_string()),
        ("status", operate::approval_status(entry, now).into()),
        ("tool", entry.tool.clone()),
        ("tenant", entry.tenant.clone()),
        ("namespace", entry.namespace.clone()),
        (
            "arguments",
            serde_json::to_string_pretty(&entry.arguments).unwrap_or_default(),
        ),
        (
            "requested",
            format!(
                "{} ({} ago)",
                entry.requested_at.to_rfc3339(),
                operate::span(entry.requested_at, now)
            ),
        ),
        ("expires", entry.expires_at.to_rfc3339()),
        ("downstream key", entry.downstream_key.clone()),
    ];
    if let Some(d) = &entry.decision {
        let verdict = match &d.verdict {
            idem::store::approvals::Verdict::Approved { arguments, .. } => {
                format!("approved {arguments}")
            }
            idem::store::approvals::Verdict::Denied { reason } => format!("denied: {reason}"),
        };
        rows.push((
            "decision",
            format!("{verdict} by {} at {}", d.by, d.at.to_rfc3339()),
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        let v = v.replace('\n', &format!("\n{:width$}  ", ""));
        println!("{k:<width$}  {v}");
    }
}

pub async fn stats(args: StatsArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let bar = progress("records read");
    let stats = op
        .stats(args.tenant.as_deref(), &|n| {
            bar.set_message(format!("records read: {n}"))
        })
        .await;
    bar.finish_and_clear();
    let stats = stats?;
    if args.store.json {
        print_json(&stats.to_json());
        return Ok(());
    }
    println!("{}", op.name);
    let count = |m: &std::collections::BTreeMap<&'static str, usize>, s: &str| {
        m.get(s).copied().unwrap_or(0).to_string()
    };
    let total: usize = stats.by_state.values().sum();
    println!(
        "records: {total} ({} in progress, {} unknown, {} completed); pending approvals: {}",
        count(&stats.by_state, "in_progress"),
        count(&stats.by_state, "unknown"),
        count(&stats.by_state, "completed"),
        stats.pending_approvals
    );
    match &stats.oldest_unknown {
        Some((r, since)) => println!(
            "oldest unknown: {} ({} for {}) since {}",
            r.key,
            r.tool,
            r.tenant,
            since.to_rfc3339()
        ),
        None => println!("oldest unknown: none"),
    }
    for (title, map) in [("TOOL", &stats.by_tool), ("TENANT", &stats.by_tenant)] {
        println!();
        let rows: Vec<Vec<String>> = map
            .iter()
            .map(|(name, m)| {
                let mut row = vec![name.clone()];
                row.extend(operate::STATES.iter().map(|s| count(m, s)));
                row
            })
            .collect();
        table(&[title, "IN_PROGRESS", "UNKNOWN", "COMPLETED"], &rows);
    }
    Ok(())
}
