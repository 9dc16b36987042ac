//! `idem audit`: the store's decision log, a hash chain of every decision a person made
//! (approve, deny, resolve, release, retry, undo a run), listed, verified link by link, and
//! exported signed for an auditor to keep outside the store.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hmac::{KeyInit, Mac};
use idem_core::Fingerprint;
use idem_core::store::decisions::{self, Chain, ChainBroken, LogError, Logged};
use serde_json::{Value, json};

use super::{StoreArgs, clip, print_json, say, table};
use crate::exit::{Exit, Failure};
use crate::operate::Operator;

/// HMAC-SHA-256.
type Hmac = hmac::Hmac<sha2::Sha256>;

/// What an export's signature is derived under, from the approval key: a key's signatures of
/// approvals can never pass for an export's, nor the other way round.
const EXPORT_LABEL: &[u8] = b"idem-decision-log-export-v1";

/// How many entries are read at a time.
const PAGE: usize = 500;

#[derive(Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Subcommand)]
pub enum AuditCommand {
    /// The decisions, oldest first: who, what, when, through which door, about which call.
    List {
        /// From this entry on (1: the first).
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Check every link of the chain: each entry's hash that of its contents, each linked to
    /// the one before, none missing; with `--against`, also that the chain still holds what
    /// an earlier signed export held. Exits 0 only if it all holds; otherwise names the first
    /// broken link.
    Verify {
        /// A signed export made earlier (`idem audit export`): its signature is checked with
        /// the approval key, and the store's chain must still have its last entry, unchanged.
        #[arg(long, value_name = "FILE")]
        against: Option<PathBuf>,
        /// The file holding the approval key (`id:hex-secret`) [default: IDEM_APPROVAL_KEY].
        #[arg(long, value_name = "FILE")]
        approval_key_file: Option<PathBuf>,
    },
    /// Write the whole chain, verified, as JSON lines, the last one signed with a key derived
    /// from the approval key: an auditor keeps it outside the store, and `verify --against`
    /// checks a later chain against it.
    Export {
        /// Write to this file (never over an existing one) instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The file holding the approval key (`id:hex-secret`) [default: IDEM_APPROVAL_KEY].
        #[arg(long, value_name = "FILE")]
        approval_key_file: Option<PathBuf>,
    },
}

pub async fn audit(args: AuditArgs) -> Result<(), Failure> {
    let op = args.store.open().await?;
    let json = args.store.json;
    match args.command {
        AuditCommand::List { from, limit } => list(&op, from, limit, json).await,
        AuditCommand::Verify {
            against,
            approval_key_file,
        } => {
            let chain = verified(&op).await?;
            if let Some(file) = against {
                let key = crate::keys::signing_key(approval_key_file.as_deref())?;
                let (entries, head) = export_head(&file, &key)?;
                held(&op, &file, entries, head, &chain).await?;
            }
            if json {
                print_json(&chain_json(&chain));
            } else {
                say(&format!(
                    "the decision log holds: {} entries{}",
                    chain.entries,
                    chain
                        .head
                        .map(|h| format!(", the last with hash {}", h.to_hex()))
                        .unwrap_or_default()
                ));
            }
            Ok(())
        }
        AuditCommand::Export {
            output,
            approval_key_file,
        } => {
            let key = crate::keys::signing_key(approval_key_file.as_deref())?;
            export(&op, output.as_deref(), &key).await
        }
    }
}

/// The chain, verified; a broken link is the command's failure.
async fn verified(op: &Operator) -> Result<Chain, Failure> {
    decisions::verify(&*op.store)
        .await
        .map_err(|e| log_failure(op, e))
}

fn log_failure(op: &Operator, e: LogError) -> Failure {
    match e {
        LogError::Store(e) => Failure::store(&op.name, e),
        e @ LogError::Broken(_) => Failure::new(Exit::Refused, format!("{}: {e}", op.name)),
        e => Failure::new(Exit::Failed, format!("{}: {e}", op.name)),
    }
}

async fn list(op: &Operator, from: u64, limit: usize, json: bool) -> Result<(), Failure> {
    let entries = decisions::read(&*op.store, from, limit)
        .await
        .map_err(|e| log_failure(op, e))?;
    if json {
        print_json(&Value::Array(entries.iter().map(entry_json).collect()));
        return Ok(());
    }
    if entries.is_empty() {
        say("no decisions logged");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let d = &e.decision;
            vec![
                e.seq.to_string(),
                e.at.to_rfc3339(),
                d.by.clone(),
                d.action.as_str().to_owned(),
                d.door.clone(),
                d.tenant.clone(),
                d.tool.clone().unwrap_or_default(),
                d.subject.clone().unwrap_or_default(),
                clip(d.detail.as_deref().unwrap_or_default(), 60),
            ]
        })
        .collect();
    table(
        &[
            "#", "AT", "BY", "ACTION", "DOOR", "TENANT", "TOOL", "SUBJECT", "DETAIL",
        ],
        &rows,
    );
    Ok(())
}

async fn export(
    op: &Operator,
    output: Option<&Path>,
    key: &idem_registry::ApprovalKey,
) -> Result<(), Failure> {
    let chain = verified(op).await?;
    let mut lines = Vec::new();
    let mut from = 1;
    loop {
        let page = decisions::read(&*op.store, from, PAGE)
            .await
            .map_err(|e| log_failure(op, e))?;
        let Some(last) = page.last() else { break };
        from = last.seq + 1;
        for entry in &page {
            lines.push(serde_json::to_string(entry).unwrap_or_default());
        }
        if page.len() < PAGE {
            break;
        }
    }
    // Entries appended since the verification are not in this export's chain: cut to it.
    lines.truncate(usize::try_from(chain.entries).unwrap_or(usize::MAX));
    // What was read after the verification must still end at the verified head.
    let last = lines
        .last()
        .and_then(|l| serde_json::from_str::<Logged>(l).ok())
        .map(|l| l.hash);
    if last != chain.head {
        return Err(Failure::new(
            Exit::Refused,
            format!(
                "{}: the decision log changed while it was exported: nothing was written; export again",
                op.name
            ),
        ));
    }
    let head = chain.head.map(|h| h.to_hex());
    let signature = sign(key, chain.entries, head.as_deref());
    lines.push(
        json!({
            "entries": chain.entries,
            "head": head,
            "key": key.id(),
            "signature": signature,
        })
        .to_string(),
    );
    let text = lines.join("\n") + "\n";
    match output {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .map_err(|e| Failure::new(Exit::Failed, format!("cannot write the export: {e}")))?;
        }
        Some(path) => {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| {
                    Failure::new(
                        Exit::Usage,
                        format!("cannot create {} (never written over): {e}", path.display()),
                    )
                })?;
            file.write_all(text.as_bytes()).map_err(|e| {
                Failure::new(
                    Exit::Failed,
                    format!("cannot write {}: {e}", path.display()),
                )
            })?;
            eprintln!(
                "exported {} decisions to {}, signed with key `{}`",
                chain.entries,
                path.display(),
                key.id()
            );
        }
    }
    Ok(())
}

/// The signature of an export's last line: over its count and head, under a key derived from
/// the approval key.
fn sign(key: &idem_registry::ApprovalKey, entries: u64, head: Option<&str>) -> String {
    let digest = mac(key, entries, head).finalize().into_bytes();
    idem_core::Fingerprint::from_bytes(digest.into()).to_hex()
}

/// The MAC an export's signature is, over its count and head.
fn mac(key: &idem_registry::ApprovalKey, entries: u64, head: Option<&str>) -> Hmac {
    let mut mac = <Hmac as KeyInit>::new_from_slice(&key.derived_secret(EXPORT_LABEL))
        .expect("HMAC takes a key of any length");
    mac.update(format!("{entries}\n{}", head.unwrap_or("")).as_bytes());
    mac
}

/// The count and head an export holds, once its signature, its chain and its last line agree.
fn export_head(
    file: &Path,
    key: &idem_registry::ApprovalKey,
) -> Result<(u64, Option<Fingerprint>), Failure> {
    let refused = |why: String| Failure::new(Exit::Refused, format!("{}: {why}", file.display()));
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::new(Exit::Usage, format!("cannot read {}: {e}", file.display())))?;
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines
        .pop()
        .ok_or_else(|| refused("empty: not an export of `idem audit export`".into()))?;
    let seal: Value = serde_json::from_str(last)
        .map_err(|e| refused(format!("its last line is not an export's signature: {e}")))?;
    let entries = seal["entries"]
        .as_u64()
        .ok_or_else(|| refused("no entry count".into()))?;
    let head = seal["head"].as_str();
    if seal["key"].as_str() != Some(key.id()) {
        return Err(refused(format!(
            "signed with key `{}`, not `{}`",
            seal["key"].as_str().unwrap_or("?"),
            key.id()
        )));
    }
    let signature = seal["signature"]
        .as_str()
        .and_then(Fingerprint::from_hex)
        .ok_or_else(|| refused("its signature is not 64 hex digits".into()))?;
    if mac(key, entries, head)
        .verify_slice(signature.as_bytes())
        .is_err()
    {
        return Err(refused(
            "its signature does not verify: the export was changed".into(),
        ));
    }
    // The chain inside must hold and end at the signed head.
    let mut prev = None;
    for (i, line) in lines.iter().enumerate() {
        let entry: Logged = serde_json::from_str(line)
            .map_err(|e| refused(format!("line {} is not a decision: {e}", i + 1)))?;
        prev = Some(decisions::follows(&entry, i as u64 + 1, prev).map_err(
            |broken| match broken {
                ChainBroken::Changed { seq } => refused(format!(
                    "entry {seq} was changed after the export was signed"
                )),
                _ => refused(format!("entry {} does not follow the one before it", i + 1)),
            },
        )?);
    }
    if lines.len() as u64 != entries || prev.map(|h| h.to_hex()).as_deref() != head {
        return Err(refused(
            "its entries are not the ones its signature covers".into(),
        ));
    }
    Ok((entries, prev))
}

/// The store's chain still has the export's last entry, unchanged.
async fn held(
    op: &Operator,
    file: &Path,
    entries: u64,
    head: Option<Fingerprint>,
    chain: &Chain,
) -> Result<(), Failure> {
    // The verified chain is linked from entry 1: reaching the export's last entry unchanged
    // means holding every entry before it too.
    if chain.entries < entries {
        return Err(Failure::new(
            Exit::Refused,
            format!(
                "{}: the decision log no longer reaches entry {entries} as {} exported it (it holds {} linked from the first): entries were removed or rewritten since",
                op.name,
                file.display(),
                chain.entries
            ),
        ));
    }
    let Some(head) = head else { return Ok(()) };
    let found = decisions::read(&*op.store, entries, 1)
        .await
        .map_err(|e| log_failure(op, e))?;
    match found.first() {
        Some(entry) if entry.seq == entries && entry.hash == head => Ok(()),
        _ => Err(Failure::new(
            Exit::Refused,
            format!(
                "{}: the decision log no longer holds entry {entries} as {} exported it: the chain was rewritten since",
                op.name,
                file.display()
            ),
        )),
    }
}

fn chain_json(chain: &Chain) -> Value {
    json!({
        "holds": true,
        "entries": chain.entries,
        "head": chain.head.map(|h| h.to_hex()),
    })
}

fn entry_json(entry: &Logged) -> Value {
    serde_json::to_value(entry).unwrap_or(Value::Null)
}
