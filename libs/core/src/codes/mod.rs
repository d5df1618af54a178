//! One registry of what qtg writes when something goes wrong: every error code (on a node, in
//! a node event, in an API answer), with the HTTP status the API answers it with, what it
//! means and what an operator does — and the stuck-node runbook's cases. docs/error-codes.md
//! and the OpenAPI document's list of codes are generated from it.
//!
//! A code is used through its constant (`codes::PLAN_HASH_DRIFT`), never spelled: the
//! workspace test `tests/tests/codes.rs` fails on a code-like literal in the sources that is
//! not a constant of this table.

use serde::Serialize;

/// Where a code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Source {
    /// The HTTP API's answers.
    Api,
    /// The engine: claims, the arm, records, recovery's bookkeeping.
    Engine,
    /// The executor protocol: what an executor or signer answered (or failed to).
    Executor,
    Evm,
    Cex,
    Cctp,
    Ccip,
    /// The simulated lane (`make run`, tests).
    Sim,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "API",
            Source::Engine => "Engine",
            Source::Executor => "Executor protocol",
            Source::Evm => "EVM lane",
            Source::Cex => "CEX lane",
            Source::Cctp => "CCTP lane",
            Source::Ccip => "CCIP lane",
            Source::Sim => "Simulated lane",
        }
    }
}

/// One code of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CodeInfo {
    pub code: &'static str,
    pub source: Source,
    /// The HTTP status the API answers with this code, if it is an API answer.
    pub status: Option<u16>,
    pub meaning: &'static str,
    pub action: &'static str,
}

macro_rules! catalogue {
    ($( $code:ident {
        source: $source:ident,
        status: $status:expr,
        meaning: $meaning:expr,
        action: $action:expr $(,)?
    } )*) => {
        $(
            #[doc = $meaning]
            pub const $code: &str = stringify!($code);
        )*
        /// Every code, grouped by source.
        pub static CATALOGUE: &[CodeInfo] = &[$(
            CodeInfo {
                code: stringify!($code),
                source: Source::$source,
                status: $status,
                meaning: $meaning,
                action: $action,
            },
        )*];
    };
}

include!("catalogue.rs");

/// The registry's entry for `code`.
pub fn lookup(code: &str) -> Option<&'static CodeInfo> {
    CATALOGUE.iter().find(|c| c.code == code)
}

/// A case of the stuck-node runbook (docs/architecture.md §13): what diagnosis classifies a node as,
/// and what an operator cites to cancel against evidence (C6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum RunbookCase {
    C1,
    C2,
    C3a,
    C3b,
    C5,
    C6,
    C7,
}

impl RunbookCase {
    pub const ALL: [RunbookCase; 7] = [
        RunbookCase::C1,
        RunbookCase::C2,
        RunbookCase::C3a,
        RunbookCase::C3b,
        RunbookCase::C5,
        RunbookCase::C6,
        RunbookCase::C7,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunbookCase::C1 => "C1",
            RunbookCase::C2 => "C2",
            RunbookCase::C3a => "C3a",
            RunbookCase::C3b => "C3b",
            RunbookCase::C5 => "C5",
            RunbookCase::C6 => "C6",
            RunbookCase::C7 => "C7",
        }
    }

    pub fn parse(s: &str) -> Option<RunbookCase> {
        RunbookCase::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The case's name in the runbook.
    pub fn title(self) -> &'static str {
        match self {
            RunbookCase::C1 => "Recovery imminent",
            RunbookCase::C2 => "Lookback or matcher issue",
            RunbookCase::C3a => "Legacy entry",
            RunbookCase::C3b => "AUTH failure, then escalated",
            RunbookCase::C5 => "Perpetual observing",
            RunbookCase::C6 => "Not found",
            RunbookCase::C7 => "Processing",
        }
    }

    /// What the case looks like.
    pub fn meaning(self) -> &'static str {
        match self {
            RunbookCase::C1 => {
                "A submit attempt is pending (SUBMITTING or UNKNOWN with the attempt marker) and recovery has not \
                 reached it yet: it is within the lane's grace, or the movement is still executing."
            }
            RunbookCase::C2 => {
                "UNKNOWN with a pending attempt past its grace: recovery asked the venue and could not match the \
                 attempt (lookback window, matcher)."
            }
            RunbookCase::C3a => {
                "UNKNOWN, gated as a legacy entry: the reconciliation markers recovery needs are missing."
            }
            RunbookCase::C3b => {
                "UNKNOWN, gated after the venue refused recovery's credentials (`reconciliation_auth_failed`)."
            }
            RunbookCase::C5 => {
                "OBSERVING for too long (50 observations or an hour), or the venue answered a status the lane \
                 cannot map."
            }
            RunbookCase::C6 => "UNKNOWN and no venue reference was ever stored: the venue may never have received it.",
            RunbookCase::C7 => "SUBMITTED, OBSERVING or UNKNOWN while the venue is still processing.",
        }
    }

    /// What an operator does.
    pub fn action(self) -> &'static str {
        match self {
            RunbookCase::C1 => "Wait: recovery reconciles this attempt by idempotency key after the lane's grace.",
            RunbookCase::C2 => {
                "Escalate: check the venue by client order id / amount / address; there is no automatic resolution."
            }
            RunbookCase::C3a => "Escalate and preserve an incident artifact (markers, logs, venue console).",
            RunbookCase::C3b => {
                "Fix the venue credentials first (rotate key, update env, restart the worker), then escalate to the \
                 on-call operator."
            }
            RunbookCase::C5 => "File a bug with a fixture of the venue's status, then escalate the node.",
            RunbookCase::C6 => {
                "Confirm in the venue console that nothing was created; then cancel with runbook_case C6 and that \
                 evidence."
            }
            RunbookCase::C7 => "Wait: the venue is still processing; observation continues at its normal cadence.",
        }
    }
}

impl std::fmt::Display for RunbookCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// docs/error-codes.md: the registry as a page (`tests/tests/source_rules.rs` keeps the file in
/// step).
pub fn reference_page() -> String {
    let mut page = String::from(
        "# Error codes and runbook cases\n\n\
         Generated from `libs/core/src/codes/` \
         (`QTG_UPDATE_DOCS=1 cargo test -p qtg-tests --test source_rules`); \
         do not edit by hand.\n\n\
         A code is written on a node (`error_code`), in a node event, or answered by the API \
         (`{\"error\": {\"code\": …}}`, with the HTTP status shown).\n",
    );
    let mut source = None;
    for c in CATALOGUE {
        if source != Some(c.source) {
            source = Some(c.source);
            page.push_str(&format!(
                "\n## {}\n\n| Code | HTTP | Meaning | What to do |\n|---|---|---|---|\n",
                c.source.as_str()
            ));
        }
        let status = c.status.map(|s| s.to_string()).unwrap_or_default();
        page.push_str(&format!("| `{}` | {} | {} | {} |\n", c.code, status, cell(c.meaning), cell(c.action)));
    }
    page.push_str(
        "\n## Runbook cases\n\nWhat `GET /v3/movements/{id}/nodes/{node_key}/diagnosis` answers; \
        the full runbook is docs/architecture.md §13.\n\n\
        | Case | Name | Looks like | What to do |\n|---|---|---|---|\n",
    );
    for r in RunbookCase::ALL {
        page.push_str(&format!("| {} | {} | {} | {} |\n", r.as_str(), r.title(), cell(r.meaning()), cell(r.action())));
    }
    page
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_once_in_the_registry_and_spelled_as_its_name() {
        let mut seen = std::collections::HashSet::new();
        for c in CATALOGUE {
            assert!(seen.insert(c.code), "{} twice", c.code);
            assert!(c.code.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'), "{}", c.code);
            assert!(!c.meaning.is_empty() && !c.action.is_empty(), "{} needs a meaning and an action", c.code);
            assert_eq!(c.status.is_some(), c.source == Source::Api, "{}: only API answers carry a status", c.code);
        }
        assert_eq!(lookup(PLAN_HASH_DRIFT).map(|c| c.source), Some(Source::Engine));
        assert!(lookup("NO_SUCH_CODE").is_none());
    }

    #[test]
    fn runbook_cases_parse_back() {
        for r in RunbookCase::ALL {
            assert_eq!(RunbookCase::parse(r.as_str()), Some(r));
        }
        assert_eq!(RunbookCase::parse("C4"), None);
    }
}
