//! `idem grants`: standing grants. A person grants a tool's calls for a tenant, a run or a
//! session, for a time, within argument bounds; the calls inside run without asking, the
//! others ask as before. List them, revoke one.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use idem_registry::Approver;
use idem_registry::approval::{ApprovalDesk, GrantError, GrantTerms};
use idem_registry::tool::Rule;
use serde_json::{Value, json};

use super::{Identity, StoreArgs, confirm, print_json, say, table};
use crate::exit::{Exit, Failure};
use crate::present;

#[derive(Args)]
pub struct GrantsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(subcommand)]
    pub command: GrantsCommand,
}

#[derive(Subcommand)]
pub enum GrantsCommand {
    /// Grant a tool's calls for a tenant (or one run, or one session) for a time, within
    /// bounds: the calls inside run without asking, the others ask as before.
    Add(AddArgs),
    /// List the grants: standing ones (with --all, those ended in the last 30 days too).
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Ended grants (expired or revoked) too.
        #[arg(long)]
        all: bool,
    },
    /// Revoke a grant: from now on it lets nothing through.
    Revoke {
        /// The grant's id (`g-` and 16 hex digits).
        id: String,
        #[command(flatten)]
        identity: Identity,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
}

#[derive(Args)]
pub struct AddArgs {
    /// The tenant whose calls it covers.
    #[arg(long)]
    pub tenant: String,
    /// The tool.
    #[arg(long)]
    pub tool: String,
    /// Only the calls of this run.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "session")]
    pub run: Option<String>,
    /// Only the calls of this session (an MCP door's session).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// For how long (e.g. `30m`, `8h`, `7d`; at most 90 days).
    #[arg(long = "for", value_name = "DURATION", value_parser = present::parse_duration)]
    pub valid_for: Duration,
    /// A bound every call must keep, as a rule (repeat for several):
    /// '{"pointer": "/amount", "at_most": 50}', '{"pointer": "/customer", "equals": "c-7"}'.
    #[arg(long, value_name = "RULE")]
    pub within: Vec<String>,
    /// The signing key, `id:hex-secret`, from this file [default: IDEM_APPROVAL_KEY].
    #[arg(long, value_name = "FILE")]
    pub approval_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub identity: Identity,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}

pub async fn grants(args: GrantsArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let json = args.store.json;
    let desk = ApprovalDesk::over(&*op.store).through(op.door);
    let failed = |e: GrantError| grant_failure(&op.name, e);
    match args.command {
        GrantsCommand::Add(add) => {
            let who = add.identity.required()?;
            let key = crate::keys::signing_key(add.approval_key_file.as_deref())?;
            let mut terms = GrantTerms::new(&add.tenant, &add.tool, add.valid_for);
            if let Some(run) = &add.run {
                terms = terms.for_run(run);
            }
            if let Some(session) = &add.session {
                terms = terms.for_session(session);
            }
            for text in &add.within {
                let rule: Rule = serde_json::from_str(text).map_err(|e| {
                    Failure::new(
                        Exit::Usage,
                        format!(
                            "--within {text}: not a rule ({e}); e.g. '{{\"pointer\": \"/amount\", \"at_most\": 50}}'"
                        ),
                    )
                })?;
                terms = terms.within(rule);
            }
            let bounds: Vec<String> = terms.bounds.iter().map(ToString::to_string).collect();
            confirm(
                add.yes,
                &format!(
                    "Grant {} for tenant {} ({}) {}, for {}: its calls within run without asking a person. Signed by {who} with key `{}`.",
                    add.tool,
                    add.tenant,
                    terms.scope,
                    match bounds.is_empty() {
                        true => "with no bounds".to_owned(),
                        false => format!("within {}", bounds.join("; ")),
                    },
                    present::span(
                        idem_core::Timestamp(0),
                        idem_core::Timestamp(0).plus(add.valid_for)
                    ),
                    key.id()
                ),
            )?;
            let grant = desk
                .grant(&terms, &Approver::new(who, key))
                .await
                .map_err(failed)?;
            if json {
                print_json(&grant_json(&grant, op.now().await?));
            } else {
                say(&format!(
                    "granted {} until {}: {}",
                    grant.id,
                    grant.expires_at.to_rfc3339(),
                    grant.summary()
                ));
            }
            Ok(())
        }
        GrantsCommand::List { tenant, all } => {
            let now = op.now().await?;
            let mut listed = desk.grants(tenant.as_deref()).await.map_err(failed)?;
            if !all {
                listed.retain(|g| g.stands(now));
            }
            if listed.is_empty() {
                op.found_nothing();
            }
            if json {
                print_json(&Value::Array(
                    listed.iter().map(|g| grant_json(g, now)).collect(),
                ));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = listed
                .iter()
                .map(|g| {
                    vec![
                        g.id.clone(),
                        status(g, now).to_owned(),
                        g.tool.clone(),
                        g.tenant.clone(),
                        g.scope.to_string(),
                        bounds_text(g),
                        g.by.clone(),
                        g.expires_at.to_rfc3339(),
                    ]
                })
                .collect();
            table(
                &[
                    "ID", "STATUS", "TOOL", "TENANT", "SCOPE", "BOUNDS", "BY", "EXPIRES",
                ],
                &rows,
            );
            eprintln!("{} grant(s) in {}", listed.len(), op.name);
            Ok(())
        }
        GrantsCommand::Revoke { id, identity, yes } => {
            let who = identity.required()?;
            confirm(
                yes,
                &format!("Revoke grant {id}: from now on it lets nothing through."),
            )?;
            let revoked = desk.revoke(&id, &who).await.map_err(failed)?;
            if json {
                print_json(&grant_json(&revoked, op.now().await?));
            } else {
                say(&format!(
                    "revoked {} by {who}: {}",
                    revoked.id,
                    revoked.summary()
                ));
            }
            Ok(())
        }
    }
}

fn status(grant: &idem_registry::approval::Grant, now: idem_core::Timestamp) -> &'static str {
    match (&grant.revoked, grant.stands(now)) {
        (Some(_), _) => "revoked",
        (None, true) => "standing",
        (None, false) => "expired",
    }
}

fn bounds_text(grant: &idem_registry::approval::Grant) -> String {
    match grant.bounds.is_empty() {
        true => "none".to_owned(),
        false => grant
            .bounds
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The documented JSON shape of a grant (its signature left out).
fn grant_json(grant: &idem_registry::approval::Grant, now: idem_core::Timestamp) -> Value {
    json!({
        "id": grant.id,
        "status": status(grant, now),
        "tenant": grant.tenant,
        "tool": grant.tool,
        "scope": grant.scope,
        "bounds": grant.bounds,
        "by": grant.by,
        "granted_at": grant.granted_at.to_rfc3339(),
        "expires_at": grant.expires_at.to_rfc3339(),
        "policy": grant.policy,
        "revoked": grant.revoked.as_ref().map(|r| json!({"by": r.by, "at": r.at.to_rfc3339()})),
    })
}

/// A grant or revocation refused, with the exit code that says why.
fn grant_failure(store: &str, e: GrantError) -> Failure {
    let code = match &e {
        GrantError::Store(e) => return Failure::store(store, e.clone()),
        GrantError::NotFound(_) => Exit::NotFound,
        GrantError::AlreadyRevoked { .. }
        | GrantError::FourEyes { .. }
        | GrantError::NothingToGrant(_)
        | GrantError::PolicyUnknown(_) => Exit::Refused,
        GrantError::Validity(_) | GrantError::InvalidBound(_) | GrantError::UnknownTool(_) => {
            Exit::Usage
        }
        _ => Exit::Failed,
    };
    Failure::new(code, format!("{store}: {e}"))
}
