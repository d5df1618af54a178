//! The registry: exact executor/signer key → implementation, from the TOML registry file
//! (DESIGN.md §8). Local entries name a compiled-in implementation (`impl`); whether a key is
//! local or remote is decided here, never by the key's spelling.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use qtg_core::Lane;
use serde::Deserialize;

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
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    #[serde(default)]
    pub executors: BTreeMap<String, EntrySpec>,
    #[serde(default)]
    pub signers: BTreeMap<String, EntrySpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("registry file: {0}")]
    Parse(String),
    #[error("registry entry {key:?}: {reason}")]
    Entry { key: String, reason: String },
}

impl RegistryFile {
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        toml::from_str(text).map_err(|e| RegistryError::Parse(e.to_string()))
    }
}

/// Builds compiled-in implementations by name.
pub trait LocalFactory {
    fn executor(&self, implementation: &str, key: &str) -> Option<Arc<dyn Executor>>;
    fn signer(&self, implementation: &str, key: &str) -> Option<Arc<dyn Signer>>;
}

#[derive(Clone)]
pub struct ExecutorEntry {
    pub key: String,
    pub transport: Transport,
    pub lane: Lane,
    pub executor: Arc<dyn Executor>,
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
}

impl Registry {
    pub fn build(file: &RegistryFile, local: &dyn LocalFactory) -> Result<Self, RegistryError> {
        let mut registry = Registry::default();
        for (key, spec) in &file.executors {
            let implementation = local_impl(key, spec)?;
            let executor = local.executor(implementation, key).ok_or_else(|| RegistryError::Entry {
                key: key.clone(),
                reason: format!("no compiled-in executor implementation {implementation:?}"),
            })?;
            registry.insert_executor(key, spec.lane.unwrap_or_else(|| Lane::from_executor_key(key)), executor);
        }
        for (key, spec) in &file.signers {
            let implementation = local_impl(key, spec)?;
            let signer = local.signer(implementation, key).ok_or_else(|| RegistryError::Entry {
                key: key.clone(),
                reason: format!("no compiled-in signer implementation {implementation:?}"),
            })?;
            registry.insert_signer(key, signer);
        }
        Ok(registry)
    }

    pub fn insert_executor(&mut self, key: &str, lane: Lane, executor: Arc<dyn Executor>) {
        self.executors.insert(
            key.to_string(),
            ExecutorEntry { key: key.to_string(), transport: Transport::Local, lane, executor },
        );
    }

    pub fn insert_signer(&mut self, key: &str, signer: Arc<dyn Signer>) {
        self.signers.insert(key.to_string(), SignerEntry { key: key.to_string(), transport: Transport::Local, signer });
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

    /// The lane recovery sweeps a node of `executor_key` in.
    pub fn lane(&self, executor_key: &str) -> Lane {
        self.executors.get(executor_key).map(|e| e.lane).unwrap_or_else(|| Lane::from_executor_key(executor_key))
    }
}

fn local_impl<'a>(key: &str, spec: &'a EntrySpec) -> Result<&'a str, RegistryError> {
    match spec.transport {
        Transport::Local => spec
            .implementation
            .as_deref()
            .ok_or_else(|| RegistryError::Entry { key: key.to_string(), reason: "a local entry needs `impl`".into() }),
        remote => Err(RegistryError::Entry {
            key: key.to_string(),
            reason: format!(
                "transport {:?} is not available in this build (remote executors arrive with the \
                 executor protocol)",
                remote.as_str()
            ),
        }),
    }
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
