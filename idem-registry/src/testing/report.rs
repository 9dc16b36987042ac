//! What a crash test found: each point's verdict, judged from the providers' ledger and the
//! resumed worker's facts, and the report a test asserts on.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// What became of the scenario with the worker killed at one point and resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Every effect at most once; none of the survey's lost, unless `left_for_a_person`
    /// calls wait for a person (Unknown, or cases).
    Held {
        /// Effects in the ledger.
        effects: usize,
        /// Calls left for a person.
        left_for_a_person: usize,
    },
    /// An effect the ledger shows more than once, and how many times.
    Twice(Vec<(String, usize)>),
    /// Effects of the survey that never happened, with nothing left for a person.
    Lost(Vec<String>),
    /// `irreversible` tools whose calls were recorded as applied without their approval.
    Unapproved(Vec<String>),
    /// The killed worker finished without reaching the point.
    NotReached,
    /// The harness could not judge (a worker failed): why.
    Failed(String),
}

impl Verdict {
    /// Whether the promise held at this point (a point not reached tested nothing: not held).
    pub fn held(&self) -> bool {
        matches!(self, Verdict::Held { .. })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Held {
                effects,
                left_for_a_person,
            } => write!(
                f,
                "held: {effects} effect(s), each once; {left_for_a_person} left for a person"
            ),
            Verdict::Twice(repeated) => {
                let said: Vec<String> = repeated
                    .iter()
                    .map(|(effect, n)| format!("`{effect}` {n} times"))
                    .collect();
                write!(f, "TWICE: {}", said.join(", "))
            }
            Verdict::Lost(lost) => write!(
                f,
                "LOST: {} never happened, and no call was left for a person",
                lost.join(", ")
            ),
            Verdict::Unapproved(tools) => write!(
                f,
                "UNAPPROVED: {} applied without the approval that ran it",
                tools.join(", ")
            ),
            Verdict::NotReached => write!(f, "not reached (the killed worker finished first)"),
            Verdict::Failed(why) => write!(f, "FAILED to judge: {why}"),
        }
    }
}

/// One point and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PointVerdict {
    /// The point's number (`IDEM_CRASHTEST_POINT` replays it); `None`: the survey itself.
    pub at: Option<usize>,
    /// Where the worker was killed.
    pub point: String,
    /// What became of the scenario.
    pub verdict: Verdict,
}

impl PointVerdict {
    pub(super) fn new(at: usize, point: String, verdict: Verdict) -> Self {
        PointVerdict {
            at: Some(at),
            point,
            verdict,
        }
    }
}

/// Every point of a crash test and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The points the survey reached, in order.
    pub points: Vec<String>,
    /// The effects of the survey (the scenario without a crash).
    pub baseline: Vec<String>,
    /// Each point tried, and the survey's own verdict if it failed.
    pub verdicts: Vec<PointVerdict>,
    /// Why the test could not run, if it could not.
    pub failure: Option<String>,
    /// Where the runs' stores, ledgers and workers' output were kept (a test that did not
    /// hold keeps them, to look at).
    pub kept: Option<std::path::PathBuf>,
}

impl Report {
    pub(super) fn new(points: Vec<String>, baseline: Vec<String>) -> Self {
        Report {
            points,
            baseline,
            verdicts: Vec::new(),
            failure: None,
            kept: None,
        }
    }

    pub(super) fn failed(why: &str) -> Self {
        Report {
            points: Vec::new(),
            baseline: Vec::new(),
            verdicts: Vec::new(),
            failure: Some(why.to_owned()),
            kept: None,
        }
    }

    pub(super) fn push(&mut self, verdict: PointVerdict) {
        self.verdicts.push(verdict);
    }

    /// Whether the test ran and every point held.
    pub fn held(&self) -> bool {
        self.failure.is_none() && self.verdicts.iter().all(|v| v.verdict.held())
    }

    /// The points that did not hold.
    pub fn broken(&self) -> impl Iterator<Item = &PointVerdict> {
        self.verdicts.iter().filter(|v| !v.verdict.held())
    }

    /// Panic with the report unless every point held (what a `#[test]` calls).
    #[track_caller]
    pub fn assert_held(&self) {
        assert!(
            self.held(),
            "the crash test found what a crash breaks:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.failure {
            return write!(f, "crash test did not run: {why}");
        }
        writeln!(
            f,
            "{} point(s); the scenario without a crash applied {} effect(s)",
            self.points.len(),
            self.baseline.len()
        )?;
        for v in &self.verdicts {
            let at = v.at.map_or_else(|| "-".to_owned(), |a| a.to_string());
            writeln!(f, "{at:>4}  {}: {}", v.point, v.verdict)?;
        }
        let broken = self.broken().count();
        match broken {
            0 => write!(f, "every point held"),
            n => {
                write!(
                    f,
                    "{n} point(s) broke the promise; replay one with {}=<point>",
                    super::REPLAY
                )?;
                match &self.kept {
                    Some(dir) => write!(f, "; the runs are kept in {}", dir.display()),
                    None => Ok(()),
                }
            }
        }
    }
}

/// How many times each effect is in a ledger.
fn counts(effects: &[String]) -> BTreeMap<&str, usize> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for e in effects {
        *counts.entry(e).or_default() += 1;
    }
    counts
}

/// The verdict of a point from the ledger after the resume, the survey's ledger, and the
/// resumed worker's facts. Effects are compared by count with the survey's: an effect the
/// scenario makes twice on purpose is twice in both; one more than the survey's is TWICE.
pub(super) fn judge(baseline: &[String], effects: &[String], facts: &Value) -> Verdict {
    let (expected, got) = (counts(baseline), counts(effects));
    let twice: Vec<(String, usize)> = got
        .iter()
        .filter(|(e, n)| **n > expected.get(*e).copied().unwrap_or(0).max(1))
        .map(|(e, n)| ((*e).to_owned(), *n))
        .collect();
    if !twice.is_empty() {
        return Verdict::Twice(twice);
    }
    let unapproved = super::strings(&facts["unapproved"]);
    if !unapproved.is_empty() {
        return Verdict::Unapproved(unapproved);
    }
    let left = facts["unknown"].as_u64().unwrap_or(0) as usize;
    let lost: Vec<String> = expected
        .iter()
        .filter(|(e, n)| got.get(*e).copied().unwrap_or(0) < **n)
        .map(|(e, _)| (*e).to_owned())
        .collect();
    if !lost.is_empty() && left == 0 {
        return Verdict::Lost(lost);
    }
    Verdict::Held {
        effects: effects.len(),
        left_for_a_person: left,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_point_is_judged_from_the_ledger_and_the_facts() {
        let baseline = lines(&["debit 100", "credit 100"]);
        let none = json!({"unknown": 0, "unapproved": []});
        assert!(judge(&baseline, &baseline, &none).held());
        let twice = judge(
            &baseline,
            &lines(&["debit 100", "debit 100", "credit 100"]),
            &none,
        );
        assert_eq!(twice, Verdict::Twice(vec![("debit 100".into(), 2)]));
        assert!(twice.to_string().contains("`debit 100` 2 times"));
        let lost = judge(&baseline, &lines(&["debit 100"]), &none);
        assert_eq!(lost, Verdict::Lost(lines(&["credit 100"])));
        // Missing, but a call waits for a person: held, and said.
        let left = json!({"unknown": 1, "unapproved": []});
        assert_eq!(
            judge(&baseline, &lines(&["debit 100"]), &left),
            Verdict::Held {
                effects: 1,
                left_for_a_person: 1
            }
        );
        let unapproved = json!({"unknown": 0, "unapproved": ["wire"]});
        assert_eq!(
            judge(&baseline, &baseline, &unapproved),
            Verdict::Unapproved(lines(&["wire"]))
        );
    }
}
