//! `idem notify`: each call pending approval is sent to the channels a configuration names
//! (Slack, Teams, a generic webhook), once, with its signed inbox link and, for Slack and
//! Teams, Approve / Deny buttons bound to the arguments shown; the platforms' callbacks are
//! served here, verified as each platform signs them, mapped to an approver by the
//! configuration, taken once, and decided through the approval desk.
//!
//! Rooms: [`config`] (the TOML, resolved against the environment), [`message`] (what each
//! channel is sent, pure), [`send`] (the once-per-call claim and the poll loop), [`verify`]
//! (each platform's signature, pure), [`callback`] (the HTTP endpoints, carrying out the
//! checks in order).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use clap::Args;
use idem_core::Fingerprint;
use idem_core::store::approvals::PendingApproval;
use reqwest::Url;

use crate::cli::StoreArgs;
use crate::exit::{Exit, Failure};

pub mod callback;
pub mod config;
pub mod message;
pub mod send;
pub mod verify;

/// What `idem notify --help` adds after the options.
pub const HELP: &str = "\
Example:
  export SLACK_SIGNING_SECRET=...        # the Slack app's signing secret
  export IDEM_APPROVAL_KEY=desk-1:...    # or --approval-key-file
  idem notify --store sqlite:agent.db --config notify.toml \\
    --inbox-url https://inbox.example --listen 127.0.0.1:8701

notify.toml (examples/notify.toml is a commented one):
  [slack]
  webhook_url_env = \"SLACK_WEBHOOK_URL\"
  signing_secret_env = \"SLACK_SIGNING_SECRET\"
  [slack.approvers]
  U024BE7LH = \"dana@desk\"

Callbacks (point each platform's interactivity / outgoing webhook here):
  POST /callback/slack     Slack's interactivity request URL (signing secret, 5 min window)
  POST /callback/teams     a Teams outgoing webhook (HMAC security token; not Bot Framework JWT)
  POST /callback/webhook   the generic webhook's answer (Idem-Signature, 5 min window)
Answers: 200 decided, 401 not signed as expected or stale, 403 user not mapped to an
approver, 409 replayed, already decided, expired, or pending now with other arguments.

Environment:
  IDEM_APPROVAL_KEY  id:hex-secret, the key approvals and inbox links are signed with
  the variables the configuration names (secrets are never written in the file)";

#[derive(Args)]
pub struct NotifyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The channels, their secrets' variables and approvers (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The signing key, `id:hex-secret`, from this file [default: IDEM_APPROVAL_KEY].
    #[arg(long, value_name = "FILE")]
    pub approval_key_file: Option<PathBuf>,
    /// Where the callbacks are served (keep it on loopback, behind a TLS proxy).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8701")]
    pub listen: SocketAddr,
    /// How often pending approvals are looked for (`2s`, `500ms`, `1m`).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = interval)]
    pub interval: Duration,
    /// The approval inbox's base URL (`idem ui`), for each message's signed link.
    #[arg(long, value_name = "URL")]
    pub inbox_url: Option<String>,
}

/// Slack's Approve button.
pub const SLACK_APPROVE: &str = "idem_approve";
/// Slack's Deny button.
pub const SLACK_DENY: &str = "idem_deny";
/// The generic webhook's signature header, both directions.
pub const WEBHOOK_SIGNATURE: &str = "idem-signature";

/// A channel's platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Slack,
    Teams,
    Webhook,
}

impl Platform {
    /// As the configuration's tables, the decision log's door and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Slack => "slack",
            Platform::Teams => "teams",
            Platform::Webhook => "webhook",
        }
    }

    /// As a person reads it.
    pub fn title(self) -> &'static str {
        match self {
            Platform::Slack => "Slack",
            Platform::Teams => "Teams",
            Platform::Webhook => "the webhook",
        }
    }
}

/// The call a message showed, and the fingerprint of the arguments it showed: what a button
/// carries back, and all a decision may act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub record_key: String,
    pub fingerprint: Fingerprint,
}

impl Binding {
    pub fn of(entry: &PendingApproval) -> Binding {
        Binding {
            record_key: entry.key.as_str().to_owned(),
            fingerprint: entry.fingerprint,
        }
    }

    /// A Slack button's value: `<record key> <fingerprint hex>`.
    pub fn value(&self) -> String {
        format!("{} {}", self.record_key, self.fingerprint.to_hex())
    }

    /// A Slack button's value, read back.
    pub fn parse(value: &str) -> Option<Binding> {
        let (key, fingerprint) = value.trim().rsplit_once(' ')?;
        let key = key.trim();
        (!key.is_empty()).then_some(())?;
        Some(Binding {
            record_key: key.to_owned(),
            fingerprint: Fingerprint::from_hex(fingerprint)?,
        })
    }
}

/// Unix seconds, this host's clock (the platforms sign their own).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `--interval`: `500ms`, `2s`, `1m`, or a number of seconds.
fn interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write e.g. 500ms, 2s or 1m"))?;
    let every = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("`{text}`: the unit is ms, s or m")),
    };
    if every < Duration::from_millis(10) {
        return Err("the interval must be at least 10ms".into());
    }
    Ok(every)
}

/// `--inbox-url`: an http(s) URL.
fn inbox_url(text: &str) -> Result<String, Failure> {
    match Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => {
            Ok(text.trim_end_matches('/').to_owned())
        }
        _ => Err(Failure::new(
            Exit::Usage,
            format!("--inbox-url {text} is not an http:// or https:// URL (the base of `idem ui`)"),
        )),
    }
}

/// A name for this notifier in the deliveries it writes.
fn notifier_name() -> String {
    let mut nonce = [0u8; 4];
    let _ = getrandom::fill(&mut nonce);
    format!("notify-{}-{}", std::process::id(), verify::hex(&nonce))
}

pub async fn serve(args: NotifyArgs) -> Result<(), Failure> {
    let config = config::load(&args.config).map_err(|e| Failure::new(Exit::Usage, e))?;
    let signing = crate::keys::signing_key(args.approval_key_file.as_deref())?;
    let inbox = args.inbox_url.as_deref().map(inbox_url).transpose()?;
    let op = args.store.open().await?;
    let client = reqwest::Client::builder()
        .timeout(send::POST_TIMEOUT)
        .build()
        .map_err(|e| Failure::new(Exit::Failed, format!("cannot start an HTTP client: {e}")))?;
    let (listener, local) = crate::ui::listen(args.listen).await?;
    let public = match &config.public_url {
        Some(url) => url.as_str().trim_end_matches('/').to_owned(),
        None => format!("http://{local}"),
    };
    let names: Vec<&str> = config.channels.iter().map(|c| c.platform.name()).collect();
    tracing::info!(
        "notifying {} of the approvals pending in {}; callbacks at http://{local}/callback/{{{}}}",
        names.join(", "),
        op.name,
        names.join(",")
    );
    if inbox.is_none() {
        tracing::info!("no --inbox-url: the messages carry no link to the inbox");
    }
    let sending = {
        let (op, config, signing) = (op.clone(), config.clone(), signing.clone());
        let every = args.interval;
        tokio::spawn(async move {
            let sender = send::Sender {
                store: &*op.store,
                client,
                channels: &config.channels,
                signing: &signing,
                inbox_url: inbox.as_deref(),
                webhook_callback: format!("{public}/callback/webhook"),
                me: notifier_name(),
            };
            loop {
                if let Err(e) = sender.poll().await {
                    tracing::warn!("{}", Failure::store(&op.name, e).message);
                }
                tokio::time::sleep(every).await;
            }
        })
    };
    let desk = Arc::new(callback::Desk {
        op,
        config,
        signing,
    });
    let app = Router::new()
        .route("/callback/slack", post(callback::slack))
        .route("/callback/teams", post(callback::teams))
        .route("/callback/webhook", post(callback::webhook))
        .with_state(desk);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    sending.abort();
    served.map_err(|e| Failure::new(Exit::Failed, format!("the notifier stopped: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        let cases = [
            ("2s", Ok(Duration::from_secs(2))),
            ("500ms", Ok(Duration::from_millis(500))),
            ("1m", Ok(Duration::from_secs(60))),
            ("3", Ok(Duration::from_secs(3))),
        ];
        for (text, expected) in cases {
            assert_eq!(interval(text), expected, "{text}");
        }
        for bad in ["", "2h", "fast", "5ms", "0"] {
            assert!(interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_binding_reads_back_as_written() {
        let binding = Binding {
            record_key: "rk 1".into(),
            fingerprint: Fingerprint::from_bytes([7; 32]),
        };
        assert_eq!(Binding::parse(&binding.value()), Some(binding));
        for bad in ["", "rk1", " 0707", "rk1 zz"] {
            assert_eq!(Binding::parse(bad), None, "{bad}");
        }
    }
}
