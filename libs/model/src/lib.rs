//! The dispatch protocol of docs/architecture.md §6 (DESIGN.md §2.2) as a model the
//! `stateright` checker explores exhaustively: claim → lease → arm → submit → record, recovery
//! (its query and its compare-and-set apart), and an operator's retry — with dispatchers that
//! crash or stall at any step (a stalled one is simply not scheduled while the others run),
//! leases that expire under a slow holder, requests that reach the executor or the venue
//! arbitrarily late, and an executor clock that may lag. It checks that the venue executes a
//! node at most once across all its attempts and that no node is stranded. States are named
//! as the code names them; README.md beside this file maps them.
//!
//! Three fences (§6.3): the sim lane's key store (the executor refuses a void, older or late
//! key at receipt, and receipt is execution); the CEX lane's venue deadline (the executor
//! records and marks its key sent, and the venue refuses a request after `submit_by`); and
//! the EVM lane's sequence (one transaction per nonce; recovery forces an unused nonce). The
//! known-bad variants of [`Variant`] must each be found.

use std::collections::BTreeSet;

use stateright::{Model, Property};

/// A node's `node_state`, as far as dispatch and recovery move it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeState {
    Ready,
    Preparing,
    Submitting,
    Unknown,
    Completed,
    Failed,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Fence {
    /// `sim_keys`: receipt is execution; the executor refuses a void, older or late key, by
    /// its own clock (which may lag behind the database's).
    KeyStore,
    /// `cex_submit_keys` + the venue's `recvWindow`: the executor marks the key sent, the venue
    /// executes later, and refuses after `submit_by`.
    VenueDeadline,
    /// `evm_nonce_reservation`: one transaction per nonce executes; the node's reservation is
    /// reused until consumed.
    Sequence,
}

/// The protocol as built, or a known-bad variant the checker must catch.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Variant {
    Correct,
    /// Recover answers FAILED on absence without voiding the key.
    RecoverFailsWithoutVoid,
    /// Submit carries no `submit_by`: the venue cannot refuse a late request (and recovery
    /// concludes as if it could).
    SubmitWithoutDeadline,
    /// Every claim (a re-claim, a retry) reserves a new nonce, even while the old one may
    /// still be used.
    RetryTakesNewNonce,
}

/// A dispatcher process.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dispatcher {
    Idle,
    /// Holds the lease (its own `claim_token`) for attempt N = stored + 1, with `nonce`.
    Claimed {
        attempt: u8,
        nonce: u8,
    },
    /// Armed: SUBMITTING committed with attempt N; the submit not started.
    Armed {
        attempt: u8,
        nonce: u8,
    },
    /// The submit is on the wire.
    Waiting {
        attempt: u8,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Recovery {
    Idle,
    /// Between its venue query and its compare-and-set.
    Decided {
        attempt: u8,
        outcome: NodeState,
    },
}

/// The executor's key store entry for `{request_node_id}:{N}`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// Recorded and marked sent: the venue call is out.
    Sent,
    Executed,
    Void,
    /// Refused by the executor or the venue: never executes.
    Refused,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub node: NodeState,
    pub attempt_no: u8,
    /// The dispatcher whose `claim_token` the node holds.
    pub claim_token: Option<u8>,
    pub lease_expired: bool,
    /// The node's live nonce reservation, and the next free nonce.
    pub reservation: Option<u8>,
    pub next_nonce: u8,
    pub dispatchers: Vec<Dispatcher>,
    pub recovery: Recovery,
    /// Submits on the wire to the executor: (attempt, nonce, a nonce-forcing send).
    pub to_executor: BTreeSet<(u8, u8, bool)>,
    /// Venue calls on the wire (venue deadline fence): attempts.
    pub to_venue: BTreeSet<u8>,
    pub keys: Vec<Option<Key>>,
    /// `submit_by` + skew passed, by attempt (the database's clock).
    pub deadline_passed: Vec<bool>,
    /// Nonces consumed, by which attempt's transfer (None: a forcing send).
    pub consumed: Vec<(u8, Option<u8>)>,
    /// Executions at the venue, across all attempts: what must stay ≤ 1.
    pub executions: u8,
    /// What the engine knows: the armed attempt's FAILED came from Submit or from Recover (so
    /// an operator may retry, §6.5). The engine trusts the executor's fence.
    pub fenced: bool,
    pub crashes_left: u8,
    pub retries_left: u8,
    /// The executor's clock may judge one late submit on time.
    pub clock_lag_left: u8,
    /// Claims left (bounds the bad nonce variant, whose every claim is a new nonce).
    pub claims_left: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    Claim(usize),
    Arm(usize),
    Submit(usize),
    Record(usize),
    /// Submit answered FAILED: the node refused the transaction (certainly: it is in no pool).
    RecordRefused(usize),
    Timeout(usize),
    Crash(usize),
    LeaseExpires,
    DeadlinePasses,
    /// A submit reaches the executor; `lagging`: its clock judges a late one on time.
    Receive {
        attempt: u8,
        nonce: u8,
        cancel: bool,
        lagging: bool,
    },
    /// A venue call reaches the venue (venue deadline fence).
    VenueExecutes(u8),
    RecoverQuery,
    RecoverRecord,
    OperatorRetry,
}

pub struct Protocol {
    pub dispatchers: usize,
    pub fence: Fence,
    pub variant: Variant,
    pub crashes: u8,
    pub retries: u8,
}

const MAX_ATTEMPTS: usize = 3;

impl Protocol {
    pub fn new(fence: Fence, variant: Variant) -> Protocol {
        Protocol { dispatchers: 2, fence, variant, crashes: 1, retries: 1 }
    }

    fn executed(&self, s: &State, attempt: u8) -> bool {
        match self.fence {
            Fence::Sequence => s.consumed.iter().any(|(_, by)| *by == Some(attempt)),
            _ => s.keys[attempt as usize] == Some(Key::Executed),
        }
    }

    /// Any transfer of the node executed (recovery finds every hash the node broadcast).
    fn any_executed(&self, s: &State) -> bool {
        (1..=s.attempt_no).any(|a| self.executed(s, a))
    }

    fn carries_deadline(&self) -> bool {
        self.variant != Variant::SubmitWithoutDeadline
    }
}

impl State {
    fn consumed_nonce(&self, nonce: u8) -> bool {
        self.consumed.iter().any(|(n, _)| *n == nonce)
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            node: NodeState::Ready,
            attempt_no: 0,
            claim_token: None,
            lease_expired: false,
            reservation: None,
            next_nonce: 0,
            dispatchers: vec![Dispatcher::Idle; self.dispatchers],
            recovery: Recovery::Idle,
            to_executor: BTreeSet::new(),
            to_venue: BTreeSet::new(),
            keys: vec![None; MAX_ATTEMPTS + 1],
            deadline_passed: vec![false; MAX_ATTEMPTS + 1],
            consumed: Vec::new(),
            executions: 0,
            fenced: false,
            crashes_left: self.crashes,
            retries_left: self.retries,
            clock_lag_left: 1,
            claims_left: 4,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for (i, d) in s.dispatchers.iter().enumerate() {
            match d {
                Dispatcher::Idle => {
                    let claimable = s.node == NodeState::Ready || (s.node == NodeState::Preparing && s.lease_expired);
                    if claimable && (s.attempt_no as usize) < MAX_ATTEMPTS && s.claims_left > 0 {
                        out.push(Action::Claim(i));
                    }
                }
                Dispatcher::Claimed { .. } => out.push(Action::Arm(i)),
                Dispatcher::Armed { .. } => out.push(Action::Submit(i)),
                Dispatcher::Waiting { attempt } => {
                    let answered = match self.fence {
                        Fence::Sequence => self.executed(s, *attempt),
                        _ => matches!(s.keys[*attempt as usize], Some(Key::Executed | Key::Refused)),
                    };
                    if answered {
                        out.push(Action::Record(i));
                    }
                    // A node's certain refusal (not in its pool): the transaction is off the wire.
                    if self.fence == Fence::Sequence && s.to_executor.iter().any(|(a, _, c)| a == attempt && !c) {
                        out.push(Action::RecordRefused(i));
                    }
                    out.push(Action::Timeout(i));
                }
            }
            if *d != Dispatcher::Idle && s.crashes_left > 0 {
                out.push(Action::Crash(i));
            }
        }
        if s.node == NodeState::Preparing && !s.lease_expired {
            out.push(Action::LeaseExpires);
        }
        if s.attempt_no > 0 && !s.deadline_passed[s.attempt_no as usize] {
            out.push(Action::DeadlinePasses);
        }
        for (attempt, nonce, cancel) in &s.to_executor {
            out.push(Action::Receive { attempt: *attempt, nonce: *nonce, cancel: *cancel, lagging: false });
            if s.clock_lag_left > 0 && s.deadline_passed[*attempt as usize] {
                out.push(Action::Receive { attempt: *attempt, nonce: *nonce, cancel: *cancel, lagging: true });
            }
        }
        for attempt in &s.to_venue {
            out.push(Action::VenueExecutes(*attempt));
        }
        match s.recovery {
            Recovery::Idle => {
                // SUBMITTING after submit_by + skew; UNKNOWN after the grace (longer).
                if matches!(s.node, NodeState::Submitting | NodeState::Unknown)
                    && s.deadline_passed[s.attempt_no as usize]
                {
                    out.push(Action::RecoverQuery);
                }
            }
            Recovery::Decided { .. } => out.push(Action::RecoverRecord),
        }
        if s.node == NodeState::Failed && s.fenced && s.retries_left > 0 {
            out.push(Action::OperatorRetry);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Claim(i) => {
                if self.variant == Variant::RetryTakesNewNonce {
                    s.claims_left -= 1;
                }
                s.node = NodeState::Preparing;
                s.claim_token = Some(i as u8);
                s.lease_expired = false;
                // Prepare reserves the node's nonce: its live one again, a new one only once
                // the old is consumed.
                let reuse =
                    s.reservation.filter(|n| !s.consumed_nonce(*n) && self.variant != Variant::RetryTakesNewNonce);
                let nonce = match reuse {
                    Some(n) => n,
                    None => {
                        s.next_nonce += 1;
                        s.next_nonce
                    }
                };
                s.reservation = Some(nonce);
                s.dispatchers[i] = Dispatcher::Claimed { attempt: s.attempt_no + 1, nonce };
            }
            Action::Arm(i) => {
                let Dispatcher::Claimed { attempt, nonce } = s.dispatchers[i].clone() else { return None };
                // Compare-and-set on (PREPARING, claim_token, attempt_no = N − 1).
                let ours = s.claim_token == Some(i as u8);
                if s.node == NodeState::Preparing && ours && s.attempt_no + 1 == attempt {
                    s.node = NodeState::Submitting;
                    s.attempt_no = attempt;
                    s.fenced = false;
                    s.dispatchers[i] = Dispatcher::Armed { attempt, nonce };
                } else {
                    s.dispatchers[i] = Dispatcher::Idle;
                }
            }
            Action::Submit(i) => {
                let Dispatcher::Armed { attempt, nonce } = s.dispatchers[i].clone() else { return None };
                // Started only while the submit window is open.
                if s.deadline_passed[attempt as usize] {
                    s.dispatchers[i] = Dispatcher::Idle;
                } else {
                    s.to_executor.insert((attempt, nonce, false));
                    s.dispatchers[i] = Dispatcher::Waiting { attempt };
                }
            }
            Action::Receive { attempt, nonce, cancel, lagging } => {
                s.to_executor.remove(&(attempt, nonce, cancel));
                if lagging {
                    s.clock_lag_left -= 1;
                }
                let a = attempt as usize;
                let late = s.deadline_passed[a] && !lagging && self.carries_deadline();
                let older = s.keys.iter().enumerate().any(|(b, k)| b > a && k.is_some());
                match self.fence {
                    Fence::KeyStore => match s.keys[a] {
                        Some(_) => {}
                        None if late || older => s.keys[a] = Some(Key::Refused),
                        None => {
                            s.keys[a] = Some(Key::Executed);
                            s.executions += 1;
                        }
                    },
                    Fence::VenueDeadline => match s.keys[a] {
                        Some(_) => {}
                        None if late || older => s.keys[a] = Some(Key::Refused),
                        None => {
                            s.keys[a] = Some(Key::Sent);
                            s.to_venue.insert(attempt);
                        }
                    },
                    Fence::Sequence => {
                        if !s.consumed_nonce(nonce) {
                            s.consumed.push((nonce, if cancel { None } else { Some(attempt) }));
                            if !cancel {
                                s.executions += 1;
                            }
                        }
                    }
                }
            }
            Action::VenueExecutes(attempt) => {
                s.to_venue.remove(&attempt);
                let a = attempt as usize;
                // The venue's own deadline (recvWindow ≤ submit_by − T), when one was sent.
                if s.deadline_passed[a] && self.carries_deadline() {
                    s.keys[a] = Some(Key::Refused);
                } else {
                    s.keys[a] = Some(Key::Executed);
                    s.executions += 1;
                }
            }
            Action::Record(i) | Action::RecordRefused(i) | Action::Timeout(i) => {
                let Dispatcher::Waiting { attempt } = s.dispatchers[i].clone() else { return None };
                s.dispatchers[i] = Dispatcher::Idle;
                if matches!(action, Action::RecordRefused(_)) {
                    s.to_executor.retain(|(a, _, c)| *a != attempt || *c);
                }
                let outcome = match action {
                    Action::Timeout(_) => NodeState::Unknown,
                    Action::RecordRefused(_) => NodeState::Failed,
                    _ if self.executed(&s, attempt) => NodeState::Completed,
                    _ => NodeState::Failed,
                };
                // Compare-and-set on (attempt_no = N, SUBMITTING or UNKNOWN).
                if s.attempt_no == attempt && matches!(s.node, NodeState::Submitting | NodeState::Unknown) {
                    s.node = outcome;
                    s.fenced = outcome == NodeState::Failed;
                }
            }
            Action::Crash(i) => {
                s.dispatchers[i] = Dispatcher::Idle;
                s.crashes_left -= 1;
            }
            Action::LeaseExpires => s.lease_expired = true,
            Action::DeadlinePasses => s.deadline_passed[s.attempt_no as usize] = true,
            Action::RecoverQuery => {
                let attempt = s.attempt_no;
                let a = attempt as usize;
                let outcome = if self.any_executed(&s) {
                    NodeState::Completed
                } else {
                    match self.fence {
                        Fence::KeyStore | Fence::VenueDeadline => match (s.keys[a], self.variant) {
                            (Some(Key::Refused | Key::Void), _) => NodeState::Failed,
                            (_, Variant::RecoverFailsWithoutVoid) => NodeState::Failed,
                            // Never received: voided, so it never will be.
                            (None, _) => {
                                s.keys[a] = Some(Key::Void);
                                NodeState::Failed
                            }
                            // Sent to the venue: conclusive because the query runs after
                            // submit_by, past which the venue refuses it (recvWindow).
                            (Some(Key::Sent), _) => NodeState::Failed,
                            _ => NodeState::Unknown,
                        },
                        Fence::Sequence => {
                            let nonce = s.reservation.unwrap_or(0);
                            if s.consumed_nonce(nonce) {
                                NodeState::Failed
                            } else {
                                // Nothing of the node's on chain, its nonce free: force it.
                                s.to_executor.insert((attempt, nonce, true));
                                NodeState::Unknown
                            }
                        }
                    }
                };
                s.recovery = Recovery::Decided { attempt, outcome };
            }
            Action::RecoverRecord => {
                let Recovery::Decided { attempt, outcome } = s.recovery.clone() else { return None };
                s.recovery = Recovery::Idle;
                if s.attempt_no == attempt && matches!(s.node, NodeState::Submitting | NodeState::Unknown) {
                    s.node = outcome;
                    s.fenced = outcome == NodeState::Failed;
                }
            }
            Action::OperatorRetry => {
                s.node = NodeState::Ready;
                s.claim_token = None;
                s.retries_left -= 1;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one venue execution per node", |_, s: &State| s.executions <= 1),
            Property::eventually("no node stranded", |_, s: &State| {
                s.node == NodeState::Completed || (s.node == NodeState::Failed && s.fenced)
            }),
            Property::sometimes("a node completes", |_, s: &State| s.node == NodeState::Completed),
            // A chain executes an address' transactions in nonce order: a nonce reserved past one
            // nothing will consume strands every later transaction of the address.
            Property::always("no nonce skipped below the node's live one", |m, s: &State| {
                m.fence != Fence::Sequence || s.reservation.is_none_or(|live| (1..live).all(|n| s.consumed_nonce(n)))
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use stateright::Checker;

    use super::*;

    fn check(fence: Fence, variant: Variant) -> impl Checker<Protocol> {
        Protocol::new(fence, variant).checker().spawn_bfs().join()
    }

    #[test]
    fn the_protocol_executes_once_and_strands_nothing_under_every_fence() {
        for fence in [Fence::KeyStore, Fence::VenueDeadline, Fence::Sequence] {
            let c = check(fence, Variant::Correct);
            c.assert_no_discovery("at most one venue execution per node");
            c.assert_no_discovery("no node stranded");
            c.assert_no_discovery("no nonce skipped below the node's live one");
            c.assert_any_discovery("a node completes");
            assert!(c.unique_state_count() > 1000, "{fence:?}: only {} states", c.unique_state_count());
        }
    }

    #[test]
    fn a_recover_that_fails_without_voiding_the_key_is_caught() {
        check(Fence::KeyStore, Variant::RecoverFailsWithoutVoid)
            .assert_any_discovery("at most one venue execution per node");
    }

    #[test]
    fn a_submit_without_submit_by_is_caught() {
        check(Fence::VenueDeadline, Variant::SubmitWithoutDeadline)
            .assert_any_discovery("at most one venue execution per node");
    }

    /// A new nonce for a retry (or a re-claim) leaves the old one unused below it: on a chain,
    /// which executes in nonce order, that strands the node and every later transaction of the
    /// address. (The double execution it would allow if the chain did not order nonces is
    /// not reachable here: Submit's FAILED is a certain refusal and Recover's comes after the
    /// nonce is consumed.)
    #[test]
    fn a_retry_that_takes_a_new_nonce_is_caught() {
        check(Fence::Sequence, Variant::RetryTakesNewNonce)
            .assert_any_discovery("no nonce skipped below the node's live one");
    }
}
