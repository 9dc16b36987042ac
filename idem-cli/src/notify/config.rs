//! The notifier's configuration: a TOML file naming the channels (Slack, Teams, a generic
//! webhook), where each posts, the environment variable holding each one's secret (never
//! the secret itself), and who each platform user is as an approver.
//!
//! Read in two steps: the file as written ([`NotifyFile`], unknown fields refused), then
//! resolved against the environment ([`NotifyFile::resolve`], a pure function of the file
//! and a lookup), so that every mistake is an error naming the field or variable at fault.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use reqwest::Url;
use serde::Deserialize;

use super::Platform;

/// The configuration file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyFile {
    /// The address the callbacks are reached at from outside (a TLS proxy's), named in the
    /// webhook's `callback_url`; default: `http://` and `--listen`.
    pub public_url: Option<String>,
    pub slack: Option<SlackFile>,
    pub teams: Option<TeamsFile>,
    pub webhook: Option<WebhookFile>,
}

/// `[slack]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackFile {
    /// The incoming webhook's URL, or the variable holding it (the URL is a credential:
    /// whoever holds it posts to the channel).
    pub webhook_url: Option<String>,
    pub webhook_url_env: Option<String>,
    /// The variable holding the app's signing secret.
    pub signing_secret_env: String,
    /// Slack user id → approver identity.
    #[serde(default)]
    pub approvers: BTreeMap<String, String>,
}

/// `[teams]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamsFile {
    /// The Workflows (or incoming) webhook's URL, or the variable holding it.
    pub webhook_url: Option<String>,
    pub webhook_url_env: Option<String>,
    /// The variable holding the outgoing webhook's security token (base64, as Teams shows
    /// it when the outgoing webhook is created).
    pub security_token_env: String,
    /// Azure AD object id (or Teams user id) → approver identity.
    #[serde(default)]
    pub approvers: BTreeMap<String, String>,
}

/// `[webhook]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookFile {
    /// Where the signed JSON is posted, or the variable holding it.
    pub url: Option<String>,
    pub url_env: Option<String>,
    /// The variable holding the shared secret both directions are signed with.
    pub secret_env: String,
    /// The receiver's user name → approver identity.
    #[serde(default)]
    pub approvers: BTreeMap<String, String>,
}

/// A channel, resolved: where it posts, its secret, its approvers.
#[derive(Clone)]
pub struct Channel {
    pub platform: Platform,
    /// Where messages are posted.
    pub url: Url,
    /// The secret callbacks are verified with (and the webhook's messages signed with):
    /// Slack's signing secret, Teams' decoded security token, the webhook's secret.
    pub secret: Vec<u8>,
    /// Platform user → approver identity.
    pub approvers: BTreeMap<String, String>,
}

// The secret and the URL (a credential for Slack and Teams) are never shown.
impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("platform", &self.platform)
            .field("host", &self.url.host_str())
            .field("approvers", &self.approvers)
            .finish_non_exhaustive()
    }
}

/// The configuration, resolved.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    pub public_url: Option<Url>,
    pub channels: Vec<Channel>,
}

impl NotifyConfig {
    /// The channel of `platform`, if configured.
    pub fn channel(&self, platform: Platform) -> Option<&Channel> {
        self.channels.iter().find(|c| c.platform == platform)
    }
}

/// Read and resolve the file at `path` against this process's environment.
pub fn load(path: &Path) -> Result<NotifyConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the configuration {}: {e}", path.display()))?;
    parse(&text, |name| std::env::var(name).ok())
        .map_err(|e| format!("the configuration {}: {e}", path.display()))
}

/// Parse and resolve `text`, reading variables through `env`.
pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<NotifyConfig, String> {
    let file: NotifyFile = toml::from_str(text).map_err(|e| e.to_string())?;
    file.resolve(env)
}

impl NotifyFile {
    /// The channels, their URLs checked and their secrets read through `env`.
    pub fn resolve(self, env: impl Fn(&str) -> Option<String>) -> Result<NotifyConfig, String> {
        let public_url = self
            .public_url
            .as_deref()
            .map(|u| url("public_url", u))
            .transpose()?;
        let mut channels = Vec::new();
        if let Some(slack) = self.slack {
            let at = either(
                "slack",
                "webhook_url",
                slack.webhook_url,
                slack.webhook_url_env,
                &env,
            )?;
            let secret = variable("slack.signing_secret_env", &slack.signing_secret_env, &env)?;
            channels.push(Channel {
                platform: Platform::Slack,
                url: url("slack.webhook_url", &at)?,
                secret: secret.into_bytes(),
                approvers: approvers("slack", slack.approvers)?,
            });
        }
        if let Some(teams) = self.teams {
            let at = either(
                "teams",
                "webhook_url",
                teams.webhook_url,
                teams.webhook_url_env,
                &env,
            )?;
            let name = &teams.security_token_env;
            let token = variable("teams.security_token_env", name, &env)?;
            let secret = base64::engine::general_purpose::STANDARD
                .decode(token.trim())
                .map_err(|_| {
                    format!(
                        "{name} (teams.security_token_env) is not base64: give the security token as Teams showed it when the outgoing webhook was created"
                    )
                })?;
            channels.push(Channel {
                platform: Platform::Teams,
                url: url("teams.webhook_url", &at)?,
                secret,
                approvers: approvers("teams", teams.approvers)?,
            });
        }
        if let Some(hook) = self.webhook {
            let at = either("webhook", "url", hook.url, hook.url_env, &env)?;
            let secret = variable("webhook.secret_env", &hook.secret_env, &env)?;
            if secret.len() < 16 {
                return Err(format!(
                    "{} (webhook.secret_env) is shorter than 16 characters: use a random secret, e.g. `openssl rand -hex 32`",
                    hook.secret_env
                ));
            }
            channels.push(Channel {
                platform: Platform::Webhook,
                url: url("webhook.url", &at)?,
                secret: secret.into_bytes(),
                approvers: approvers("webhook", hook.approvers)?,
            });
        }
        if channels.is_empty() {
            return Err(
                "no channel: configure at least one of [slack], [teams], [webhook] (see examples/notify.toml)"
                    .into(),
            );
        }
        Ok(NotifyConfig {
            public_url,
            channels,
        })
    }
}

/// The value of `field`, given in the file or in the variable `field_env` names: exactly one.
fn either(
    table: &str,
    field: &str,
    literal: Option<String>,
    from_env: Option<String>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    match (literal, from_env) {
        (Some(value), None) => Ok(value),
        (None, Some(name)) => variable(&format!("{table}.{field}_env"), &name, env),
        (Some(_), Some(_)) => Err(format!(
            "[{table}] gives both {field} and {field}_env: keep one"
        )),
        (None, None) => Err(format!(
            "[{table}] needs {field} (or {field}_env, the variable holding it)"
        )),
    }
}

/// The variable `name` (named by the file's `field`); an unset or empty one is an error
/// naming it. Its value is never shown.
fn variable(
    field: &str,
    name: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    if name.trim().is_empty() {
        return Err(format!("{field} is empty: name an environment variable"));
    }
    match env(name) {
        Some(value) if !value.trim().is_empty() => Ok(value),
        _ => Err(format!(
            "the environment variable {name} ({field}) is not set: the secret is read from it, never from the file"
        )),
    }
}

/// An http(s) URL; the error names the field, not the URL (which may be a credential).
fn url(field: &str, text: &str) -> Result<Url, String> {
    let parsed = Url::parse(text.trim()).map_err(|e| format!("{field} is not a URL ({e})"))?;
    match parsed.scheme() {
        "http" | "https" if parsed.host_str().is_some() => Ok(parsed),
        other => Err(format!(
            "{field} must be an http:// or https:// URL with a host (it is {other}:)"
        )),
    }
}

/// The identity map: no blank user or identity.
fn approvers(
    table: &str,
    map: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    for (user, who) in &map {
        if user.trim().is_empty() || who.trim().is_empty() {
            return Err(format!(
                "[{table}.approvers] maps `{user}` to `{who}`: neither may be blank"
            ));
        }
    }
    if map.is_empty() {
        tracing::warn!("[{table}.approvers] is empty: every decision from {table} will be refused");
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SLACK_SECRET" => Some("slack-secret".into()),
            "TEAMS_TOKEN" => Some("c2VjcmV0LXRva2Vu".into()),
            "HOOK_SECRET" => Some("0123456789abcdef0123".into()),
            "SHORT" => Some("short".into()),
            "HOOK_URL" => Some("https://hooks.example/x".into()),
            _ => None,
        }
    }

    const GOOD: &str = r#"
public_url = "https://notify.example"
[slack]
webhook_url = "https://hooks.slack.com/services/T/B/X"
signing_secret_env = "SLACK_SECRET"
[slack.approvers]
U024BE7LH = "dana@desk"
[teams]
webhook_url = "https://teams.example/hook"
security_token_env = "TEAMS_TOKEN"
[webhook]
url_env = "HOOK_URL"
secret_env = "HOOK_SECRET"
"#;

    #[test]
    fn a_good_file_resolves_every_channel_with_its_secret() {
        let config = parse(GOOD, env).expect("a good file");
        let platforms: Vec<_> = config.channels.iter().map(|c| c.platform).collect();
        assert_eq!(
            platforms,
            [Platform::Slack, Platform::Teams, Platform::Webhook]
        );
        let teams = config.channel(Platform::Teams).unwrap();
        assert_eq!(teams.secret, b"secret-token");
        let slack = config.channel(Platform::Slack).unwrap();
        assert_eq!(slack.approvers["U024BE7LH"], "dana@desk");
        assert!(!format!("{slack:?}").contains("slack-secret"));
        let hook = config.channel(Platform::Webhook).unwrap();
        assert_eq!(hook.url.as_str(), "https://hooks.example/x");
    }

    #[test]
    fn the_example_file_resolves() {
        let example = include_str!("../../../examples/notify.toml");
        let env = |name: &str| match name {
            "SLACK_WEBHOOK_URL" => Some("https://hooks.slack.com/services/T/B/X".into()),
            "TEAMS_WEBHOOK_URL" => Some("https://teams.example/hook".into()),
            "TEAMS_SECURITY_TOKEN" => Some("c2VjcmV0LXRva2Vu".into()),
            "SLACK_SIGNING_SECRET" | "IDEM_WEBHOOK_SECRET" => Some("0123456789abcdef0123".into()),
            _ => None,
        };
        let config = parse(example, env).expect("examples/notify.toml");
        assert_eq!(config.channels.len(), 3);
        assert_eq!(
            config.public_url.map(String::from).as_deref(),
            Some("https://idem-notify.example.com/")
        );
    }

    #[test]
    fn each_mistake_is_named() {
        let slack = |rest: &str| format!("[slack]\nsigning_secret_env = \"SLACK_SECRET\"\n{rest}");
        // (file, what the error must say)
        let cases = [
            ("", "no channel"),
            ("colour = 1\n[slack]\n", "unknown field `colour`"),
            (
                &slack("webhook_url = \"not a url\"") as &str,
                "slack.webhook_url is not a URL",
            ),
            (&slack("webhook_url = \"ftp://x/y\""), "http:// or https://"),
            (&slack(""), "needs webhook_url"),
            (
                &slack("webhook_url = \"https://a/\"\nwebhook_url_env = \"HOOK_URL\""),
                "both webhook_url and webhook_url_env",
            ),
            (
                "[slack]\nwebhook_url = \"https://a/\"\nsigning_secret_env = \"NOPE\"",
                "NOPE (slack.signing_secret_env) is not set",
            ),
            (
                "[teams]\nwebhook_url = \"https://a/\"\nsecurity_token_env = \"SLACK_SECRET\"",
                "is not base64",
            ),
            (
                "[webhook]\nurl = \"https://a/\"\nsecret_env = \"SHORT\"",
                "shorter than 16",
            ),
            (
                &slack("webhook_url = \"https://a/\"\n[slack.approvers]\nU1 = \" \""),
                "neither may be blank",
            ),
        ];
        for (text, says) in cases {
            let error = parse(text, env).expect_err(text);
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(!error.contains("slack-secret"), "{error}");
        }
    }
}
