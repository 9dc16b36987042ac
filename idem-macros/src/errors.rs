//! Gathers every user error of one expansion, so they are reported together.

use std::fmt::Display;

use quote::ToTokens;

/// The errors found so far. Like serde_derive's `Ctxt`, it must be [`check`](Errors::check)ed:
/// dropping it unchecked panics, because an expansion that forgot its errors would emit code
/// for an invalid tool (a bug of this macro, never of its user).
pub(crate) struct Errors {
    /// `None` once checked.
    errors: Option<Vec<syn::Error>>,
}

impl Errors {
    pub(crate) fn new() -> Self {
        Errors {
            errors: Some(Vec::new()),
        }
    }

    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors
            .as_mut()
            .expect("errors are only added before they are checked")
            .push(error);
    }

    /// Every error found, combined into one, or `Ok` if there was none.
    pub(crate) fn check(mut self) -> Result<(), syn::Error> {
        let errors = self.errors.take().unwrap_or_default();
        let mut iter = errors.into_iter();
        let Some(mut first) = iter.next() else {
            return Ok(());
        };
        for e in iter {
            first.combine(e);
        }
        Err(first)
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        if self.errors.is_some() && !std::thread::panicking() {
            panic!("idem-macros: errors were gathered but never checked");
        }
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate nearest to `input`, if it is close enough to be a likely typo.
pub(crate) fn nearest<'a>(input: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let norm = input.to_ascii_lowercase().replace(['-', ' '], "_");
    candidates
        .iter()
        .map(|c| (distance(&norm, c), *c))
        .filter(|(d, c)| *d <= c.len() / 2 || (norm.len() >= 3 && c.contains(norm.as_str())))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checking_reports_every_error_together() {
        let mut errors = Errors::new();
        errors.at(proc_macro2::Span::call_site(), "first");
        errors.at(proc_macro2::Span::call_site(), "second");
        let combined = errors.check().unwrap_err();
        let messages: Vec<String> = combined.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["first", "second"]);
        assert!(Errors::new().check().is_ok());
    }

    #[test]
    #[should_panic(expected = "never checked")]
    fn errors_dropped_unchecked_are_a_bug_of_the_macro() {
        let mut errors = Errors::new();
        errors.at(proc_macro2::Span::call_site(), "lost");
    }

    #[test]
    fn suggestions_are_near_misses_only() {
        let classes = ["read", "idempotent_write"];
        assert_eq!(nearest("idempotent", &classes), Some("idempotent_write"));
        assert_eq!(nearest("Read", &classes), Some("read"));
        assert_eq!(nearest("delete", &classes), None);
    }
}
