//! The fence (docs/executors.md, "The fence"): the executor's durable record of idempotency
//! keys and the refusals the SDK makes before a [`Handler`] runs.
//!
//! * Submit: **a key already recorded as sent keeps its outcome** — the handler is called
//!   again with it (same client id, so the venue answers the original order), whatever
//!   `submit_by` or newer attempts say: FAILED means "known not to have happened", and a
//!   replayed request (a proxy's retry) must never turn an executed order into one. A key never
//!   recorded is refused with FAILED, and recorded *void* so that no later call executes it,
//!   when a newer attempt of the node was already recorded or it arrives after `submit_by`;
//!   otherwise it is recorded as sent (insert-if-absent) before the handler's first venue
//!   call. A void key is refused. The handler never runs for a refusal.
//! * Recover: a key this executor never recorded cannot have reached the venue: it is voided
//!   and answered FAILED without the handler. For a recorded key the handler decides; a FAILED
//!   answer voids the key (the handler may answer FAILED for a sent key only where its venue
//!   can no longer accept it — otherwise UNKNOWN with `__manual_review_required`).
//!
//! [`FileKeyStore`] is the durable default for one replica (an fsynced append-only file);
//! replicas that share a venue need a [`KeyStore`] they all share (a database table with a
//! unique key, for instance).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use qtg_core::{ExecutionContext, ExecutionResult, NodeState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Handler, HandlerError, PrepareOutcome, SubmitCall};

/// What the store knows of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    /// Recorded before a venue call: the venue may have it.
    Sent,
    /// Can never execute: Recover found nothing, or Submit refused it.
    Void,
}

/// The answer to [`KeyStore::admit`], decided in this order: a key recorded as sent is a
/// `Repeat` (whatever else holds), a void key `Void`; a key never recorded is `Superseded` when
/// a newer attempt of the node is recorded, `Late` when received after its `submit_by` — both
/// recorded void — and otherwise `First`, recorded as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Recorded now as sent: go to the venue.
    First,
    /// Recorded before as sent: go to the venue with the same client id (the original
    /// outcome), even past `submit_by` or after a newer attempt.
    Repeat,
    /// The key is void: refuse.
    Void,
    /// Never sent, and a newer attempt of the node was recorded: refuse (now void).
    Superseded,
    /// Never sent, and received after its `submit_by`: refuse (now void).
    Late,
}

#[derive(Debug, thiserror::Error)]
#[error("key store: {0}")]
pub struct KeyStoreError(pub String);

/// What the store holds for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRecord {
    pub state: KeyState,
    /// The `submit_by` the key was sent with (absent for a key voided unsent).
    pub submit_by: Option<DateTime<Utc>>,
}

/// The durable record of idempotency keys, shared by every replica of an executor. Each
/// method must be atomic with respect to the others for the same node.
#[async_trait]
pub trait KeyStore: Send + Sync + 'static {
    /// Decides a Submit of `key` received at `now` (see [`Admission`] for the order) and
    /// records what it decided for a key never seen — sent, or void for a refusal — durably,
    /// before answering.
    async fn admit(
        &self,
        node: &str,
        attempt: i32,
        key: &str,
        submit_by: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Admission, KeyStoreError>;
    /// What is recorded for the key, if anything.
    async fn state(&self, key: &str) -> Result<Option<KeyRecord>, KeyStoreError>;
    /// Records `key` as void (durably), whatever it was.
    async fn void(&self, node: &str, attempt: i32, key: &str) -> Result<(), KeyStoreError>;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    key: String,
    node: String,
    attempt: i32,
    state: KeyState,
    #[serde(default)]
    submit_by: Option<DateTime<Utc>>,
}

impl Entry {
    fn sent(node: &str, attempt: i32, key: &str, submit_by: DateTime<Utc>) -> Entry {
        Entry { key: key.into(), node: node.into(), attempt, state: KeyState::Sent, submit_by: Some(submit_by) }
    }

    fn void(node: &str, attempt: i32, key: &str) -> Entry {
        Entry { key: key.into(), node: node.into(), attempt, state: KeyState::Void, submit_by: None }
    }

    fn record(&self) -> KeyRecord {
        KeyRecord { state: self.state, submit_by: self.submit_by }
    }
}

#[derive(Default)]
struct Keys {
    by_key: HashMap<String, Entry>,
    newest: HashMap<String, i32>,
}

impl Keys {
    fn apply(&mut self, mut e: Entry) {
        let newest = self.newest.entry(e.node.clone()).or_insert(e.attempt);
        *newest = (*newest).max(e.attempt);
        if e.submit_by.is_none() {
            // Voiding a sent key keeps the deadline it was sent with.
            e.submit_by = self.by_key.get(&e.key).and_then(|old| old.submit_by);
        }
        self.by_key.insert(e.key.clone(), e);
    }

    fn admission(
        &self,
        node: &str,
        attempt: i32,
        key: &str,
        submit_by: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Admission {
        match self.by_key.get(key).map(|e| e.state) {
            Some(KeyState::Sent) => Admission::Repeat,
            Some(KeyState::Void) => Admission::Void,
            None if self.newest.get(node).is_some_and(|n| *n > attempt) => Admission::Superseded,
            None if now > submit_by => Admission::Late,
            None => Admission::First,
        }
    }

    /// What an admission records for a key never seen: sent, or void for a refusal.
    fn entry(a: Admission, node: &str, attempt: i32, key: &str, submit_by: DateTime<Utc>) -> Option<Entry> {
        match a {
            Admission::First => Some(Entry::sent(node, attempt, key, submit_by)),
            Admission::Superseded | Admission::Late => Some(Entry::void(node, attempt, key)),
            Admission::Repeat | Admission::Void => None,
        }
    }
}

/// Keys in memory only: for tests. A restart forgets every key — not a fence.
#[derive(Default)]
pub struct MemoryKeyStore {
    keys: Mutex<Keys>,
}

#[async_trait]
impl KeyStore for MemoryKeyStore {
    async fn admit(
        &self,
        node: &str,
        attempt: i32,
        key: &str,
        submit_by: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Admission, KeyStoreError> {
        let mut keys = self.keys.lock().map_err(|_| KeyStoreError("poisoned".into()))?;
        let a = keys.admission(node, attempt, key, submit_by, now);
        if let Some(e) = Keys::entry(a, node, attempt, key, submit_by) {
            keys.apply(e);
        }
        Ok(a)
    }

    async fn state(&self, key: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        let keys = self.keys.lock().map_err(|_| KeyStoreError("poisoned".into()))?;
        Ok(keys.by_key.get(key).map(Entry::record))
    }

    async fn void(&self, node: &str, attempt: i32, key: &str) -> Result<(), KeyStoreError> {
        let mut keys = self.keys.lock().map_err(|_| KeyStoreError("poisoned".into()))?;
        keys.apply(Entry::void(node, attempt, key));
        Ok(())
    }
}

/// The durable default for one replica: every change is a JSON line appended and fsynced
/// before the answer; the file is replayed at open.
pub struct FileKeyStore {
    path: PathBuf,
    inner: Mutex<(Keys, std::fs::File)>,
}

impl FileKeyStore {
    pub fn open(path: impl AsRef<Path>) -> Result<FileKeyStore, KeyStoreError> {
        let path = path.as_ref().to_path_buf();
        let err = |e: std::io::Error| KeyStoreError(format!("{}: {e}", path.display()));
        let mut keys = Keys::default();
        if path.exists() {
            let text = std::fs::read_to_string(&path).map_err(err)?;
            for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let e: Entry = serde_json::from_str(line)
                    .map_err(|e| KeyStoreError(format!("{} line {}: {e}", path.display(), i + 1)))?;
                keys.apply(e);
            }
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(err)?;
        Ok(FileKeyStore { path, inner: Mutex::new((keys, file)) })
    }

    fn write(&self, keys: &mut Keys, file: &mut std::fs::File, e: Entry) -> Result<(), KeyStoreError> {
        let err = |e: std::io::Error| KeyStoreError(format!("{}: {e}", self.path.display()));
        let mut line = serde_json::to_vec(&e).map_err(|e| KeyStoreError(e.to_string()))?;
        line.push(b'\n');
        file.write_all(&line).map_err(err)?;
        file.sync_data().map_err(err)?;
        keys.apply(e);
        Ok(())
    }
}

#[async_trait]
impl KeyStore for FileKeyStore {
    async fn admit(
        &self,
        node: &str,
        attempt: i32,
        key: &str,
        submit_by: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Admission, KeyStoreError> {
        let mut guard = self.inner.lock().map_err(|_| KeyStoreError("poisoned".into()))?;
        let (keys, file) = &mut *guard;
        let a = keys.admission(node, attempt, key, submit_by, now);
        if let Some(e) = Keys::entry(a, node, attempt, key, submit_by) {
            self.write(keys, file, e)?;
        }
        Ok(a)
    }

    async fn state(&self, key: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        let guard = self.inner.lock().map_err(|_| KeyStoreError("poisoned".into()))?;
        Ok(guard.0.by_key.get(key).map(Entry::record))
    }

    async fn void(&self, node: &str, attempt: i32, key: &str) -> Result<(), KeyStoreError> {
        let mut guard = self.inner.lock().map_err(|_| KeyStoreError("poisoned".into()))?;
        let (keys, file) = &mut *guard;
        self.write(keys, file, Entry::void(node, attempt, key))
    }
}

/// The node and attempt a key `{request_node_id}:{attempt_no}` names — the key's attempt is
/// the one that counts. A malformed key, or one that names another node or attempt than the
/// context, is an invalid request (INVALID_ARGUMENT / HTTP 400), never a FAILED answer: it
/// cannot be recorded, so nothing could prove it unsent later.
fn parse_key<'a>(key: &'a str, ctx: &ExecutionContext) -> Result<(&'a str, i32), HandlerError> {
    let (node, attempt) = key
        .rsplit_once(':')
        .and_then(|(node, n)| n.parse::<i32>().ok().filter(|n| *n >= 1 && !node.is_empty()).map(|n| (node, n)))
        .ok_or_else(|| {
            HandlerError::Invalid(format!("idempotency_key {key:?} is not {{request_node_id}}:{{attempt_no}}"))
        })?;
    // Spelled exactly as qtg spells it (`n:01` is not `n:1`: two spellings would be two keys).
    if key != qtg_core::protocol::idempotency_key(&ctx.request_node_id, ctx.attempt_no) {
        return Err(HandlerError::Invalid(format!(
            "idempotency_key {key:?} names another node or attempt than the context ({}:{})",
            ctx.request_node_id, ctx.attempt_no
        )));
    }
    Ok((node, attempt))
}

fn refused(code: &str, detail: String) -> ExecutionResult {
    ExecutionResult::failed(code, &detail)
}

fn unavailable(e: KeyStoreError) -> HandlerError {
    HandlerError::Unavailable(e.to_string())
}

/// A [`Handler`] behind the fence: what `serve` runs.
pub(crate) struct Fenced<H> {
    pub inner: std::sync::Arc<H>,
    pub keys: std::sync::Arc<dyn KeyStore>,
    /// The clock (tests move it).
    pub now: fn() -> DateTime<Utc>,
    /// A key store that survives restarts: only then does "never recorded" prove "never
    /// sent". With a memory store, Recover of an unknown key goes to the handler instead.
    pub durable: bool,
    /// Margin for clocks and the venue's history lag: a sent key is voided on a FAILED
    /// recover only once its `submit_by` plus this has passed.
    pub skew: chrono::Duration,
}

#[async_trait]
impl<H: Handler> Handler for Fenced<H> {
    async fn preflight(&self, key: &str, ctx: &ExecutionContext) -> Result<Option<ExecutionResult>, HandlerError> {
        self.inner.preflight(key, ctx).await
    }

    async fn prepare(&self, key: &str, ctx: &ExecutionContext) -> Result<PrepareOutcome, HandlerError> {
        self.inner.prepare(key, ctx).await
    }

    async fn submit(
        &self,
        executor_key: &str,
        ctx: &ExecutionContext,
        call: &SubmitCall<'_>,
    ) -> Result<ExecutionResult, HandlerError> {
        let (node, attempt) = parse_key(call.idempotency_key, ctx)?;
        let now = (self.now)();
        match self.keys.admit(node, attempt, call.idempotency_key, call.submit_by, now).await.map_err(unavailable)? {
            Admission::Late => {
                tracing::warn!(
                    idempotency_key = call.idempotency_key, submit_by = %call.submit_by,
                    "submit refused: past submit_by"
                );
                Ok(refused(
                    qtg_core::codes::SUBMIT_BY_PASSED,
                    format!("received at {now}, after submit_by {}; nothing was sent, the key is void", call.submit_by),
                ))
            }
            Admission::Void => {
                tracing::warn!(idempotency_key = call.idempotency_key, "submit refused: the key is void");
                Ok(refused(
                    qtg_core::codes::IDEMPOTENCY_KEY_VOID,
                    "the key was voided (recover found nothing); nothing was sent".into(),
                ))
            }
            Admission::Superseded => {
                tracing::warn!(idempotency_key = call.idempotency_key, "submit refused: a newer attempt was seen");
                Ok(refused(
                    qtg_core::codes::IDEMPOTENCY_KEY_SUPERSEDED,
                    "a newer attempt of this node was already seen; nothing was sent, the key is void".into(),
                ))
            }
            Admission::First | Admission::Repeat => self.inner.submit(executor_key, ctx, call).await,
        }
    }

    async fn observe(&self, key: &str, ctx: &ExecutionContext) -> Result<ExecutionResult, HandlerError> {
        self.inner.observe(key, ctx).await
    }

    async fn recover(
        &self,
        executor_key: &str,
        ctx: &ExecutionContext,
        idempotency_key: &str,
    ) -> Result<ExecutionResult, HandlerError> {
        let (node, attempt) = parse_key(idempotency_key, ctx)?;
        match self.keys.state(idempotency_key).await.map_err(unavailable)? {
            None if !self.durable => {
                // Without a durable store "never recorded" proves nothing (a restart forgets):
                // the handler asks the venue. Its FAILED voids the key for this process's
                // lifetime, so a later Submit with it is refused here at least.
                let r = self.inner.recover(executor_key, ctx, idempotency_key).await?;
                if r.next_state == NodeState::Failed {
                    self.keys.void(node, attempt, idempotency_key).await.map_err(unavailable)?;
                }
                Ok(r)
            }
            None => {
                // Never recorded, so never sent: void it, so no later Submit executes it.
                self.keys.void(node, attempt, idempotency_key).await.map_err(unavailable)?;
                Ok(refused(
                    qtg_core::codes::IDEMPOTENCY_KEY_UNKNOWN,
                    "this executor never sent the key; it is now void".into(),
                ))
            }
            Some(KeyRecord { state: KeyState::Void, .. }) => {
                Ok(refused(qtg_core::codes::IDEMPOTENCY_KEY_VOID, "the key is void; nothing was executed".into()))
            }
            Some(KeyRecord { state: KeyState::Sent, submit_by }) => {
                let r = self.inner.recover(executor_key, ctx, idempotency_key).await?;
                if r.next_state != NodeState::Failed {
                    return Ok(r);
                }
                // Absence of a sent key is conclusive only once the venue can no longer accept
                // it: never before its submit_by plus the margin.
                let now = (self.now)();
                match submit_by {
                    Some(by) if now > by + self.skew => {
                        self.keys.void(node, attempt, idempotency_key).await.map_err(unavailable)?;
                        Ok(r)
                    }
                    _ => {
                        tracing::warn!(
                            idempotency_key,
                            ?submit_by,
                            "recover answered FAILED for a sent key before its submit_by passed; answering UNKNOWN"
                        );
                        let mut unknown = ExecutionResult::new(NodeState::Unknown);
                        unknown.error_code = Some(qtg_core::codes::ABSENCE_NOT_YET_CONCLUSIVE.into());
                        unknown.error_detail = Some(format!(
                            "the key was sent with submit_by {submit_by:?}; the venue may still accept it; \
                             ask again later"
                        ));
                        unknown.retry_after_seconds = Some(self.skew.num_seconds().max(1) as f64);
                        Ok(unknown)
                    }
                }
            }
        }
    }

    async fn health(&self, key: &str) -> Result<Value, HandlerError> {
        self.inner.health(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_file_store_keeps_keys_across_a_reopen() {
        let path = std::env::temp_dir().join(format!("qtg-keys-{}.jsonl", uuid::Uuid::new_v4()));
        let store = FileKeyStore::open(&path).unwrap();
        let by = Utc::now();
        let now = by - chrono::Duration::seconds(1);
        assert_eq!(store.admit("n", 1, "n:1", by, now).await.unwrap(), Admission::First);
        assert_eq!(store.admit("n", 1, "n:1", by, now).await.unwrap(), Admission::Repeat);
        store.void("m", 1, "m:1").await.unwrap();
        assert_eq!(store.admit("n", 2, "n:2", by, now).await.unwrap(), Admission::First);
        assert_eq!(store.admit("l", 1, "l:1", by, by + chrono::Duration::seconds(1)).await.unwrap(), Admission::Late);
        drop(store);
        let store = FileKeyStore::open(&path).unwrap();
        assert_eq!(store.admit("m", 1, "m:1", by, now).await.unwrap(), Admission::Void);
        assert_eq!(store.admit("l", 1, "l:1", by, now).await.unwrap(), Admission::Void, "a late key stays void");
        // A sent key keeps its outcome: after a newer attempt, and after its submit_by.
        assert_eq!(store.admit("n", 1, "n:1", by, now).await.unwrap(), Admission::Repeat);
        let late = by + chrono::Duration::seconds(60);
        assert_eq!(store.admit("n", 2, "n:2", by, late).await.unwrap(), Admission::Repeat);
        assert_eq!(store.admit("o", 2, "o:2", by, now).await.unwrap(), Admission::First);
        assert_eq!(store.admit("o", 1, "o:1", by, now).await.unwrap(), Admission::Superseded);
        assert_eq!(store.state("o:1").await.unwrap().map(|r| r.state), Some(KeyState::Void));
        let rec = store.state("n:2").await.unwrap().unwrap();
        assert_eq!(rec.state, KeyState::Sent);
        assert_eq!(rec.submit_by.map(|t| t.timestamp_millis()), Some(by.timestamp_millis()));
        std::fs::remove_file(path).unwrap();
    }
}

#[cfg(test)]
mod fenced_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A handler that counts the submits that reach it and finds nothing on recover.
    #[derive(Default)]
    struct Counting {
        submits: AtomicUsize,
    }

    #[async_trait]
    impl Handler for Counting {
        async fn preflight(&self, _: &str, _: &ExecutionContext) -> Result<Option<ExecutionResult>, HandlerError> {
            Ok(None)
        }
        async fn prepare(&self, _: &str, _: &ExecutionContext) -> Result<PrepareOutcome, HandlerError> {
            Err(HandlerError::Unavailable("unused".into()))
        }
        async fn submit(
            &self,
            _: &str,
            _: &ExecutionContext,
            _: &SubmitCall<'_>,
        ) -> Result<ExecutionResult, HandlerError> {
            self.submits.fetch_add(1, Ordering::SeqCst);
            Ok(ExecutionResult::new(NodeState::Submitted))
        }
        async fn observe(&self, _: &str, _: &ExecutionContext) -> Result<ExecutionResult, HandlerError> {
            Ok(ExecutionResult::new(NodeState::Observing))
        }
        async fn recover(&self, _: &str, _: &ExecutionContext, _: &str) -> Result<ExecutionResult, HandlerError> {
            Ok(ExecutionResult::failed("NOT_FOUND", "nothing at the venue"))
        }
    }

    /// The context of the node and attempt `key` names.
    fn ctx(key: &str) -> ExecutionContext {
        let (node, attempt) = key.rsplit_once(':').unwrap();
        serde_json::from_value(serde_json::json!({
            "protocol_version": "1.0", "request_id": "r", "request_node_id": node, "compiled_plan_hash": "h",
            "template_key": "t", "template_version": 1, "node_key": "k", "node_kind": "action",
            "action_type": "transfer", "attempt_no": attempt.parse::<i32>().unwrap(), "intent": {}, "input_params": {},
            "resolved_bindings": {}, "risk_controls": {}, "prior_artifacts": [], "node_config": {},
            "provider_context": {}, "timeout_policy": {}, "provider_refs": {}, "provider_ref_id": null,
            "executor_key": "e"
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn refusals_happen_before_the_handler_runs() {
        let inner = Arc::new(Counting::default());
        let fenced = Fenced {
            inner: inner.clone(),
            keys: Arc::new(MemoryKeyStore::default()),
            now: Utc::now,
            skew: chrono::Duration::zero(),
            durable: true,
        };
        let prepared = qtg_core::PreparedAction::new("transfer", "json", "{}".into(), false);
        let call = |key: &'static str, late: bool| SubmitCall {
            prepared: &prepared,
            signed: None,
            idempotency_key: key,
            submit_by: Utc::now() + chrono::Duration::seconds(if late { -1 } else { 600 }),
        };
        let code = |r: ExecutionResult| (r.next_state, r.error_code.unwrap_or_default());
        let submit = |key: &'static str, late: bool| {
            let fenced = &fenced;
            let call = call(key, late);
            async move { fenced.submit("e", &ctx(key), &call).await.unwrap() }
        };
        // Late: refused, the key void, the handler never called.
        assert_eq!(code(submit("n:1", true).await), (NodeState::Failed, "SUBMIT_BY_PASSED".into()));
        assert_eq!(code(submit("n:1", false).await), (NodeState::Failed, "IDEMPOTENCY_KEY_VOID".into()));
        // Recover of a key never sent voids it without asking the handler; Submit is refused.
        let r = fenced.recover("e", &ctx("v:1"), "v:1").await.unwrap();
        assert_eq!(code(r), (NodeState::Failed, "IDEMPOTENCY_KEY_UNKNOWN".into()));
        assert_eq!(code(submit("v:1", false).await), (NodeState::Failed, "IDEMPOTENCY_KEY_VOID".into()));
        // Attempt 2 goes through; attempt 1 of the same node, never sent, is then refused.
        assert_eq!(submit("m:2", false).await.next_state, NodeState::Submitted);
        assert_eq!(code(submit("m:1", false).await), (NodeState::Failed, "IDEMPOTENCY_KEY_SUPERSEDED".into()));
        // A sent key keeps its outcome: replayed after its submit_by, and after a newer
        // attempt, it goes to the handler (the venue answers the original order), never FAILED.
        assert_eq!(submit("s:1", false).await.next_state, NodeState::Submitted);
        assert_eq!(submit("s:1", true).await.next_state, NodeState::Submitted, "replayed late");
        assert_eq!(submit("s:2", false).await.next_state, NodeState::Submitted);
        assert_eq!(submit("s:1", false).await.next_state, NodeState::Submitted, "replayed after attempt 2");
        // A malformed key, or one naming another attempt than the context: invalid, not FAILED.
        let c = call("s:x", false);
        assert!(matches!(fenced.submit("e", &ctx("s:1"), &c).await, Err(HandlerError::Invalid(_))));
        let c = call("s:3", false);
        assert!(matches!(fenced.submit("e", &ctx("s:1"), &c).await, Err(HandlerError::Invalid(_))));
        // A sent key the handler answers FAILED for is not voided while the venue may still
        // take it (before submit_by + skew): UNKNOWN. After that it is voided.
        let r = fenced.recover("e", &ctx("m:2"), "m:2").await.unwrap();
        assert_eq!(code(r), (NodeState::Unknown, "ABSENCE_NOT_YET_CONCLUSIVE".into()));
        let later = Fenced { now: || Utc::now() + chrono::Duration::seconds(1200), ..fenced };
        assert_eq!(later.recover("e", &ctx("m:2"), "m:2").await.unwrap().next_state, NodeState::Failed);
        let fenced = Fenced { now: Utc::now, ..later };
        let r = fenced.submit("e", &ctx("m:2"), &call("m:2", false)).await.unwrap();
        assert_eq!(code(r), (NodeState::Failed, "IDEMPOTENCY_KEY_VOID".into()));
        assert_eq!(inner.submits.load(Ordering::SeqCst), 5, "m:2 once, s:1 three times (one order), s:2 once");
    }
}
