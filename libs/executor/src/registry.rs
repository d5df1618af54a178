//! The registry: exact executor/signer key → implementation, from the TOML registry file
//! (docs/architecture.md §8.3). Local entries name a compiled-in implementation (`impl`); whether a key is
//! local or remote is decided here, never by the key's spelling.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use qtg_core::Lane;
use serde::Deserialize;

use qtg_wire_auth::Credentials;

use crate::remote::{Endpoint, RemoteExecutor, RemoteSigner, TlsClient};
use crate::{Executor, Signer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Local,
    Grpc,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Local => "local",
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    pub transport: Transport,
    #[serde(rename = "impl")]
    pub implementation: Option<String>,
    pub endpoint: Option<String>,
    pub timeout_ms: Option<u64>,
    /// Recovery lane; defaults from the `exec.{lane}.{role}` key pattern.
    pub lane: Option<Lane>,
    pub auth: Option<toml::Value>,
    pub tls: Option<toml::Value>,
    /// How the venue fences a stale attempt (docs/architecture.md §6.3); executors
    /// only.
    pub fence: Option<Fence>,
    /// A local entry's own settings, read by its lane (e.g. which venue account it acts for).
    pub config: Option<toml::Table>,
    /// `true` lets credentials travel over plain `http://` to a host that is not loopback
    /// (refused otherwise: a bearer token or a signed request in clear text can be copied).
    pub insecure: Option<bool>,
}

/// What stops an armed attempt from executing late, so that absence at the venue can become
/// conclusive: a venue-side deadline (`submit_by` sent as the venue's own expiry), a
/// sequence (an EVM nonce consumed in a final block), or nothing (absence is never
/// conclusive: UNKNOWN with `__manual_review_required`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fence {
    VenueDeadline,
    Sequence,
    None,
}

impl Fence {
    pub fn as_str(self) -> &'static str {
        match self {
            Fence::VenueDeadline => "venue_deadline",
            Fence::Sequence => "sequence",
            Fence::None => "none",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    #[serde(default)]
    pub executors: BTreeMap<String, EntrySpec>,
    #[serde(default)]
    pub signers: BTreeMap<String, EntrySpec>,
    /// Balance fetchers by `venue_key` (local only).
    #[serde(default)]
    pub balances: BTreeMap<String, EntrySpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("registry file: {0}")]
    Parse(String),
    #[error("registry entry {key:?}: {reason}")]
    Entry { key: String, reason: String },
    /// A local entry its lane cannot build, and why ([`LaneError`]: a process setting, the
    /// entry's `config`, or something the lane does not offer).
    #[error("registry entry {key:?}: {error}")]
    Lane { key: String, error: LaneError },
}

/// Why a lane cannot build what the process or a registry entry asks of it. The process
/// refuses to start with it, naming the entry; the kind says where to look.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    /// A process setting the lane reads (`MG_EVM_CHAINS`, `MG_CCTP_DOMAINS`, a venue's
    /// credentials, a signer's key) is missing or unusable.
    #[error("{0}")]
    Setting(String),
    /// The entry's `config` table lacks something or holds a value the lane cannot use.
    #[error("{0}")]
    Config(String),
    /// The lane does not offer what the entry asks for (a role it has no executor for,
    /// balances, a signer).
    #[error("{0}")]
    Unsupported(String),
}

impl RegistryFile {
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        toml::from_str(text).map_err(|e| RegistryError::Parse(e.to_string()))
    }
}

/// What `services/` hands a lane when it builds it: the database (a lane may own tables;
/// its migrations live with the others) and the key → value source of its settings.
pub struct LaneContext<'a> {
    pub pool: &'a sqlx::PgPool,
    pub setting: &'a dyn Fn(&str) -> Option<String>,
    /// `MG_CLOCK_SKEW_MARGIN_SECONDS`, as the process' settings read it.
    pub clock_skew: std::time::Duration,
    /// State the lanes of one registry share (see [`LaneShared`]).
    pub shared: &'a LaneShared,
}

/// State the lanes built for one registry share, one value per type: a lane built on another
/// asks for the same value (the `cctp` lane's executors use the `evm` lane's local signers).
#[derive(Default)]
pub struct LaneShared(std::sync::Mutex<HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>>);

impl LaneShared {
    /// The registry's value of type `T`, made with `T::default()` by the first lane that asks.
    pub fn get<T: std::any::Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let value = map.entry(std::any::TypeId::of::<T>()).or_insert_with(|| Arc::new(T::default())).clone();
        // Keyed by its own type: the downcast cannot fail.
        value.downcast::<T>().unwrap_or_else(|_| Arc::new(T::default()))
    }
}

/// The process' key → value source of settings (only `services/` reads the environment).
pub type Setting<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Each lane crate's entry point: `pub fn lane(ctx: &LaneContext) -> Result<Box<dyn
/// LanePlugin>, LaneError>` (an error = a setting the lane cannot run with).
pub type LaneFactory = fn(&LaneContext<'_>) -> Result<Box<dyn LanePlugin>, LaneError>;

/// A compiled-in lane (`libs/executors/<lane>`): builds the executors and signers that local
/// registry entries name with `impl = "<name>"`. `services/common/src/lanes.rs` lists the
/// lanes a binary has; a lane reads its own settings from the key → value source `services/`
/// hands it when constructing it.
pub trait LanePlugin: Send + Sync {
    /// The `impl` name entries use.
    fn name(&self) -> &'static str;
    /// The executor of entry `key` (`config` = the entry's `config` table; `setting` = the
    /// process' key → value source, for what an entry names by variable, e.g. a venue's
    /// credentials), with its drift source where the lane watches facts. An error is the
    /// entry's: the registry refuses to load.
    fn executor(
        &self,
        key: &str,
        config: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<crate::LaneExecutor, LaneError>;
    /// How this lane's venue fences a stale attempt, for entries that declare no `fence`.
    fn fence(&self) -> Fence {
        Fence::VenueDeadline
    }
    /// The balance fetcher of `[balances."<venue_key>"]`; a lane without one refuses.
    fn balance_fetcher(
        &self,
        venue_key: &str,
        config: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<Arc<dyn crate::BalanceFetcher>, LaneError> {
        let _ = (config, setting);
        Err(LaneError::Unsupported(format!("lane {:?} reads no balances (entry {venue_key:?})", self.name())))
    }
    /// The signer of entry `key`; a lane without signers refuses.
    fn signer(
        &self,
        key: &str,
        config: Option<&toml::Table>,
        setting: Setting<'_>,
    ) -> Result<Arc<dyn Signer>, LaneError> {
        let _ = (config, setting);
        Err(LaneError::Unsupported(format!("lane {:?} has no signer (entry {key:?})", self.name())))
    }
}

#[derive(Clone)]
pub struct ExecutorEntry {
    pub key: String,
    pub transport: Transport,
    pub lane: Lane,
    /// Declared `fence`; a local entry that names none follows the venue deadline (the sim
    /// venue refuses after `submit_by`), a remote one that names none has `none`.
    pub fence: Fence,
    /// A remote entry's own per-call deadline (`timeout_ms`).
    pub timeout: Option<std::time::Duration>,
    pub executor: Arc<dyn Executor>,
    /// The facts verify_drift watches for this entry (a local lane's, where it has any).
    pub drift: Option<Arc<dyn crate::DriftSource>>,
}

#[derive(Clone)]
pub struct SignerEntry {
    pub key: String,
    pub transport: Transport,
    pub signer: Arc<dyn Signer>,
}

/// Flat exact-key lookup.
#[derive(Clone, Default)]
pub struct Registry {
    executors: HashMap<String, ExecutorEntry>,
    signers: HashMap<String, SignerEntry>,
    balances: BTreeMap<String, Arc<dyn crate::BalanceFetcher>>,
}

impl Registry {
    /// Builds every entry: local ones by the lane their `impl` names (one of `lanes`), remote
    /// ones as gRPC / HTTP clients. `secret` resolves the environment variables an entry's
    /// `auth` names (only `services/` reads the environment).
    pub fn build(
        file: &RegistryFile,
        lanes: &[Box<dyn LanePlugin>],
        secret: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, RegistryError> {
        let mut registry = Registry::default();
        for (key, spec) in &file.executors {
            let lane = spec.lane.unwrap_or_else(|| Lane::from_executor_key(key));
            let fence = match (spec.fence, spec.transport) {
                (Some(f), _) => f,
                (None, Transport::Local) => lane_of(key, spec, lanes)?.fence(),
                (None, Transport::Grpc | Transport::Http) => Fence::None,
            };
            let timeout = match spec.transport {
                Transport::Local => None,
                _ => Some(std::time::Duration::from_millis(spec.timeout_ms.unwrap_or(DEFAULT_REMOTE_TIMEOUT_MS))),
            };
            let built = match spec.transport {
                Transport::Local => lane_of(key, spec, lanes)?
                    .executor(key, spec.config.as_ref(), secret)
                    .map_err(|error| RegistryError::Lane { key: key.clone(), error })?,
                Transport::Grpc => crate::LaneExecutor::new(Arc::new(
                    RemoteExecutor::grpc(key, endpoint(key, spec, secret)?)
                        .map_err(|reason| RegistryError::Entry { key: key.clone(), reason })?,
                )),
                Transport::Http => crate::LaneExecutor::new(Arc::new(
                    RemoteExecutor::http(key, endpoint(key, spec, secret)?)
                        .map_err(|reason| RegistryError::Entry { key: key.clone(), reason })?,
                )),
            };
            let entry = ExecutorEntry {
                key: key.clone(),
                transport: spec.transport,
                lane,
                fence,
                timeout,
                executor: built.executor,
                drift: built.drift,
            };
            registry.executors.insert(key.clone(), entry);
        }
        for (key, spec) in &file.signers {
            if spec.fence.is_some() {
                return Err(RegistryError::Entry { key: key.clone(), reason: "`fence` is for executors".into() });
            }
            let signer: Arc<dyn Signer> = match spec.transport {
                Transport::Local => lane_of(key, spec, lanes)?
                    .signer(key, spec.config.as_ref(), secret)
                    .map_err(|error| RegistryError::Lane { key: key.clone(), error })?,
                Transport::Grpc => Arc::new(
                    RemoteSigner::grpc(endpoint(key, spec, secret)?)
                        .map_err(|reason| RegistryError::Entry { key: key.clone(), reason })?,
                ),
                Transport::Http => Arc::new(
                    RemoteSigner::http(endpoint(key, spec, secret)?)
                        .map_err(|reason| RegistryError::Entry { key: key.clone(), reason })?,
                ),
            };
            registry.signers.insert(key.clone(), SignerEntry { key: key.clone(), transport: spec.transport, signer });
        }
        for (key, spec) in &file.balances {
            let bad = |reason: String| RegistryError::Entry { key: key.clone(), reason };
            if key.is_empty()
                || key.len() > 100
                || !key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.'))
            {
                return Err(bad("a venue_key is letters, digits, '_', '-', ':' and '.' (at most 100)".into()));
            }
            if spec.transport != Transport::Local || spec.fence.is_some() {
                return Err(bad(
                    "a balance fetcher is local (transport = \"local\", impl = <lane>), with no fence".into()
                ));
            }
            let fetcher = lane_of(key, spec, lanes)?
                .balance_fetcher(key, spec.config.as_ref(), secret)
                .map_err(|error| RegistryError::Lane { key: key.clone(), error })?;
            registry.balances.insert(key.clone(), fetcher);
        }
        Ok(registry)
    }

    pub fn insert_executor(&mut self, key: &str, lane: Lane, executor: Arc<dyn Executor>) {
        self.executors.insert(
            key.to_string(),
            ExecutorEntry {
                key: key.to_string(),
                transport: Transport::Local,
                lane,
                fence: Fence::VenueDeadline,
                timeout: None,
                executor,
                drift: None,
            },
        );
    }

    pub fn executor(&self, key: &str) -> Option<&ExecutorEntry> {
        self.executors.get(key)
    }

    pub fn signer(&self, key: &str) -> Option<&SignerEntry> {
        self.signers.get(key)
    }

    pub fn executors(&self) -> impl Iterator<Item = &ExecutorEntry> {
        self.executors.values()
    }

    pub fn signers(&self) -> impl Iterator<Item = &SignerEntry> {
        self.signers.values()
    }

    /// The balance fetchers, by venue_key.
    pub fn balance_fetchers(&self) -> impl Iterator<Item = (&String, &Arc<dyn crate::BalanceFetcher>)> {
        self.balances.iter()
    }

    pub fn insert_balance_fetcher(&mut self, venue_key: &str, fetcher: Arc<dyn crate::BalanceFetcher>) {
        self.balances.insert(venue_key.to_string(), fetcher);
    }

    /// The lane recovery sweeps a node of `executor_key` in.
    pub fn lane(&self, executor_key: &str) -> Lane {
        self.executors.get(executor_key).map(|e| e.lane).unwrap_or_else(|| Lane::from_executor_key(executor_key))
    }
}

/// The compiled-in lane a local entry's `impl` names.
fn lane_of<'a>(
    key: &str,
    spec: &EntrySpec,
    lanes: &'a [Box<dyn LanePlugin>],
) -> Result<&'a dyn LanePlugin, RegistryError> {
    let bad = |reason: String| RegistryError::Entry { key: key.to_string(), reason };
    let name = spec.implementation.as_deref().ok_or_else(|| bad("a local entry needs `impl`".into()))?;
    lanes.iter().find(|l| l.name() == name).map(|l| l.as_ref()).ok_or_else(|| {
        let known: Vec<&str> = lanes.iter().map(|l| l.name()).collect();
        bad(format!("no compiled-in lane {name:?} (this build has: {})", known.join(", ")))
    })
}

/// Default deadline of a remote call when the entry sets no `timeout_ms`.
pub const DEFAULT_REMOTE_TIMEOUT_MS: u64 = 10_000;

fn endpoint(key: &str, spec: &EntrySpec, secret: &dyn Fn(&str) -> Option<String>) -> Result<Endpoint, RegistryError> {
    let bad = |reason: String| RegistryError::Entry { key: key.to_string(), reason };
    let url = spec.endpoint.clone().ok_or_else(|| bad("a remote entry needs `endpoint`".into()))?;
    let shown = qtg_core::urls::redact(&url);
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad(format!("endpoint {shown:?} must start with http:// or https://")));
    }
    // Credentials belong in `auth`, where they are kept out of every log and error; a URL
    // is shown in both.
    if qtg_core::urls::has_userinfo(&url) {
        return Err(bad(format!(
            "endpoint {shown:?} carries credentials in the URL: give them in `auth` (bearer_env, hmac_env, …)"
        )));
    }
    let tls = match (&spec.tls, url.starts_with("https://")) {
        (None, false) => None,
        (Some(_), false) => return Err(bad("`tls` needs an https:// endpoint".into())),
        (None, true) => return Err(bad("an https:// endpoint needs tls = { ca_file = \"…\" }".into())),
        (Some(toml::Value::Table(t)), true) => {
            let ca_file =
                t.get("ca_file").and_then(toml::Value::as_str).ok_or_else(|| bad("tls needs ca_file".into()))?;
            if let Some(k) = t.keys().find(|k| !matches!(k.as_str(), "ca_file" | "domain")) {
                return Err(bad(format!("tls: unknown field {k:?}")));
            }
            let ca_pem = std::fs::read(ca_file).map_err(|e| bad(format!("tls: cannot read {ca_file}: {e}")))?;
            Some(TlsClient { ca_pem, domain: t.get("domain").and_then(toml::Value::as_str).map(String::from) })
        }
        (Some(_), true) => return Err(bad("tls must be a table, e.g. { ca_file = \"/etc/qtg/ca.pem\" }".into())),
    };
    let timeout_ms = spec.timeout_ms.unwrap_or(DEFAULT_REMOTE_TIMEOUT_MS);
    if timeout_ms == 0 {
        return Err(bad("timeout_ms must be > 0".into()));
    }
    let auth = match &spec.auth {
        None => Credentials::None,
        Some(toml::Value::Table(t)) => {
            let text = |field: &str| t.get(field).and_then(toml::Value::as_str);
            let from_env = |var: &str| {
                secret(var)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| bad(format!("auth: environment variable {var} is not set")))
            };
            let from_file = |path: &str| {
                std::fs::read_to_string(path)
                    .map(|s| s.trim().to_string())
                    .map_err(|e| bad(format!("auth: cannot read {path}: {e}")))
            };
            if let Some(k) = t
                .keys()
                .find(|k| !matches!(k.as_str(), "bearer_env" | "bearer_file" | "hmac_env" | "hmac_file" | "signature"))
            {
                return Err(bad(format!("auth: unknown field {k:?}")));
            }
            // The signature version: v4 (covers the operation), or the deprecated v3 for an
            // executor built before v4, until its deprecation window ends.
            let v3 = match text("signature") {
                None | Some("v4") => false,
                Some("v3") if t.contains_key("hmac_env") || t.contains_key("hmac_file") => {
                    let until = qtg_wire_auth::V3_ACCEPTED_UNTIL;
                    if chrono::Utc::now().format("%Y-%m-%d").to_string().as_str() > until {
                        return Err(bad(format!(
                            "auth.signature = \"v3\" was accepted until {until}: update the executor to the v4 \
                             signature (docs/executors.md §5) and remove the setting"
                        )));
                    }
                    tracing::warn!(
                        executor_key = key,
                        accepted_until = until,
                        "auth.signature = \"v3\": calls are signed with the deprecated v3 signature, which does not \
                         cover the operation; update the executor to v4"
                    );
                    true
                }
                Some(other) => {
                    return Err(bad(format!(
                        "auth.signature {other:?}: v4 (the default) or v3, with hmac_env / hmac_file"
                    )))
                }
            };
            let hmac = |secret: String| {
                if v3 {
                    Credentials::HmacV3(secret.into_bytes())
                } else {
                    Credentials::Hmac(secret.into_bytes())
                }
            };
            match (text("bearer_env"), text("bearer_file"), text("hmac_env"), text("hmac_file")) {
                (Some(v), None, None, None) => Credentials::Bearer(from_env(v)?),
                (None, Some(p), None, None) => Credentials::Bearer(from_file(p)?),
                (None, None, Some(v), None) => hmac(from_env(v)?),
                (None, None, None, Some(p)) => hmac(from_file(p)?),
                _ => return Err(bad("auth takes exactly one of bearer_env, bearer_file, hmac_env, hmac_file".into())),
            }
        }
        Some(_) => return Err(bad("auth must be a table, e.g. { bearer_env = \"TOKEN\" }".into())),
    };
    if !matches!(auth, Credentials::None) && url.starts_with("http://") && spec.insecure != Some(true) {
        let host = url["http://".len()..].split(['/', '?', '#']).next().unwrap_or("");
        let host = host
            .rsplit_once(':')
            .filter(|(h, p)| !h.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
            .map(|(h, _)| h)
            .unwrap_or(host);
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return Err(bad(format!(
                "credentials over plain http:// to {host}: use https:// with tls, or set insecure = true"
            )));
        }
    }
    Ok(Endpoint { url, timeout: std::time::Duration::from_millis(timeout_ms), auth, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_design_example() {
        let file = RegistryFile::parse(
            r#"
[executors."exec.sim.transfer"]
transport = "local"
impl = "sim"
[executors."exec.cex.withdrawal_action"]
transport = "local"
impl = "sim"
lane = "cex"
[signers."signer.sim"]
transport = "local"
impl = "sim"
"#,
        )
        .unwrap();
        assert_eq!(file.executors.len(), 2);
        assert_eq!(file.executors["exec.cex.withdrawal_action"].lane, Some(Lane::Cex));
        assert!(RegistryFile::parse("[executors.x]\ntransport = \"carrier-pigeon\"").is_err());
        assert!(RegistryFile::parse("[executors.x]\ntransport = \"local\"\nimpl = \"sim\"\nbogus = 1").is_err());
    }
}

#[cfg(test)]
mod remote_tests {
    use super::*;

    fn build(text: &str) -> Result<Registry, RegistryError> {
        let env = |v: &str| (v == "SOL_TOKEN").then(|| "t0k3n".to_string());
        Registry::build(&RegistryFile::parse(text)?, &[], &env)
    }

    #[tokio::test]
    async fn remote_entries_are_decided_by_the_file_not_the_key() {
        let r = build(
            r#"
[executors."exec.sol.transfer"]
transport = "grpc"
endpoint = "http://127.0.0.1:1"
timeout_ms = 500
auth = { bearer_env = "SOL_TOKEN" }
[executors."exec.cex.withdraw"]
transport = "http"
endpoint = "http://127.0.0.1:1/v1"
[signers."signer.kms"]
transport = "http"
endpoint = "http://127.0.0.1:1"
"#,
        )
        .unwrap();
        assert_eq!(r.executor("exec.sol.transfer").unwrap().transport, Transport::Grpc);
        assert_eq!(r.executor("exec.cex.withdraw").unwrap().lane, Lane::Cex);
        // Nothing listens on port 1: a health call is "unavailable", not a crash.
        let e = r.executor("exec.cex.withdraw").unwrap().executor.health().await.unwrap_err();
        assert!(matches!(e, crate::ExecutorError::Unavailable(_)), "{e:?}");
        let e = r.executor("exec.sol.transfer").unwrap().executor.health().await.unwrap_err();
        assert!(matches!(e, crate::ExecutorError::Unavailable(_) | crate::ExecutorError::Timeout(_)), "{e:?}");
    }

    /// An executor built before the v4 signature keeps working through the deprecation
    /// window when its entry says `signature = "v3"`: its calls carry the v3 headers.
    #[test]
    fn the_deprecated_v3_signature_is_an_explicit_choice() {
        let env = |v: &str| (v == "SOL_TOKEN").then(|| "t0k3n".to_string());
        let endpoint_of = |auth: &str| {
            let spec: EntrySpec =
                toml::from_str(&format!("transport = \"http\"\nendpoint = \"http://127.0.0.1:1\"\nauth = {auth}"))
                    .unwrap();
            endpoint("x", &spec, &env).unwrap()
        };
        let version = |e: &Endpoint| {
            let headers = e.auth.headers("qtg.executor.v1.ExecutorService/Health", b"");
            headers.into_iter().find(|(k, _)| *k == qtg_wire_auth::HEADER_VERSION).map(|(_, v)| v)
        };
        let old = endpoint_of("{ hmac_env = \"SOL_TOKEN\", signature = \"v3\" }");
        assert_eq!((version(&old).as_deref(), old.auth.deprecated_version()), (Some("v3"), Some("v3")));
        let new = endpoint_of("{ hmac_env = \"SOL_TOKEN\" }");
        assert_eq!((version(&new).as_deref(), new.auth.deprecated_version()), (Some("v4"), None));
        let explicit = endpoint_of("{ hmac_env = \"SOL_TOKEN\", signature = \"v4\" }");
        assert_eq!(version(&explicit).as_deref(), Some("v4"));
    }

    #[test]
    fn bad_remote_entries_are_clear_errors() {
        for (text, why) in [
            ("[executors.x]\ntransport = \"grpc\"", "needs `endpoint`"),
            ("[executors.x]\ntransport = \"http\"\nendpoint = \"ftp://h\"", "must start with"),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"http://h\"\nauth = { bearer_env = \"MISSING\" }",
                "MISSING is not set",
            ),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"http://h\"\n\
                 auth = { bearer_env = \"SOL_TOKEN\", hmac_env = \"SOL_TOKEN\" }",
                "exactly one",
            ),
            ("[executors.x]\ntransport = \"local\"", "needs `impl`"),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"http://venue.example:80/x\"\n\
                 auth = { bearer_env = \"SOL_TOKEN\" }",
                "plain http://",
            ),
            ("[executors.x]\ntransport = \"local\"\nimpl = \"cex\"", "no compiled-in lane \"cex\""),
            ("[executors.x]\ntransport = \"grpc\"\nendpoint = \"https://h\"", "needs tls"),
            (
                "[executors.x]\ntransport = \"grpc\"\nendpoint = \"http://h\"\ntls = { ca_file = \"/x\" }",
                "needs an https",
            ),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"https://h\"\n\
                 tls = { ca_file = \"/nonexistent/ca.pem\" }",
                "cannot read",
            ),
            ("[executors.x]\ntransport = \"http\"\nendpoint = \"https://h\"\ntls = { ca = \"/x\" }", "needs ca_file"),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"http://127.0.0.1:1\"\n\
                 auth = { hmac_env = \"SOL_TOKEN\", signature = \"v5\" }",
                "v4 (the default) or v3",
            ),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"http://127.0.0.1:1\"\n\
                 auth = { bearer_env = \"SOL_TOKEN\", signature = \"v3\" }",
                "v4 (the default) or v3",
            ),
            (
                "[executors.x]\ntransport = \"http\"\nendpoint = \"http://127.0.0.1:1\"\n\
                 auth = { hmac_env = \"SOL_TOKEN\", sig = \"v3\" }",
                "unknown field",
            ),
            ("[executors.x]\ntransport = \"http\"\nendpoint = \"https://u:p@h\"", "credentials in the URL"),
        ] {
            let e = build(text).err().unwrap_or_else(|| panic!("{text} should fail"));
            assert!(e.to_string().contains(why), "{e} / {why}");
        }
    }
}
