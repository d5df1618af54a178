//! Approval policy as code (docs/architecture.md §15): an ordered list of rules, the first
//! whose conditions all hold decides — block the movement, or name the approver groups it
//! needs — and a default for when none does. Pure: the caller resolves the address book and
//! the clock into a [`Subject`]; nothing here reads a database or the time.
//!
//! Approver groups are satisfied by distinct people: each approver fills at most one seat of
//! one group (a person in both finance and risk does not count twice), the requester never
//! counts, and one identity written two ways is one person ([`crate::text::same_principal`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::risk::Amount;
use crate::text::same_principal;

/// Most rules a policy may hold (a policy a person can still review).
pub const MAX_RULES: usize = 200;

/// The roles of qtg's API keys, lowest first; a group's `role` admits that role and above.
pub const ROLES: [&str; 5] = ["viewer", "requester", "approver", "operator", "admin"];

/// A role's place in [`ROLES`] (a higher role holds every lower one).
pub fn rank(role: &str) -> Option<usize> {
    ROLES.iter().position(|r| *r == role)
}

/// A policy document (`/v3/policies`), versioned by the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Named sets of principals the rules' approver groups refer to.
    #[serde(default)]
    pub groups: BTreeMap<String, Vec<String>>,
    /// In order: the first rule whose conditions all hold decides.
    pub rules: Vec<Rule>,
    /// What decides when no rule does (block, unless the policy says otherwise).
    #[serde(default = "Action::default_block")]
    pub default: Action,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    /// Every condition set must hold; an empty `when` matches every movement.
    #[serde(default)]
    pub when: When,
    pub action: Action,
}

/// A rule's conditions. An empty list or an absent bound does not narrow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct When {
    /// Template keys (exact).
    pub templates: Vec<String>,
    /// Assets (any case).
    pub assets: Vec<String>,
    /// The amount is at least this (a decimal).
    pub amount_at_least: Option<String>,
    /// The amount is below this (a decimal): tiers read `[at_least, below)`.
    pub amount_below: Option<String>,
    pub sources: Endpoint,
    pub destinations: Endpoint,
    /// The requester is one of these principals.
    pub requesters: Vec<String>,
    /// The requester's role is one of these.
    pub requester_roles: Vec<String>,
    /// UTC weekdays: mon, tue, wed, thu, fri, sat, sun.
    pub weekdays: Vec<String>,
    /// A UTC time of day window, `HH:MM` to `HH:MM` (from included, to excluded; a window
    /// whose end is before its start runs over midnight).
    pub hours: Option<Hours>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hours {
    pub from: String,
    pub to: String,
}

/// Which sources or destinations a rule covers: any of the listed addresses, address-book
/// entries or tags; `in_book` narrows to an active book entry (true) or to none (false).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Endpoint {
    /// Raw addresses or account names (any case).
    pub addresses: Vec<String>,
    /// Address-book entry names.
    pub book_entries: Vec<String>,
    /// Address-book tags.
    pub book_tags: Vec<String>,
    pub in_book: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// The movement is refused (at creation, approval and claim).
    Block { reason: String },
    /// The movement needs every group's approvals.
    Approve {
        groups: Vec<ApproverGroup>,
        /// How long the approvals may take (the movement expires sooner if this is shorter).
        #[serde(default)]
        approval_ttl_seconds: Option<u64>,
        /// The most the movement may pay in fees (checked by the lanes that quote one).
        #[serde(default)]
        max_fee: Option<String>,
    },
}

impl Action {
    fn default_block() -> Action {
        Action::Block { reason: "no rule of the policy covers this movement".into() }
    }
}

/// `min` approvals from the members: the named `group`'s principals, the listed `principals`,
/// and (when `role` is set) anyone holding that role or a higher one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproverGroup {
    pub min: u32,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub principals: Vec<String>,
    #[serde(default)]
    pub role: Option<String>,
}

impl ApproverGroup {
    /// How the group is named to a person: its group name, else its members.
    pub fn label(&self) -> String {
        match (&self.group, &self.role) {
            (Some(g), _) => g.clone(),
            (None, Some(r)) if self.principals.is_empty() => format!("role {r}"),
            _ => self.principals.join(", "),
        }
    }
}

/// An address-book entry as a rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookFacts {
    pub name: String,
    pub tags: Vec<String>,
}

/// The lanes a book entry names (`exec.<lane>.…` executor keys; any other key is `other`).
pub const BOOK_LANES: [&str; 6] = ["cex", "evm", "cctp", "ccip", "sim", "other"];

/// One end of a movement as the address book matches it: the lane and network it is paid
/// on, the address and the memo (or tag) beside it. A book entry covers it only when all four
/// agree — the same address on another chain, or with another memo at an exchange, may
/// belong to someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payee {
    pub lane: String,
    /// Empty when neither the intent nor the paying node names one.
    pub network: String,
    pub address: String,
    /// Empty when none is given.
    pub memo: String,
}

/// The text of a JSON string or integer (a chain id, a selector), trimmed; `None` if empty.
fn text_of(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Payee {
    /// Where `plan` pays `intent`'s destination, read as the lane that pays reads it (an
    /// intent cannot name one network or memo to the book and have another paid):
    /// - the address: `intent.destination` (a string, or an object's `address`), else the
    ///   paying node's `config.address`;
    /// - the paying node: the plan's last action node in topological order; its lane is its
    ///   executor key's `exec.<lane>.`;
    /// - `cex` (the CEX lane's withdrawal payload): the network is the node's `network`, else
    ///   the intent's; the memo the node's or the intent's `address_tag`, else `memo`;
    /// - `evm`, `cctp`, `ccip`: the chain the node pays on — its `destination_chain_selector`,
    ///   else `chain_id` (the intent cannot change it); no memo;
    /// - `sim`, `other` (a remote executor may read either): the node's `network`,
    ///   `destination_chain_selector` or `chain_id`, else the intent's (or its destination
    ///   object's) `network`; the memo from any of `address_tag`, `memo`, `tag` on the node,
    ///   the intent or its destination object.
    ///
    /// `None` without an address.
    pub fn destination(plan: &crate::plan::PlanDefinition, intent: &serde_json::Value) -> Option<Payee> {
        let node = plan.action_nodes_in_order().last().copied();
        let dest = intent.get("destination");
        let object = dest.filter(|d| d.is_object());
        let address = match dest {
            Some(serde_json::Value::Object(o)) => text_of(o.get("address")),
            other => text_of(other),
        }
        .or_else(|| node.and_then(|n| text_of(n.config.get("address"))))?;
        let lane = node.map_or("other", |n| Self::lane_of(&n.executor_key));
        let from_node = |field: &str| node.and_then(|n| text_of(n.config.get(field)));
        let from_intent = |field: &str| text_of(intent.get(field));
        let from_object = |field: &str| object.and_then(|o| text_of(o.get(field)));
        let either = |field: &str| from_node(field).or_else(|| from_intent(field));
        let chain = || from_node("destination_chain_selector").or_else(|| from_node("chain_id"));
        let (network, memo) = match lane {
            "cex" => (either("network"), either("address_tag").or_else(|| either("memo"))),
            "evm" | "cctp" | "ccip" => (chain(), None),
            _ => (
                from_node("network")
                    .or_else(chain)
                    .or_else(|| from_intent("network"))
                    .or_else(|| from_object("network")),
                ["address_tag", "memo", "tag"].iter().find_map(|f| either(f).or_else(|| from_object(f))),
            ),
        };
        Some(Payee {
            lane: lane.to_string(),
            network: network.unwrap_or_default(),
            address,
            memo: memo.unwrap_or_default(),
        })
    }

    /// Where `plan` takes `intent.source` from: on the lane and network (`config.network`,
    /// then `chain_id`) of the plan's first action node, without a memo.
    pub fn source(plan: &crate::plan::PlanDefinition, intent: &serde_json::Value) -> Option<Payee> {
        let node = plan.action_nodes_in_order().first().copied();
        let from_node = |field: &str| node.and_then(|n| text_of(n.config.get(field)));
        Some(Payee {
            lane: node.map_or("other", |n| Self::lane_of(&n.executor_key)).to_string(),
            network: from_node("network").or_else(|| from_node("chain_id")).unwrap_or_default(),
            address: text_of(intent.get("source"))?,
            memo: String::new(),
        })
    }

    /// The book lane of an executor key: `exec.<lane>.…` for a known lane, else `other`.
    pub fn lane_of(executor_key: &str) -> &'static str {
        let mut parts = executor_key.split('.');
        match (parts.next(), parts.next()) {
            (Some("exec"), Some(lane)) => BOOK_LANES.iter().find(|l| **l == lane).copied().unwrap_or("other"),
            _ => "other",
        }
    }

    /// Whether a book entry (lane, network, address, memo) covers this end: the same lane,
    /// the same network (any case) or an entry naming none, the same address (any case) and
    /// exactly the same memo (none for none).
    pub fn matches(&self, lane: &str, network: &str, address: &str, memo: &str) -> bool {
        lane == self.lane
            && (network.is_empty() || network.eq_ignore_ascii_case(&self.network))
            && address.to_lowercase() == self.address.to_lowercase()
            && memo == self.memo
    }
}

/// What a policy is evaluated against: a movement, its requester, the book's view of its
/// endpoints (active entries only) and the UTC moment.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    pub template_key: &'a str,
    pub asset: &'a str,
    pub amount: &'a Amount,
    pub source: Option<&'a str>,
    pub destination: Option<&'a str>,
    pub source_entry: Option<&'a BookFacts>,
    pub destination_entry: Option<&'a BookFacts>,
    pub requester: &'a str,
    pub requester_role: Option<&'a str>,
    /// 0 = Monday … 6 = Sunday (UTC).
    pub weekday: u8,
    /// Minutes since UTC midnight.
    pub minute: u16,
}

/// Which rule decided, and what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The rule's position (from 0); `None`: the default.
    pub rule_index: Option<usize>,
    pub rule: String,
    pub action: Action,
}

impl Decision {
    pub fn blocked(&self) -> Option<&str> {
        match &self.action {
            Action::Block { reason } => Some(reason),
            Action::Approve { .. } => None,
        }
    }

    pub fn groups(&self) -> &[ApproverGroup] {
        match &self.action {
            Action::Approve { groups, .. } => groups,
            Action::Block { .. } => &[],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// Minutes of the day of an `HH:MM` time (UTC), or `None` when it is not one.
pub fn minutes(hhmm: &str) -> Option<u16> {
    let (h, m) = hhmm.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

fn any_case(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x.eq_ignore_ascii_case(v))
}

impl Endpoint {
    fn is_empty(&self) -> bool {
        self.addresses.is_empty() && self.book_entries.is_empty() && self.book_tags.is_empty() && self.in_book.is_none()
    }

    fn matches(&self, value: Option<&str>, entry: Option<&BookFacts>) -> bool {
        if let Some(want) = self.in_book {
            if want != entry.is_some() {
                return false;
            }
        }
        let listed = !self.addresses.is_empty() || !self.book_entries.is_empty() || !self.book_tags.is_empty();
        if !listed {
            return true;
        }
        value.is_some_and(|v| any_case(&self.addresses, v))
            || entry.is_some_and(|e| {
                self.book_entries.iter().any(|n| n.eq_ignore_ascii_case(&e.name))
                    || e.tags.iter().any(|t| any_case(&self.book_tags, t))
            })
    }
}

impl When {
    /// Whether every condition holds for `s`. Bounds were checked by [`Policy::validate`]; an
    /// unreadable one never matches.
    pub fn matches(&self, s: &Subject) -> bool {
        let amount_ok = |bound: &Option<String>, at_least: bool| match bound {
            None => true,
            Some(b) => Amount::parse(b).is_some_and(|b| if at_least { *s.amount >= b } else { *s.amount < b }),
        };
        (self.templates.is_empty() || self.templates.iter().any(|t| t == s.template_key))
            && (self.assets.is_empty() || any_case(&self.assets, s.asset))
            && amount_ok(&self.amount_at_least, true)
            && amount_ok(&self.amount_below, false)
            && (self.sources.is_empty() || self.sources.matches(s.source, s.source_entry))
            && (self.destinations.is_empty() || self.destinations.matches(s.destination, s.destination_entry))
            && (self.requesters.is_empty() || self.requesters.iter().any(|r| same_principal(r, s.requester)))
            && (self.requester_roles.is_empty()
                || s.requester_role.is_some_and(|r| self.requester_roles.iter().any(|x| x == r)))
            && (self.weekdays.is_empty()
                || self.weekdays.iter().any(|d| WEEKDAYS.get(s.weekday as usize) == Some(&d.as_str())))
            && self.hours.as_ref().is_none_or(|h| match (minutes(&h.from), minutes(&h.to)) {
                (Some(from), Some(to)) if from <= to => (from..to).contains(&s.minute),
                (Some(from), Some(to)) => s.minute >= from || s.minute < to,
                _ => false,
            })
    }
}

impl Policy {
    /// Parses and validates a policy document.
    pub fn from_json(v: &serde_json::Value) -> Result<Policy, PolicyError> {
        let p: Policy = serde_json::from_value(v.clone()).map_err(|e| PolicyError(format!("policy: {e}")))?;
        p.validate()?;
        Ok(p)
    }

    /// Everything a person reviewing the policy must be able to trust: readable names, bounds
    /// that parse and make a range, known weekdays, roles and groups, times of day, groups
    /// that can be satisfied.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let err = |m: String| Err(PolicyError(m));
        if self.rules.len() > MAX_RULES {
            return err(format!("a policy holds at most {MAX_RULES} rules"));
        }
        let plain =
            |field: &str, v: &str| crate::text::check_plain(field, v, 200).map_err(|e| PolicyError(e.to_string()));
        for (name, members) in &self.groups {
            plain("group name", name)?;
            if members.is_empty() {
                return err(format!("group {name:?} has no member"));
            }
            for m in members {
                plain(&format!("group {name:?} member"), m)?;
            }
        }
        let mut names = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let at = format!("rule {} ({:?})", i + 1, r.name);
            plain(&format!("rule {} name", i + 1), &r.name)?;
            if names.iter().any(|n: &&String| n.eq_ignore_ascii_case(&r.name)) {
                return err(format!("{at}: two rules have this name"));
            }
            names.push(&r.name);
            self.check_when(&at, &r.when)?;
            self.check_action(&at, &r.action)?;
        }
        self.check_action("default", &self.default)
    }

    fn check_when(&self, at: &str, w: &When) -> Result<(), PolicyError> {
        let err = |m: String| Err(PolicyError(format!("{at}: {m}")));
        let bound = |b: &Option<String>, name: &str| match b {
            None => Ok(None),
            Some(v) => Amount::parse(v).map(Some).ok_or_else(|| PolicyError(format!("{at}: {name} must be a decimal"))),
        };
        if let (Some(lo), Some(hi)) =
            (bound(&w.amount_at_least, "amount_at_least")?, bound(&w.amount_below, "amount_below")?)
        {
            if lo >= hi {
                return err("amount_at_least must be below amount_below".into());
            }
        }
        for d in &w.weekdays {
            if !WEEKDAYS.contains(&d.as_str()) {
                return err(format!("weekday {d:?} is not one of {}", WEEKDAYS.join(", ")));
            }
        }
        for r in &w.requester_roles {
            if rank(r).is_none() {
                return err(format!("role {r:?} is not one of {}", ROLES.join(", ")));
            }
        }
        if let Some(h) = &w.hours {
            if minutes(&h.from).is_none() || minutes(&h.to).is_none() || h.from == h.to {
                return err("hours must be two different HH:MM times (UTC)".into());
            }
        }
        for list in [
            &w.templates,
            &w.assets,
            &w.requesters,
            &w.sources.addresses,
            &w.destinations.addresses,
            &w.sources.book_entries,
            &w.destinations.book_entries,
            &w.sources.book_tags,
            &w.destinations.book_tags,
        ] {
            for v in list {
                crate::text::check_plain("a rule's value", v, 200).map_err(|e| PolicyError(format!("{at}: {e}")))?;
            }
        }
        Ok(())
    }

    fn check_action(&self, at: &str, a: &Action) -> Result<(), PolicyError> {
        let err = |m: String| Err(PolicyError(format!("{at}: {m}")));
        match a {
            Action::Block { reason } => {
                crate::text::check_plain("reason", reason, 500).map_err(|e| PolicyError(format!("{at}: {e}")))
            }
            Action::Approve { groups, max_fee, approval_ttl_seconds } => {
                if groups.is_empty() {
                    return err("an approve action names at least one approver group".into());
                }
                if max_fee.as_deref().is_some_and(|f| Amount::parse(f).is_none()) {
                    return err("max_fee must be a decimal".into());
                }
                if approval_ttl_seconds.is_some_and(|t| t == 0 || t > 2_592_000) {
                    return err("approval_ttl_seconds must be between 1 and 2592000 (30 days)".into());
                }
                for g in groups {
                    if g.min == 0 || g.min > 50 {
                        return err("a group's min is between 1 and 50".into());
                    }
                    for p in &g.principals {
                        crate::text::check_plain("a group's principal", p, 200)
                            .map_err(|e| PolicyError(format!("{at}: {e}")))?;
                    }
                    if let Some(name) = &g.group {
                        if !self.groups.contains_key(name) {
                            return err(format!("group {name:?} is not defined in the policy's groups"));
                        }
                    }
                    if let Some(r) = &g.role {
                        if rank(r).is_none_or(|k| k < 2) {
                            return err(format!("role {r:?}: approvers hold the approver role or a higher one"));
                        }
                    }
                    if g.group.is_none() && g.principals.is_empty() && g.role.is_none() {
                        return err("a group names its members: group, principals or role".into());
                    }
                    // Named members only: there must be enough of them.
                    if g.role.is_none() {
                        let mut members = g.principals.clone();
                        if let Some(name) = &g.group {
                            members.extend(self.groups[name].iter().cloned());
                        }
                        let mut distinct: Vec<&String> = Vec::new();
                        for m in &members {
                            if !distinct.iter().any(|d| same_principal(d, m)) {
                                distinct.push(m);
                            }
                        }
                        if (distinct.len() as u32) < g.min {
                            return err(format!(
                                "group {} needs {} approvals but has {} members",
                                g.label(),
                                g.min,
                                distinct.len()
                            ));
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// The first rule whose conditions all hold, else the default.
    pub fn decide(&self, s: &Subject) -> Decision {
        match self.rules.iter().position(|r| r.when.matches(s)) {
            Some(i) => {
                Decision { rule_index: Some(i), rule: self.rules[i].name.clone(), action: self.rules[i].action.clone() }
            }
            None => Decision { rule_index: None, rule: "default".into(), action: self.default.clone() },
        }
    }

    /// Whether `principal` (holding `role`) is a member of group `g`.
    pub fn is_member(&self, g: &ApproverGroup, principal: &str, role: &str) -> bool {
        g.principals.iter().any(|p| same_principal(p, principal))
            || g.group
                .as_ref()
                .and_then(|n| self.groups.get(n))
                .is_some_and(|m| m.iter().any(|p| same_principal(p, principal)))
            || g.role.as_deref().and_then(rank).zip(rank(role)).is_some_and(|(need, has)| has >= need)
    }

    /// How far `approvers` (principal, role) go towards `groups`: each distinct person fills at
    /// most one seat, the requester none. The most seats they can fill, by group.
    pub fn progress(&self, groups: &[ApproverGroup], approvers: &[(String, String)], requester: &str) -> Progress {
        let mut people: Vec<&(String, String)> = Vec::new();
        for a in approvers {
            if !same_principal(&a.0, requester) && !people.iter().any(|p| same_principal(&p.0, &a.0)) {
                people.push(a);
            }
        }
        // Seats: group i's `min` of them; people match seats of groups they belong to.
        let seats: Vec<usize> =
            groups.iter().enumerate().flat_map(|(i, g)| std::iter::repeat_n(i, g.min as usize)).collect();
        let can = |p: usize, seat: usize| self.is_member(&groups[seats[seat]], &people[p].0, &people[p].1);
        let mut seat_of: Vec<Option<usize>> = vec![None; seats.len()];
        fn augment(
            p: usize,
            seen: &mut [bool],
            seat_of: &mut [Option<usize>],
            can: &dyn Fn(usize, usize) -> bool,
        ) -> bool {
            for s in 0..seat_of.len() {
                if seen[s] || !can(p, s) {
                    continue;
                }
                seen[s] = true;
                if seat_of[s].is_none_or(|q| augment(q, seen, seat_of, can)) {
                    seat_of[s] = Some(p);
                    return true;
                }
            }
            false
        }
        for p in 0..people.len() {
            let mut seen = vec![false; seats.len()];
            augment(p, &mut seen, &mut seat_of, &can);
        }
        let groups = groups
            .iter()
            .enumerate()
            .map(|(i, g)| GroupProgress {
                group: g.label(),
                min: g.min,
                approved_by: seats
                    .iter()
                    .zip(&seat_of)
                    .filter(|(gi, who)| **gi == i && who.is_some())
                    .filter_map(|(_, who)| who.map(|p| people[p].0.clone()))
                    .collect(),
            })
            .collect::<Vec<_>>();
        let satisfied = groups.iter().all(|g| g.approved_by.len() as u32 >= g.min);
        Progress { groups, satisfied }
    }

    /// Whether one more approval by `principal` fills a seat the others leave empty.
    pub fn would_count(
        &self,
        groups: &[ApproverGroup],
        approvers: &[(String, String)],
        requester: &str,
        principal: &str,
        role: &str,
    ) -> bool {
        if same_principal(principal, requester) || approvers.iter().any(|a| same_principal(&a.0, principal)) {
            return false;
        }
        let filled = |p: &Progress| p.groups.iter().map(|g| g.approved_by.len()).sum::<usize>();
        let before = filled(&self.progress(groups, approvers, requester));
        let mut with = approvers.to_vec();
        with.push((principal.to_string(), role.to_string()));
        filled(&self.progress(groups, &with, requester)) > before
    }
}

/// A group's seats and who fills them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupProgress {
    pub group: String,
    pub min: u32,
    pub approved_by: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    pub groups: Vec<GroupProgress>,
    pub satisfied: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn plan(plan: serde_json::Value) -> crate::plan::PlanDefinition {
        serde_json::from_value(plan).expect("a plan")
    }

    #[test]
    fn the_payee_is_where_the_last_action_pays() {
        // CCTP: the mint (after the burn) pays, on the destination chain.
        let cctp = plan(json!({"nodes": [
            {"node_key": "mint", "node_kind": "action", "action_type": "cctp_mint", "executor_key": "exec.cctp.mint",
             "config": {"chain_id": 31338}},
            {"node_key": "burn", "node_kind": "action", "action_type": "cctp_burn", "executor_key": "exec.cctp.burn",
             "config": {"chain_id": 31337}},
            {"node_key": "z", "node_kind": "observe", "action_type": "cctp_attestation",
             "executor_key": "exec.cctp.attestation", "config": {"chain_id": 1}}],
            "edges": [{"from": "burn", "to": "z"}, {"from": "z", "to": "mint"}]}));
        let p = Payee::destination(&cctp, &json!({"destination": "0xAbC", "source": "0x1"})).expect("a payee");
        assert_eq!(
            (p.lane.as_str(), p.network.as_str(), p.address.as_str(), p.memo.as_str()),
            ("cctp", "31338", "0xAbC", "")
        );
        let s = Payee::source(&cctp, &json!({"destination": "0xAbC", "source": "0x1"})).expect("a source");
        assert_eq!((s.network.as_str(), s.address.as_str()), ("31337", "0x1"));
        // CCIP: the destination chain's selector, not the source chain.
        let ccip = plan(json!({"nodes": [{"node_key": "send", "node_kind": "action", "action_type": "ccip_send",
            "executor_key": "exec.ccip.send",
            "config": {"chain_id": 1, "destination_chain_selector": "4949039107694359620"}}]}));
        assert_eq!(
            Payee::destination(&ccip, &json!({"destination": "0xd"})).map(|p| p.network),
            Some("4949039107694359620".into())
        );
        // CEX: as the withdrawal payload reads them — the node's network first, the tag from
        // address_tag before memo; an intent cannot name another network to the book.
        let cex = plan(json!({"nodes": [{"node_key": "w", "node_kind": "action", "action_type": "cex_withdrawal",
            "executor_key": "exec.cex.withdrawal_action.a", "config": {"network": "ETH", "address": "rFixed"}}]}));
        let p = Payee::destination(&cex, &json!({"network": "XRP", "memo": " 42 "})).expect("the node's address");
        let got = (p.lane.as_str(), p.network.as_str(), p.address.as_str(), p.memo.as_str());
        assert_eq!(got, ("cex", "ETH", "rFixed", "42"));
        let p = Payee::destination(&cex, &json!({"destination": "rX", "address_tag": "999", "memo": "1"}));
        assert_eq!(p.map(|p| p.memo), Some("999".into()), "the tag the payload sends");
        // EVM: the chain the node pays on, whatever the intent says.
        let evm = plan(json!({"nodes": [{"node_key": "t", "node_kind": "action", "action_type": "evm_transfer",
            "executor_key": "exec.evm.transfer", "config": {"chain_id": 31337}}]}));
        let p = Payee::destination(&evm, &json!({"destination": "0xA", "network": "1", "memo": "x"})).expect("a payee");
        assert_eq!((p.network.as_str(), p.memo.as_str()), ("31337", ""));
        // Sim or a remote executor: any memo-like field counts.
        let sim = plan(json!({"nodes": [{"node_key": "s", "node_kind": "action", "action_type": "t",
            "executor_key": "exec.sim.transfer"}]}));
        let p = Payee::destination(&sim, &json!({"destination": {"address": "rX", "tag": "7"}, "network": "XRP"}));
        assert_eq!(p.map(|p| (p.network, p.memo)), Some(("XRP".into(), "7".into())));
        // A remote executor's key is lane `other`; no address, no payee.
        let remote = plan(json!({"nodes": [{"node_key": "g", "node_kind": "action", "action_type": "t",
                              "executor_key": "exec.ex.grpc"}]}));
        assert_eq!(Payee::destination(&remote, &json!({"destination": "x"})).map(|p| p.lane), Some("other".into()));
        assert_eq!(Payee::destination(&remote, &json!({"amount": "1"})), None);
    }

    #[test]
    fn a_book_entry_covers_a_payee_only_on_its_lane_network_and_memo() {
        let p = Payee { lane: "cex".into(), network: "XRP".into(), address: "rAbC".into(), memo: "42".into() };
        assert!(p.matches("cex", "xrp", "RABC", "42"), "network and address in any case");
        assert!(p.matches("cex", "", "rAbC", "42"), "an entry naming no network covers any");
        assert!(!p.matches("evm", "XRP", "rAbC", "42"), "another lane");
        assert!(!p.matches("cex", "ETH", "rAbC", "42"), "another network");
        assert!(!p.matches("cex", "XRP", "rAbC", ""), "an entry without the memo");
        assert!(!p.matches("cex", "XRP", "rAbC", "420"), "another memo");
        assert!(!p.matches("cex", "XRP", "rAbD", "42"), "another address");
        let none = Payee { memo: String::new(), ..p };
        assert!(!none.matches("cex", "XRP", "rAbC", "42"), "a memo the movement does not carry");
    }

    fn subject<'a>(amount: &'a Amount, template: &'a str, asset: &'a str) -> Subject<'a> {
        Subject {
            template_key: template,
            asset,
            amount,
            source: Some("venue-a"),
            destination: Some("0xabc"),
            source_entry: None,
            destination_entry: None,
            requester: "treasury-bot",
            requester_role: Some("requester"),
            weekday: 2,
            minute: 600,
        }
    }

    fn tiered() -> Policy {
        Policy::from_json(&json!({
            "groups": {"finance": ["alice", "bob", "erin"], "risk": ["carol", "dave"]},
            "rules": [
                {"name": "sanctioned", "when": {"destinations": {"addresses": ["0xbad"]}},
                 "action": {"type": "block", "reason": "sanctioned address"}},
                {"name": "small", "when": {"amount_below": "10000"},
                 "action": {"type": "approve", "groups": [{"min": 1, "role": "approver"}]}},
                {"name": "large", "when": {"amount_at_least": "10000"},
                 "action": {"type": "approve", "groups": [{"min": 2, "group": "finance"}, {"min": 1, "group": "risk"}]}}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn tiers_blocks_and_the_default() {
        let p = tiered();
        let small = Amount::parse("9999.99").unwrap();
        assert_eq!(p.decide(&subject(&small, "t", "USDC")).rule, "small");
        let large = Amount::parse("10000").unwrap();
        let d = p.decide(&subject(&large, "t", "USDC"));
        assert_eq!((d.rule.as_str(), d.groups().len()), ("large", 2));
        let mut s = subject(&small, "t", "USDC");
        s.destination = Some("0xBAD");
        assert_eq!(p.decide(&s).blocked(), Some("sanctioned address"));
        let none = Policy::from_json(&json!({"rules": []})).unwrap();
        assert_eq!(none.decide(&subject(&small, "t", "USDC")).rule_index, None);
        assert!(none.decide(&subject(&small, "t", "USDC")).blocked().is_some(), "block unless configured otherwise");
    }

    #[test]
    fn distinct_people_fill_distinct_seats() {
        let p = tiered();
        let groups = p.decide(&subject(&Amount::parse("50000").unwrap(), "t", "USDC")).groups().to_vec();
        let a = |v: &[&str]| v.iter().map(|p| (p.to_string(), "approver".to_string())).collect::<Vec<_>>();
        assert!(!p.progress(&groups, &a(&["alice", "bob"]), "treasury-bot").satisfied, "risk still missing");
        assert!(p.progress(&groups, &a(&["alice", "bob", "carol"]), "treasury-bot").satisfied);
        assert!(
            !p.progress(&groups, &a(&["alice", "ALICE", "carol"]), "treasury-bot").satisfied,
            "one person, two spellings"
        );
        assert!(!p.progress(&groups, &a(&["alice", "bob", "carol"]), "carol").satisfied, "the requester never counts");
        assert!(p.would_count(&groups, &a(&["alice"]), "treasury-bot", "carol", "approver"));
        assert!(!p.would_count(&groups, &a(&["alice", "bob"]), "treasury-bot", "erin", "approver"), "finance is full");
        // A person in both groups fills one seat: the matching puts them where they help.
        let both = Policy::from_json(&json!({
            "groups": {"finance": ["alice", "bob"], "risk": ["alice", "carol"]},
            "rules": [{"name": "r", "action": {"type": "approve",
                "groups": [{"min": 1, "group": "finance"}, {"min": 1, "group": "risk"}]}}]
        }))
        .unwrap();
        let g = both.rules[0].action.clone();
        let Action::Approve { groups, .. } = g else { unreachable!() };
        assert!(!both.progress(&groups, &a(&["alice"]), "x").satisfied);
        assert!(both.progress(&groups, &a(&["alice", "bob"]), "x").satisfied, "alice moves to risk, bob takes finance");
    }

    #[test]
    fn time_windows_in_utc() {
        let p = Policy::from_json(&json!({"rules": [{"name": "office", "when": {"weekdays": ["mon", "tue", "wed",
            "thu", "fri"],
            "hours": {"from": "08:00", "to": "18:00"}}, "action": {"type": "approve", "groups": [{"min": 1,
                "role": "approver"}]}}]}))
        .unwrap();
        let one = Amount::parse("1").unwrap();
        let mut s = subject(&one, "t", "USDC");
        (s.weekday, s.minute) = (2, 8 * 60);
        assert_eq!(p.decide(&s).rule, "office");
        (s.weekday, s.minute) = (2, 18 * 60);
        assert_eq!(p.decide(&s).rule, "default", "the window's end is excluded");
        (s.weekday, s.minute) = (5, 9 * 60);
        assert_eq!(p.decide(&s).rule, "default", "Saturday");
        let night = Policy::from_json(&json!({"rules": [{"name": "night", "when": {"hours": {"from": "22:00",
            "to": "06:00"}},
            "action": {"type": "block", "reason": "night"}}], "default": {"type": "approve", "groups": [{"min": 1,
                "role": "approver"}]}}))
        .unwrap();
        (s.weekday, s.minute) = (0, 23 * 60);
        assert_eq!(night.decide(&s).rule, "night");
        (s.weekday, s.minute) = (0, 5 * 60 + 59);
        assert_eq!(night.decide(&s).rule, "night");
        (s.weekday, s.minute) = (0, 6 * 60);
        assert_eq!(night.decide(&s).rule, "default");
    }

    #[test]
    fn the_book_narrows_endpoints() {
        let p = Policy::from_json(&json!({"rules": [
            {"name": "outside", "when": {"destinations": {"in_book": false}}, "action": {"type": "block",
                "reason": "not in the book"}},
            {"name": "exchanges", "when": {"destinations": {"book_tags": ["exchange"]}},
             "action": {"type": "approve", "groups": [{"min": 1, "role": "approver"}]}}
        ]}))
        .unwrap();
        let one = Amount::parse("1").unwrap();
        let mut s = subject(&one, "t", "USDC");
        assert_eq!(p.decide(&s).blocked(), Some("not in the book"));
        let entry = BookFacts { name: "binance-hot".into(), tags: vec!["exchange".into()] };
        s.destination_entry = Some(&entry);
        assert_eq!(p.decide(&s).rule, "exchanges");
        let other = BookFacts { name: "cold".into(), tags: vec!["custody".into()] };
        s.destination_entry = Some(&other);
        assert_eq!(p.decide(&s).rule, "default");
    }

    #[test]
    fn a_policy_a_reviewer_cannot_trust_is_refused() {
        for (doc, says) in [
            (
                json!({"rules": [{"name": "a", "when": {"amount_at_least": "10", "amount_below": "5"},
                    "action": {"type": "block", "reason": "x"}}]}),
                "below",
            ),
            (
                json!({"rules": [{"name": "a", "action": {"type": "approve", "groups": [{"min": 3,
                    "principals": ["x", "X", "y"]}]}}]}),
                "members",
            ),
            (
                json!({"rules": [{"name": "a", "action": {"type": "approve", "groups": [{"min": 1,
                    "group": "nope"}]}}]}),
                "not defined",
            ),
            (
                json!({"rules": [{"name": "a", "action": {"type": "approve", "groups": [{"min": 1,
                    "role": "requester"}]}}]}),
                "approver role",
            ),
            (
                json!({"rules": [{"name": "a", "when": {"weekdays": ["monday"]}, "action": {"type": "block",
                    "reason": "x"}}]}),
                "weekday",
            ),
            (
                json!({"rules": [{"name": "a", "when": {"hours": {"from": "8:00", "to": "18:00"}},
                    "action": {"type": "block", "reason": "x"}}]}),
                "HH:MM",
            ),
            (json!({"rules": [{"name": "a\u{200B}", "action": {"type": "block", "reason": "x"}}]}), "rule 1 name"),
            (
                json!({"rules": [{"name": "a", "action": {"type": "block", "reason": "x"}}, {"name": "A",
                    "action": {"type": "block", "reason": "y"}}]}),
                "two rules",
            ),
            (json!({"rules": [], "surprise": 1}), "unknown field"),
        ] {
            let e = Policy::from_json(&doc).unwrap_err().0;
            assert!(e.contains(says), "{doc}: {e}");
        }
    }

    // ---- properties ---------------------------------------------------------------------

    const TEMPLATES: [&str; 3] = ["t1", "t2", "t3"];
    const ASSETS: [&str; 3] = ["USDC", "ETH", "BTC"];

    /// A generated rule: some templates, some assets, an optional amount range in whole units.
    #[derive(Debug, Clone)]
    struct Gen {
        templates: Vec<usize>,
        assets: Vec<usize>,
        range: Option<(u32, u32)>,
    }

    fn gen() -> impl Strategy<Value = Gen> {
        (
            proptest::collection::vec(0usize..3, 0..3),
            proptest::collection::vec(0usize..3, 0..3),
            proptest::option::of((0u32..50, 1u32..50)),
        )
            .prop_map(|(templates, assets, range)| Gen {
                templates,
                assets,
                range: range.map(|(a, d)| (a, a + d)),
            })
    }

    fn build(rules: &[Gen]) -> Policy {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mut when = json!({});
                if !g.templates.is_empty() {
                    when["templates"] = json!(g.templates.iter().map(|t| TEMPLATES[*t]).collect::<Vec<_>>());
                }
                if !g.assets.is_empty() {
                    when["assets"] = json!(g.assets.iter().map(|a| ASSETS[*a].to_lowercase()).collect::<Vec<_>>());
                }
                if let Some((lo, hi)) = g.range {
                    when["amount_at_least"] = json!(lo.to_string());
                    when["amount_below"] = json!(hi.to_string());
                }
                json!({"name": format!("r{i}"), "when": when, "action": {"type": "block", "reason": format!("r{i}")}})
            })
            .collect::<Vec<_>>();
        Policy::from_json(&json!({"rules": rules})).unwrap()
    }

    /// The test's own reading of a generated rule, apart from the implementation's.
    fn holds(g: &Gen, t: usize, a: usize, amount: u32) -> bool {
        (g.templates.is_empty() || g.templates.contains(&t))
            && (g.assets.is_empty() || g.assets.contains(&a))
            && g.range.is_none_or(|(lo, hi)| lo <= amount && amount < hi)
    }

    proptest! {
        /// The decision is the first rule that holds, and the default when none does.
        #[test]
        fn first_match_wins(rules in proptest::collection::vec(gen(), 0..12), t in 0usize..3, a in 0usize..3,
            amount in 0u32..60) {
            let p = build(&rules);
            let amt = Amount::parse(&amount.to_string()).unwrap();
            let d = p.decide(&subject(&amt, TEMPLATES[t], ASSETS[a]));
            let expected = rules.iter().position(|g| holds(g, t, a, amount));
            prop_assert_eq!(d.rule_index, expected);
        }

        /// Rules after the deciding one, and rules that do not hold, never change a decision.
        #[test]
        fn later_and_non_matching_rules_are_inert(
            rules in proptest::collection::vec(gen(), 1..10), extra in gen(), t in 0usize..3, a in 0usize..3,
                amount in 0u32..60
        ) {
            let amt = Amount::parse(&amount.to_string()).unwrap();
            let s = subject(&amt, TEMPLATES[t], ASSETS[a]);
            let before = build(&rules).decide(&s);
            if let Some(i) = before.rule_index {
                let mut more = rules.clone();
                more.push(extra.clone());
                prop_assert_eq!(build(&more).decide(&s).rule_index, Some(i));
            }
            if !holds(&extra, t, a, amount) {
                let mut first = vec![extra];
                first.extend(rules.iter().cloned());
                prop_assert_eq!(build(&first).decide(&s).rule_index, before.rule_index.map(|i| i + 1));
            }
        }

        /// Seats filled by distinct people: satisfied exactly when some assignment of distinct
        /// approvers to seats exists (checked by brute force over small cases).
        #[test]
        fn progress_is_a_true_assignment(
            membership in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 2), 0..5),
            mins in (1u32..3, 1u32..3),
        ) {
            let names: Vec<String> = (0..membership.len()).map(|i| format!("p{i}")).collect();
            let mut groups_def = BTreeMap::new();
            for g in 0..2 {
                let members: Vec<String> = names.iter().zip(&membership).filter(|(_, m)| m[g]).map(|(n,
                    _)| n.clone()).collect();
                groups_def.insert(format!("g{g}"),
                    if members.is_empty() { vec!["nobody".to_string()] } else { members });
            }
            let p = Policy { groups: groups_def, rules: vec![], default: Action::default_block() };
            let groups = vec![
                ApproverGroup { min: mins.0, group: Some("g0".into()), principals: vec![], role: None },
                ApproverGroup { min: mins.1, group: Some("g1".into()), principals: vec![], role: None },
            ];
            let approvers: Vec<(String, String)> = names.iter().map(|n| (n.clone(), "approver".into())).collect();
            let got = p.progress(&groups, &approvers, "requester").satisfied;
            // Brute force: give each person group 0, group 1 or nothing.
            let n = names.len();
            let mut exists = false;
            for code in 0..3usize.pow(n as u32) {
                let (mut c, mut fill) = (code, [0u32; 2]);
                let mut ok = true;
                for m in membership.iter() {
                    let pick = c % 3;
                    c /= 3;
                    if pick < 2 {
                        if !m[pick] { ok = false; break; }
                        fill[pick] += 1;
                    }
                }
                if ok && fill[0] >= mins.0 && fill[1] >= mins.1 { exists = true; break; }
            }
            prop_assert_eq!(got, exists);
        }
    }
}
