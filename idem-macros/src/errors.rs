//! Gathers every user error of one expansion, so they are reported together.

use std::fmt::Display;

use quote::ToTokens;

#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        let mut iter = self.errors.into_iter();
        let Some(mut first) = iter.next() else {
            return Ok(());
        };
        for e in iter {
            first.combine(e);
        }
        Err(first)
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
