//! Who may use the inbox: the tokens (one per person, or one for the identity the inbox runs
//! as), the sessions a sign-in opens (an HttpOnly, SameSite=Strict cookie holding a random
//! id, at most a few per person, each for [`SESSION_TTL`]), the anti-forgery token of each
//! session's forms, and the refusal of a form posted from another site.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use hmac::{KeyInit, Mac};

use super::html::page_error;
use crate::cli::Identity;
use crate::env::{UI_TOKEN, UI_TOKENS};
use crate::exit::{Exit, Failure};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The shortest token accepted.
const MIN_TOKEN_CHARS: usize = 16;

/// The session cookie's name.
const SESSION_COOKIE: &str = "idem_session";

/// How long a sign-in lasts.
pub(super) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// How many sessions one person keeps at once (a sign-in beyond ends their oldest).
const SESSIONS_PER_PERSON: usize = 16;

/// Who may come in, and the signed-in sessions.
pub(super) struct Sessions {
    /// Keys the token check, sessions, anti-forgery tokens and notices (random per process).
    secret: [u8; 32],
    /// Each person's identity and the MAC of their token under `secret` (compared in
    /// constant time).
    tokens: Vec<(String, Vec<u8>)>,
    /// The signed-in sessions: each sign-in's random id, whose it is, until when.
    sessions: Mutex<HashMap<String, (String, Instant)>>,
    /// Whether the session cookie is sent only over HTTPS (behind a TLS proxy).
    secure_cookie: bool,
}

/// Who a request comes from.
pub(super) enum Caller {
    /// A script with a token in `Authorization: Bearer` (a browser never adds it, so no
    /// forgery token is needed), and whose token it is.
    Bearer(String),
    /// A browser with a session's cookie: the session, and whose it is.
    Session(String, String),
}

impl Caller {
    /// Who decides.
    pub(super) fn who(&self) -> &str {
        match self {
            Caller::Bearer(who) | Caller::Session(_, who) => who,
        }
    }
}

fn mac(secret: &[u8], data: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    m.update(data);
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Sessions {
    /// The sessions of an inbox that lets in the holders of `tokens` (who, token), keyed by
    /// a secret drawn now.
    pub(super) fn new(tokens: Vec<(String, String)>, secure_cookie: bool) -> Result<Self, Failure> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| {
            Failure::new(Exit::Failed, format!("no randomness for the session: {e}"))
        })?;
        let tokens = tokens
            .into_iter()
            .map(|(who, token)| {
                let tag = mac(&secret, token.as_bytes()).finalize().into_bytes();
                (who, tag.to_vec())
            })
            .collect();
        Ok(Sessions {
            secret,
            tokens,
            sessions: Mutex::new(HashMap::new()),
            secure_cookie,
        })
    }

    /// The MAC a notice in a redirect carries, for `caller` only: a link cannot show a
    /// forged notice, nor one made for someone else.
    pub(super) fn notice_tag(&self, caller: &Caller, notice: &str) -> String {
        let whose = match caller {
            Caller::Session(session, _) => format!("session:{session}"),
            Caller::Bearer(who) => format!("bearer:{who}"),
        };
        hex(
            &mac(&self.secret, format!("notice:{whose}:{notice}").as_bytes())
                .finalize()
                .into_bytes(),
        )
    }

    /// Whose token `given` is, if it is one (every token is compared, in constant time).
    pub(super) fn token_of(&self, given: &str) -> Option<String> {
        let mut found = None;
        for (who, token_mac) in &self.tokens {
            if mac(&self.secret, given.as_bytes())
                .verify_slice(token_mac)
                .is_ok()
            {
                found = Some(who.clone());
            }
        }
        found
    }

    pub(super) fn same(&self, a: &str, b: &str) -> bool {
        // Compare MACs of both: constant time in the secret's bytes.
        let tag = mac(&self.secret, a.as_bytes()).finalize().into_bytes();
        mac(&self.secret, b.as_bytes()).verify_slice(&tag).is_ok()
    }

    /// Who the request comes from, if it carries the token or a live session's cookie.
    pub(super) fn caller(&self, headers: &HeaderMap) -> Option<Caller> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(who) = bearer.and_then(|t| self.token_of(t.trim())) {
            return Some(Caller::Bearer(who));
        }
        let now = Instant::now();
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .filter(|(name, _)| *name == SESSION_COOKIE)
            .find_map(|(_, id)| match sessions.get(id) {
                Some((who, until)) if now < *until => {
                    Some(Caller::Session(id.to_owned(), who.clone()))
                }
                _ => None,
            })
    }

    /// The anti-forgery token of a session's forms.
    pub(super) fn csrf_of(&self, session: &str) -> String {
        hex(&mac(&self.secret, format!("csrf:{session}").as_bytes())
            .finalize()
            .into_bytes())
    }

    /// A new session of `who`: a random id, valid for [`SESSION_TTL`].
    pub(super) fn sign_in(&self, who: String) -> Result<String, getrandom::Error> {
        let mut id = [0u8; 32];
        getrandom::fill(&mut id)?;
        let id = hex(&id);
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, (_, until)| now < *until);
        // A person's oldest sessions end beyond the few a person uses at once.
        let mut theirs: Vec<(String, Instant)> = sessions
            .iter()
            .filter(|(_, (owner, _))| *owner == who)
            .map(|(id, (_, until))| (id.clone(), *until))
            .collect();
        if theirs.len() >= SESSIONS_PER_PERSON {
            theirs.sort_by_key(|(_, until)| *until);
            for (old, _) in &theirs[..=theirs.len() - SESSIONS_PER_PERSON] {
                sessions.remove(old);
            }
        }
        sessions.insert(id.clone(), (who, now + SESSION_TTL));
        Ok(id)
    }

    pub(super) fn sign_out(&self, session: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(session);
    }

    pub(super) fn cookie(&self, value: &str, max_age: Duration) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        format!(
            "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            max_age.as_secs()
        )
    }

    /// A POST by `caller` must come from a page of this inbox: the anti-forgery token
    /// matches, and an `Origin` header, if sent, is this host. The refusal to answer, if not.
    pub(super) fn check_post(
        &self,
        headers: &HeaderMap,
        caller: &Caller,
        csrf: &str,
    ) -> Result<(), Box<Response>> {
        if let Some(refusal) = other_site(headers) {
            return Err(Box::new(refusal));
        }
        match caller {
            Caller::Session(session, _) if !self.same(csrf, &self.csrf_of(session)) => {
                Err(Box::new(page_error(
                    StatusCode::FORBIDDEN,
                    "refused: the form's anti-forgery token is missing or wrong; reload the inbox and try again",
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The refusal of a form sent from a page of another site: its `Origin`, if the browser
/// sends one, must be this host.
pub(super) fn other_site(headers: &HeaderMap) -> Option<Response> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())?;
    let same =
        host.is_some_and(|h| origin == format!("http://{h}") || origin == format!("https://{h}"));
    (!same).then(|| {
        page_error(
            StatusCode::FORBIDDEN,
            "refused: the form was sent from another site (behind a proxy, pass the original Host header on)",
        )
    })
}

/// The tokens and whose each is: `IDEM_UI_TOKENS` (`who=token,...`), or `IDEM_UI_TOKEN`
/// for the identity given with `--as` or `IDEM_APPROVER`.
pub(super) fn tokens(identity: &Identity) -> Result<Vec<(String, String)>, Failure> {
    let usage = |message: String| Failure::new(Exit::Usage, message);
    let short = |source: &str| {
        usage(format!(
            "{source}: a token is shorter than {MIN_TOKEN_CHARS} characters: use random ones, e.g. `openssl rand -hex 16`"
        ))
    };
    let one = std::env::var(UI_TOKEN).ok();
    let many = std::env::var(UI_TOKENS).ok();
    match (one, many) {
        (Some(_), Some(_)) => Err(usage(format!(
            "set {UI_TOKEN} or {UI_TOKENS}, not both: one token for the --as identity, or one per person"
        ))),
        (None, None) => Err(usage(format!(
            "set {UI_TOKEN} to the token the inbox asks for (e.g. `openssl rand -hex 16`), or {UI_TOKENS} to one per person (who=token,...): without one the inbox would be open to anyone who reaches the port"
        ))),
        (Some(token), None) => {
            let token = token.trim().to_owned();
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(short(UI_TOKEN));
            }
            Ok(vec![(identity.required()?, token)])
        }
        (None, Some(list)) => {
            if identity.who.is_some() {
                tracing::warn!(
                    "{UI_TOKENS} names who holds each token: --as and IDEM_APPROVER are not used"
                );
            }
            let mut tokens: Vec<(String, String)> = Vec::new();
            for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let Some((who, token)) = entry.split_once('=') else {
                    return Err(usage(format!(
                        "{UI_TOKENS}: an entry is not `who=token` (e.g. `dana@desk=` and 32 hex digits)"
                    )));
                };
                let (who, token) = (who.trim(), token.trim());
                if who.is_empty() {
                    return Err(usage(format!(
                        "{UI_TOKENS}: an entry names nobody before `=`"
                    )));
                }
                if token.chars().count() < MIN_TOKEN_CHARS {
                    return Err(short(UI_TOKENS));
                }
                if tokens.iter().any(|(_, t)| t == token) {
                    return Err(usage(format!(
                        "{UI_TOKENS}: two people share a token: give each their own"
                    )));
                }
                tokens.push((who.to_owned(), token.to_owned()));
            }
            if tokens.is_empty() {
                return Err(usage(format!("{UI_TOKENS} lists no token")));
            }
            Ok(tokens)
        }
    }
}
