//! The inbox's HTML vocabulary: escaping, the page layout and its style, the error and
//! sign-in pages, JSON shown pretty. Every page builds on it; it knows no page.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

use crate::present;

/// `text` for HTML, with every character that could make it read as other text shown by
/// its code ([`present::visible`]).
pub(super) fn esc(text: &str) -> String {
    let text = present::visible(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encoding for a message in a redirect's query.
pub(super) fn encode(text: &str) -> String {
    text.bytes().fold(String::new(), |mut s, b| {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            s.push(b as char);
        } else {
            let _ = write!(s, "%{b:02X}");
        }
        s
    })
}

pub(super) const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2433;background:#f6f7f9}
header{background:#1d2433;color:#fff;padding:14px 28px;display:flex;gap:28px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0} header .stat b{font-size:18px} header .muted{color:#b8bfcc}
main{padding:8px 28px 40px;max-width:1200px}
h2{font-size:16px;margin:28px 0 10px}
table{border-collapse:collapse;width:100%;background:#fff;box-shadow:0 1px 2px #0002}
th,td{text-align:left;vertical-align:top;padding:9px 10px;border-bottom:1px solid #e4e6eb}
th{font-size:12px;text-transform:uppercase;color:#5b6475;background:#fafbfc;white-space:nowrap}
td:nth-child(2),td:nth-child(3):not(.status),#decided td:nth-child(4){white-space:nowrap}
#pending td:last-child,#unknown td:last-child{min-width:15em}
pre{margin:0;font:13px/1.35 ui-monospace,monospace;white-space:pre-wrap;max-width:380px;min-width:30ch}
code{font:12px ui-monospace,monospace;color:#5b6475;word-break:break-all} td code{display:block;width:32ch}
form{margin:0 0 6px} input[type=text],textarea{font:13px ui-monospace,monospace;width:100%;box-sizing:border-box}
button{font:inherit;padding:4px 12px;border-radius:4px;border:1px solid #8890a0;background:#fff;cursor:pointer}
button.approve,button.approve-selected{background:#1f7a3f;color:#fff;border-color:#1f7a3f}
button.deny,button.deny-selected{background:#a8231c;color:#fff;border-color:#a8231c}
label.pick{display:block;margin-bottom:6px} form.batch{margin:10px 0;display:flex;gap:8px}
.notice{background:#e6f4ea;border:1px solid #1f7a3f;padding:10px 14px;margin:16px 0}
.error{background:#fbe9e7;border:1px solid #a8231c;padding:10px 14px;margin:16px 0}
.muted{color:#5b6475} .empty{color:#5b6475;padding:12px;background:#fff}
";

pub(super) fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    )
}

pub(super) fn page_error(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<main><div class=error role=alert id=error>{}</div><p><a href=\"/\">Back to the inbox</a></p></main>",
        esc(message)
    );
    (status, Html(layout("idem: refused", &body))).into_response()
}

pub(super) fn login_body(message: Option<&str>) -> String {
    login_body_next(message, "")
}

/// The sign-in page, returning to `next` (a link's page) once signed in.
pub(super) fn login_body_next(message: Option<&str>, next: &str) -> String {
    let note = message
        .map(|m| format!("<div class=error role=alert id=error>{}</div>", esc(m)))
        .unwrap_or_default();
    let back = match next {
        "" => String::new(),
        next => format!("<input type=hidden name=next value=\"{}\">", esc(next)),
    };
    layout(
        "idem: sign in",
        &format!(
            "<main><h2>idem approval inbox</h2>{note}<form method=post action=\"/login\">{back}<p><label>Access token <input type=password name=token autocomplete=off autofocus></label></p><p><button type=submit>Open the inbox</button></p></form></main>"
        ),
    )
}

pub(super) fn refused_login() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(login_body(Some("The inbox needs its access token."))),
    )
        .into_response()
}

pub(super) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

pub(super) fn pretty_text(text: Option<&str>) -> String {
    match text {
        Some(text) => serde_json::from_str::<Value>(text)
            .map(|v| pretty(&v))
            .unwrap_or_else(|_| text.to_owned()),
        None => "(not kept)".into(),
    }
}
