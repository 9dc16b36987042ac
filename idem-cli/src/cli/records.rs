//! `idem records`: list, show, resolve, release, purge.

use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use idem_core::Outcome;
use idem_core::PurgeFilter;
use idem_core::RecordState;
use idem_core::StateKind;
use serde_json::Value;

use super::{Identity, StoreArgs, clip, confirm, print_json, progress, say, table};
use crate::exit::Failure;
use crate::operate::RecordQuery;
use crate::present;

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
    #[arg(long, value_name = "AGE", value_parser = present::parse_duration)]
    pub older_than: Option<Duration>,
    /// At most this many.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,
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
    #[arg(long, value_name = "DURATION", value_parser = present::parse_duration)]
    pub ttl: Option<Duration>,
    #[command(flatten)]
    pub identity: Identity,
    /// Settle an in-progress record too (its worker may be alive: only if you know it died).
    #[arg(long)]
    pub force: bool,
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
    /// Release an in-progress record too (its worker may be alive: only if you know it died).
    #[arg(long)]
    pub force: bool,
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
    #[arg(long, value_name = "DURATION", value_parser = present::parse_duration, default_value = "30d")]
    pub unknown_retention: Duration,
    /// Approval requests that expired longer ago than this are deleted, with their decisions
    /// (not with --tenant).
    #[arg(long, value_name = "DURATION", value_parser = present::parse_duration, default_value = "30d")]
    pub approval_retention: Duration,
    /// Delete this many per round trip.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
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
                // One more than shown tells whether the limit cut the listing.
                limit: usize::try_from(list.limit)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
            };
            let bar = progress("records read");
            let found = op
                .records(&query, &|n| bar.set_message(format!("records read: {n}")))
                .await;
            bar.finish_and_clear();
            let mut found = found?;
            if found.is_empty() {
                op.found_nothing();
            }
            let cut = found.len() > query.limit - 1;
            found.truncate(query.limit - 1);
            let say_cut = || {
                if cut {
                    eprintln!("(the first {}: --limit N shows more)", list.limit);
                }
            };
            if json {
                print_json(&Value::Array(
                    found.iter().map(present::record_json).collect(),
                ));
                say_cut();
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
                        present::state_name(r.state.kind()).into(),
                        present::span(r.created_at, now),
                        clip(&detail(&r.state), 60),
                    ]
                })
                .collect();
            table(&["KEY", "TOOL", "TENANT", "STATE", "AGE", "DETAIL"], &rows);
            eprintln!("{} record(s) in {}", found.len(), op.name);
            say_cut();
            Ok(())
        }
        RecordsCommand::Show { key } => {
            let record = op.record(&key).await?;
            if json {
                print_json(&present::record_json(&record));
            } else {
                show_record(&record);
            }
            Ok(())
        }
        RecordsCommand::Resolve(resolve) => {
            let outcome = present::outcome_of(
                resolve.outcome.value.as_deref(),
                resolve.outcome.failure.as_deref(),
                "--value",
                "'\"text\"'",
            )?;
            let who = resolve.identity.required()?;
            let record = op.record(&resolve.key).await?;
            op.settleable(&record, resolve.force)?;
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
            op.settle(&record, Some(&outcome), resolve.ttl, resolve.force, &who)
                .await?;
            tracing::info!(key = %record.key, by = %who, "resolved in {}", op.name);
            if json {
                let resolved = op.record(record.key.as_str()).await?;
                print_json(&present::record_json(&resolved));
            } else {
                say(&format!("resolved {} by {who}: {settled}", record.key));
            }
            Ok(())
        }
        RecordsCommand::Release(release) => {
            let who = release.identity.required()?;
            let record = op.record(&release.key).await?;
            op.settleable(&record, release.force)?;
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
            op.settle(&record, None, None, release.force, &who).await?;
            tracing::info!(key = %record.key, by = %who, "released in {}", op.name);
            if json {
                print_json(&serde_json::json!({"released": record.key.as_str()}));
            } else {
                say(&format!("released {} by {who}", record.key));
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
            // Approval requests are purged with the records, unless one tenant's are asked
            // for: their purge does not filter by tenant.
            let requests = match filter.tenant {
                Some(_) => None,
                None => Some(op.purge_approvals(purge.approval_retention).await?),
            };
            if json {
                print_json(&serde_json::json!({"purged": deleted, "approvals_purged": requests}));
            } else {
                say(&format!(
                    "purged {deleted} expired record(s) from {}",
                    op.name
                ));
                if let Some(requests) = requests {
                    println!("purged {requests} approval request(s) past --approval-retention");
                }
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

fn show_record(record: &idem_core::Record) {
    let mut rows = vec![
        ("key", record.key.to_string()),
        ("tool", record.tool.clone()),
        ("tenant", record.tenant.clone()),
        ("state", present::state_name(record.state.kind()).into()),
        ("detail", detail(&record.state)),
        ("arguments", present::arguments_text(record)),
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
        println!("{k:<width$}  {}", present::visible(&v));
    }
}
