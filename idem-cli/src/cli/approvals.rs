//! `idem approvals`: list, show, approve (as called or edited), deny.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use idem_core::store::approvals::{ApprovalFilter, PendingApproval};
use idem_registry::Approver;
use serde_json::Value;

use super::{Identity, StoreArgs, clip, confirm, print_json, say, table};
use crate::exit::{Exit, Failure};
use crate::present;

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
        /// Only requests made at least this long ago (e.g. `30m`, `2h`).
        #[arg(long, value_name = "AGE", value_parser = present::parse_duration)]
        older_than: Option<Duration>,
    },
    /// Show one request: the exact arguments (secrets sealed), who asked, until when.
    Show {
        /// The call's key, record or downstream.
        #[arg(help = KEY_HELP)]
        key: String,
    },
    /// Approve pending calls, each exactly as shown (one call: as called or with edited
    /// arguments); the agent's next call of each runs it once. No other call is approved
    /// with them, and a call that changed since it was shown is refused alone.
    Approve(ApproveArgs),
    /// Deny pending calls, each exactly as shown: the agent's calls are refused with your
    /// reason until they expire. A call that changed since it was shown is refused alone.
    Deny(DenyArgs),
}

/// What every `KEY` of `idem approvals` takes.
const KEY_HELP: &str = "The call's key: the record key `idem approvals list` prints (64 hex digits), or the downstream key (`idem-` and 40 hex digits) the agent's refusal names (an `ApprovalRequired` error, an MCP client's answer)";

#[derive(Args)]
pub struct ApproveArgs {
    /// The calls' keys, record or downstream.
    #[arg(help = KEY_HELP, value_name = "KEY", required = true, num_args = 1..)]
    pub keys: Vec<String>,
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
    /// The calls' keys, record or downstream.
    #[arg(help = KEY_HELP, value_name = "KEY", required = true, num_args = 1..)]
    pub keys: Vec<String>,
    /// Why: the agent's model is told it.
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

pub async fn approvals(args: ApprovalsArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let json = args.store.json;
    match args.command {
        ApprovalsCommand::List {
            tenant,
            tool,
            all,
            older_than,
        } => {
            let filter = ApprovalFilter {
                tenant,
                tool,
                pending_only: !all,
                limit: usize::MAX,
            };
            let mut listed = op.approvals(&filter).await?;
            if listed.is_empty() {
                op.found_nothing();
            }
            let now = op.now().await?;
            if let Some(age) = older_than {
                listed.retain(|e| present::at_least(e.requested_at, age, now));
            }
            if json {
                print_json(&Value::Array(
                    listed
                        .iter()
                        .map(|e| present::approval_json(e, now))
                        .collect(),
                ));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = listed
                .iter()
                .map(|e| {
                    let expires = if e.stands(now) {
                        present::span(now, e.expires_at)
                    } else {
                        "expired".into()
                    };
                    let status = match (e.decision.is_none() && e.approvers > 1, e.stands(now)) {
                        (true, true) => {
                            format!("pending ({} of {})", e.approved_by.len(), e.approvers)
                        }
                        _ => present::approval_status(e, now).into(),
                    };
                    vec![
                        e.key.to_string(),
                        status,
                        e.tool.clone(),
                        e.tenant.clone(),
                        format!("{} ago", present::span(e.requested_at, now)),
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
                print_json(&present::approval_json(&entry, now));
            } else {
                show_approval(&entry, now);
            }
            Ok(())
        }
        ApprovalsCommand::Approve(approve) if approve.keys.len() > 1 => {
            batch(&op, Batch::Approve(&approve), json).await
        }
        ApprovalsCommand::Deny(deny) if deny.keys.len() > 1 => {
            batch(&op, Batch::Deny(&deny), json).await
        }
        ApprovalsCommand::Approve(approve) => {
            let who = approve.identity.required()?;
            let key = crate::keys::signing_key(approve.approval_key_file.as_deref())?;
            let edited = match (&approve.edit, &approve.edit_file) {
                (Some(text), _) => Some(present::edited_arguments(text, "--edit")?),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        Failure::new(Exit::Usage, format!("cannot read {}: {e}", path.display()))
                    })?;
                    Some(present::edited_arguments(
                        &text,
                        &path.display().to_string(),
                    )?)
                }
                (None, None) => None,
            };
            let (entry, now) = op.undecided(&approve.keys[0]).await?;
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
                    "Approve {} for tenant {} (key {}, downstream key {}), {what}. Signed by {who} with key `{}`, valid until {}.",
                    entry.tool,
                    entry.tenant,
                    entry.key,
                    entry.downstream_key,
                    key.id(),
                    entry.expires_at.to_rfc3339()
                ),
            )?;
            let approver = Approver::new(who.clone(), key);
            let decided = op
                .approve(&entry, entry.fingerprint, &approver, edited.as_ref())
                .await?;
            tracing::info!(key = %decided.key, by = %who, "approved in {}", op.name);
            if json {
                print_json(&present::approval_json(&decided, now));
            } else {
                let awaiting = present::approvers_line(&decided).filter(|_| decided.awaiting() > 0);
                let next = match (edited, &awaiting) {
                    (_, Some(line)) => line.as_str(),
                    (None, None) => "the agent's next call runs it once",
                    (Some(_), None) => {
                        "the agent's call is refused with the edited arguments, and runs once called with them"
                    }
                };
                say(&format!(
                    "approved {} ({} for {}) by {who}: {next}",
                    decided.key, decided.tool, decided.tenant
                ));
            }
            Ok(())
        }
        ApprovalsCommand::Deny(deny) => {
            let who = deny.identity.required()?;
            let (entry, now) = op.undecided(&deny.keys[0]).await?;
            confirm(
                deny.yes,
                &format!(
                    "Deny {} for tenant {} (key {}, downstream key {}) with arguments {}: its calls are refused with \"{}\" until {}.",
                    entry.tool,
                    entry.tenant,
                    entry.key,
                    entry.downstream_key,
                    entry.arguments,
                    deny.reason,
                    entry.expires_at.to_rfc3339()
                ),
            )?;
            let decided = op
                .deny(&entry, entry.fingerprint, &who, &deny.reason)
                .await?;
            tracing::info!(key = %decided.key, by = %who, "denied in {}", op.name);
            if json {
                print_json(&present::approval_json(&decided, now));
            } else {
                say(&format!(
                    "denied {} ({} for {}) by {who}: {}",
                    decided.key, decided.tool, decided.tenant, deny.reason
                ));
            }
            Ok(())
        }
    }
}

/// Several calls decided at once.
enum Batch<'a> {
    Approve(&'a ApproveArgs),
    Deny(&'a DenyArgs),
}

/// What a batch does to each of its calls.
enum Decide<'a> {
    Approve(Approver),
    Deny(&'a str),
}

/// Decide every call `batch` names, each as shown: one question for all, then each decision
/// bound to the arguments shown for its call; a call that changed meanwhile is refused alone,
/// and the command fails (exit 5) naming it, after deciding the others.
async fn batch(op: &crate::operate::Operator, batch: Batch<'_>, json: bool) -> Result<(), Failure> {
    let (keys, identity, yes) = match &batch {
        Batch::Approve(a) => (&a.keys, &a.identity, a.yes),
        Batch::Deny(d) => (&d.keys, &d.identity, d.yes),
    };
    let who = identity.required()?;
    let decide = match &batch {
        Batch::Approve(a) => {
            if a.edit.is_some() || a.edit_file.is_some() {
                return Err(Failure::new(
                    Exit::Usage,
                    "--edit changes one call's arguments: give one key with it",
                ));
            }
            let key = crate::keys::signing_key(a.approval_key_file.as_deref())?;
            Decide::Approve(Approver::new(who.clone(), key))
        }
        Batch::Deny(d) => {
            crate::operate::denial_reason(&d.reason)?;
            Decide::Deny(&d.reason)
        }
    };
    // Each call once, however many of its keys were given.
    let mut shown = Vec::new();
    for key in keys {
        let (entry, _) = op.undecided(key).await?;
        if !shown.iter().any(|e: &PendingApproval| e.key == entry.key) {
            shown.push(entry);
        }
    }
    let mut question = match &decide {
        Decide::Approve(approver) => format!(
            "Approve {} calls, each with the arguments shown, signed by {who} with key `{}`:",
            shown.len(),
            approver.key().id()
        ),
        Decide::Deny(reason) => format!(
            "Deny {} calls, each with the arguments shown: their calls are refused with \"{reason}\".",
            shown.len(),
        ),
    };
    for (i, entry) in shown.iter().enumerate() {
        question.push_str(&format!(
            "\n  {}. {} for tenant {} (key {}): {}",
            i + 1,
            entry.tool,
            entry.tenant,
            entry.key,
            entry.arguments
        ));
    }
    confirm(yes, &question)?;
    let now = op.now().await?;
    let (mut refused, mut unlogged) = (0, 0);
    let mut results = Vec::new();
    for entry in &shown {
        let (decided, verb) = match &decide {
            Decide::Deny(reason) => (
                op.deny(entry, entry.fingerprint, &who, reason).await,
                "denied",
            ),
            Decide::Approve(approver) => (
                op.approve(entry, entry.fingerprint, approver, None).await,
                "approved",
            ),
        };
        match decided {
            Ok(decided) => {
                tracing::info!(key = %decided.key, by = %who, "{verb} in {}", op.name);
                if json {
                    results.push(serde_json::json!({
                        "key": decided.key.as_str(),
                        "decided": true,
                        "approval": present::approval_json(&decided, now),
                    }));
                } else {
                    say(&format!(
                        "{verb} {} ({} for {}) by {who}",
                        decided.key, decided.tool, decided.tenant
                    ));
                }
            }
            Err(failure) if failure.decided => {
                unlogged += 1;
                eprintln!("warning: {verb} {}, and: {failure}", entry.key);
                results.push(serde_json::json!({
                    "key": entry.key.as_str(),
                    "decided": true,
                    "logged": false,
                    "error": failure.to_string(),
                }));
            }
            Err(failure) => {
                refused += 1;
                if json {
                    results.push(serde_json::json!({
                        "key": entry.key.as_str(),
                        "decided": false,
                        "error": failure.to_string(),
                    }));
                } else {
                    eprintln!(
                        "not {verb}: {} ({} for {}): {failure}",
                        entry.key, entry.tool, entry.tenant
                    );
                }
            }
        }
    }
    if json {
        print_json(&Value::Array(results));
    }
    if unlogged > 0 && refused == 0 {
        return Err(Failure::new(
            Exit::Store,
            format!(
                "{unlogged} of {} decisions were recorded and not logged (each named above): the store's decision log could not take them",
                shown.len()
            ),
        ));
    }
    if refused > 0 {
        return Err(Failure::new(
            Exit::Refused,
            format!(
                "{refused} of {} calls were not decided (each named above); the others were",
                shown.len()
            ),
        ));
    }
    Ok(())
}

fn show_approval(entry: &idem_core::store::approvals::PendingApproval, now: idem_core::Timestamp) {
    let mut rows = vec![
        ("key", entry.key.to_string()),
        ("status", present::approval_status(entry, now).into()),
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
                present::span(entry.requested_at, now)
            ),
        ),
        ("expires", entry.expires_at.to_rfc3339()),
        ("downstream key", entry.downstream_key.clone()),
    ];
    if let Some(line) = present::approvers_line(entry) {
        rows.push(("approvers", line));
    }
    if let Some(d) = &entry.decision {
        let verdict = match &d.verdict {
            idem_core::store::approvals::Verdict::Approved { arguments, .. } => {
                format!("approved {arguments}")
            }
            idem_core::store::approvals::Verdict::Denied { reason } => format!("denied: {reason}"),
        };
        rows.push((
            "decision",
            format!("{verdict} by {} at {}", d.by, d.at.to_rfc3339()),
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        let v = v.replace('\n', &format!("\n{:width$}  ", ""));
        println!("{k:<width$}  {}", present::visible(&v));
    }
}
