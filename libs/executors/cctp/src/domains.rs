//! `MG_CCTP_DOMAINS`: where CCTP is deployed on the chains of `MG_EVM_CHAINS` — per domain its
//! chain, USDC, and the contracts of each CCTP version it runs (V2 `TokenMessengerV2` /
//! `MessageTransmitterV2`, and optionally the legacy V1 pair), as a JSON array:
//!
//! ```json
//! [{"domain": 0, "chain_id": 1, "usdc": "0xA0b8…",
//!   "v2": {"token_messenger": "0x28b5…", "message_transmitter": "0x81D4…"},
//!   "v1": {"token_messenger": "0xBd3f…", "message_transmitter": "0x0a99…"}}]
//! ```
//!
//! The flat form of earlier releases (`token_messenger` and `message_transmitter` beside
//! `usdc`) is a domain's V1 pair. A node says which version it uses (`config.cctp_version`, 1
//! when absent) and pins that version's contract. Circle's addresses make the lane talk to the
//! real contracts; nothing else changes.

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::Deserialize;

/// A CCTP version: V1 ("legacy", being phased out by Circle) or V2 (Standard and Fast).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// Node `config.cctp_version`: 1 or 2, 1 when absent (templates written before V2).
    pub fn of(node_config: &serde_json::Value) -> Result<Version, String> {
        match node_config.get("cctp_version") {
            None | Some(serde_json::Value::Null) => Ok(Version::V1),
            Some(v) => match v.as_u64() {
                Some(1) => Ok(Version::V1),
                Some(2) => Ok(Version::V2),
                _ => Err(format!("config.cctp_version {v} is neither 1 nor 2")),
            },
        }
    }

    /// The message format's `version` field (Circle: 0 on V1, 1 on V2).
    pub fn of_message(message: &[u8]) -> Option<Version> {
        match message.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])) {
            Some(0) => Some(Version::V1),
            Some(1) => Some(Version::V2),
            _ => None,
        }
    }

    pub fn number(self) -> u32 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "V{}", self.number())
    }
}

/// One version's contracts on a domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contracts {
    pub token_messenger: Address,
    pub message_transmitter: Address,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Domain {
    pub domain: u32,
    pub chain_id: u64,
    pub usdc: Address,
    pub v1: Option<Contracts>,
    pub v2: Option<Contracts>,
}

impl Domain {
    pub fn contracts(&self, version: Version) -> Option<&Contracts> {
        match version {
            Version::V1 => self.v1.as_ref(),
            Version::V2 => self.v2.as_ref(),
        }
    }

    /// The versions deployed here, V1 first.
    pub fn versions(&self) -> impl Iterator<Item = (Version, &Contracts)> {
        [(Version::V1, self.v1.as_ref()), (Version::V2, self.v2.as_ref())]
            .into_iter()
            .filter_map(|(v, c)| Some((v, c?)))
    }
}

/// An entry as written: the versioned form, or the flat V1 form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    domain: u32,
    chain_id: u64,
    usdc: Address,
    token_messenger: Option<Address>,
    message_transmitter: Option<Address>,
    v1: Option<Contracts>,
    v2: Option<Contracts>,
}

impl Entry {
    fn domain(self) -> Result<Domain, String> {
        let flat = match (self.token_messenger, self.message_transmitter) {
            (Some(token_messenger), Some(message_transmitter)) => {
                Some(Contracts { token_messenger, message_transmitter })
            }
            (None, None) => None,
            _ => {
                return Err(format!(
                    "domain {}: token_messenger and message_transmitter go together (or inside \"v1\" / \"v2\")",
                    self.domain
                ))
            }
        };
        if flat.is_some() && self.v1.is_some() {
            return Err(format!("domain {}: the V1 contracts are given twice (flat and in \"v1\")", self.domain));
        }
        let v1 = flat.or(self.v1);
        if v1.is_none() && self.v2.is_none() {
            return Err(format!("domain {}: names no contracts (\"v2\" and/or \"v1\")", self.domain));
        }
        Ok(Domain { domain: self.domain, chain_id: self.chain_id, usdc: self.usdc, v1, v2: self.v2 })
    }
}

#[derive(Debug, Clone, Default)]
pub struct Domains(BTreeMap<u32, Domain>);

impl Domains {
    /// Parses `MG_CCTP_DOMAINS`; every chain must be one of `chains` (`MG_EVM_CHAINS`).
    pub fn parse(text: &str, chains: &qtg_evm::Chains) -> Result<Domains, String> {
        let list: Vec<Entry> = serde_json::from_str(text).map_err(|e| format!("MG_CCTP_DOMAINS: {e}"))?;
        let mut out = BTreeMap::new();
        for entry in list {
            let d = entry.domain().map_err(|e| format!("MG_CCTP_DOMAINS: {e}"))?;
            if !chains.contains_key(&d.chain_id) {
                return Err(format!(
                    "MG_CCTP_DOMAINS: domain {}: chain {} is not in MG_EVM_CHAINS",
                    d.domain, d.chain_id
                ));
            }
            if out.values().any(|o: &Domain| o.chain_id == d.chain_id) {
                return Err(format!("MG_CCTP_DOMAINS: chain {} has two domains", d.chain_id));
            }
            let id = d.domain;
            if out.insert(id, d).is_some() {
                return Err(format!("MG_CCTP_DOMAINS: domain {id} is listed twice"));
            }
        }
        Ok(Domains(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, domain: u32) -> Option<&Domain> {
        self.0.get(&domain)
    }

    pub fn of_chain(&self, chain_id: u64) -> Option<&Domain> {
        self.0.values().find(|d| d.chain_id == chain_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Domain> {
        self.0.values()
    }
}

/// EIP-1967's implementation slot (`keccak256("eip1967.proxy.implementation") - 1`, V2's
/// upgradeable contracts) and the one of Circle's USDC proxy (`FiatTokenProxy`, an
/// `AdminUpgradeabilityProxy`: `keccak256("org.zeppelinos.proxy.implementation")`).
const EIP1967_SLOT: &str = "0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc";
const ZEPPELINOS_SLOT: &str = "0x7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3";

/// The facts of every domain on its chain that the burn and the mint rely on, read through the
/// functions Circle's CCTP contracts have (V1: `TokenMessenger`, `TokenMinter`,
/// `MessageTransmitter` with `Attestable`, `Pausable`, `Ownable2Step`; V2: their V2
/// counterparts, with `Denylistable` and the fee settings). Per domain:
/// - USDC: its code hash, its implementation behind its proxy (an upgrade changes it; `none`
///   when USDC is not a proxy) and decimals;
/// - per version deployed (V1 facts are `cctp.<contract>.*`, V2 facts `cctp.v2.<contract>.*`):
///   the code hash of the token messenger, its local minter and the message transmitter, and
///   the EIP-1967 implementation of each (`none` when not a proxy); the messenger's
///   transmitter, minter and the remote messenger of every other domain; the minter's
///   per-message burn limit for USDC, its token controller and the local token it links to
///   every other domain's USDC; the transmitter's domain, its enabled attesters (sorted),
///   signature threshold, attester manager, owner, pauser and paused state;
/// - V2 only: the messenger's minimum fee, fee recipient, denylister, and whether each of the
///   lane's own addresses (`watched`: the senders of its burns and mints) is denylisted.
///
/// A read the contract refuses is [`qtg_executor::DriftFact::UNREADABLE`], which verify_drift
/// reports on every check; only no answer from the chain fails the read.
pub async fn facts(
    domains: &Domains,
    chains: &qtg_evm::Chains,
    watched: &[Address],
) -> Result<Vec<qtg_executor::DriftFact>, qtg_evm::RpcError> {
    use qtg_evm::call::{chain_scope, code_hash};
    let mut out = Vec::new();
    for d in domains.iter() {
        let Some(chain) = chains.get(&d.chain_id) else { continue };
        let reader = Reader { rpc: &chain.rpc };
        let mut facts: Vec<(String, String)> = Vec::new();
        facts.push(("cctp.usdc.code_hash".into(), code_hash(&chain.rpc, d.usdc).await?));
        let mut implementation = "none".to_string();
        for slot in [EIP1967_SLOT, ZEPPELINOS_SLOT] {
            if let Some(a) = reader.slot_address(d.usdc, slot).await? {
                implementation = a;
                break;
            }
        }
        facts.push(("cctp.usdc.implementation".into(), implementation));
        facts.push((
            "cctp.usdc.decimals".into(),
            reader.show(d.usdc, qtg_evm::tx::decimals_calldata(), Shown::Number).await?,
        ));
        for (version, contracts) in d.versions() {
            let prefix = match version {
                Version::V1 => "cctp",
                Version::V2 => "cctp.v2",
            };
            for (name, value) in reader.deployment(domains, d, version, contracts, watched).await? {
                facts.push((format!("{prefix}.{name}"), value));
            }
        }
        let scope = chain_scope(d.chain_id);
        out.extend(facts.into_iter().map(|(fact, value)| qtg_executor::DriftFact {
            scope: scope.clone(),
            fact,
            value,
        }));
    }
    Ok(out)
}

/// How a word read from a contract is shown as a fact.
#[derive(Clone, Copy)]
enum Shown {
    Address,
    Number,
    Word,
    Flag,
}

impl Shown {
    fn show(self, w: alloy::primitives::U256) -> String {
        use qtg_evm::call::hex_address;
        match self {
            Shown::Address => hex_address(Address::from_word(w.into())),
            Shown::Number => w.to_string(),
            Shown::Word => format!("{w:#066x}"),
            Shown::Flag => (!w.is_zero()).to_string(),
        }
    }
}

/// Reads facts on one chain; a call the contract refuses is `None` (shown as unreadable).
struct Reader<'a> {
    rpc: &'a qtg_evm::Rpc,
}

impl Reader<'_> {
    async fn word(
        &self,
        to: Address,
        data: alloy::primitives::Bytes,
    ) -> Result<Option<alloy::primitives::U256>, qtg_evm::RpcError> {
        match qtg_evm::call::call_word(self.rpc, to, data).await {
            Ok(w) => Ok(Some(w)),
            Err(qtg_evm::RpcError::Node { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn show(&self, to: Address, data: alloy::primitives::Bytes, how: Shown) -> Result<String, qtg_evm::RpcError> {
        Ok(self.word(to, data).await?.map_or_else(|| qtg_executor::DriftFact::UNREADABLE.to_string(), |w| how.show(w)))
    }

    /// The address a proxy keeps in `slot`, if any.
    async fn slot_address(&self, at: Address, slot: &str) -> Result<Option<String>, qtg_evm::RpcError> {
        use qtg_evm::call::hex_address;
        let v = self.rpc.call("eth_getStorageAt", serde_json::json!([hex_address(at), slot, "latest"])).await?;
        let w = v.as_str().and_then(|h| alloy::primitives::U256::from_str_radix(h.trim_start_matches("0x"), 16).ok());
        Ok(w.filter(|w| !w.is_zero()).map(|w| hex_address(Address::from_word(w.into()))))
    }

    /// The transmitter's enabled attesters, sorted, comma-separated (`getNumEnabledAttesters`,
    /// `getEnabledAttester(i)`); [`qtg_executor::DriftFact::UNREADABLE`] when it refuses a read.
    async fn attesters(&self, transmitter: Address) -> Result<String, qtg_evm::RpcError> {
        use qtg_evm::calls::{enabled_attester_calldata, num_enabled_attesters_calldata};
        let unreadable = || qtg_executor::DriftFact::UNREADABLE.to_string();
        let Some(n) = self.word(transmitter, num_enabled_attesters_calldata()).await? else {
            return Ok(unreadable());
        };
        // More attesters than any deployment has is not a list to read one by one.
        let Some(n) = u64::try_from(n).ok().filter(|n| *n <= 64) else { return Ok(unreadable()) };
        let mut list = Vec::new();
        for i in 0..n {
            let Some(w) = self.word(transmitter, enabled_attester_calldata(i)).await? else {
                return Ok(unreadable());
            };
            list.push(Shown::Address.show(w));
        }
        list.sort();
        Ok(list.join(","))
    }

    /// One version's facts on domain `d`, named without the version's prefix.
    async fn deployment(
        &self,
        domains: &Domains,
        d: &Domain,
        version: Version,
        c: &Contracts,
        watched: &[Address],
    ) -> Result<Vec<(String, String)>, qtg_evm::RpcError> {
        use qtg_evm::call::{code_hash, hex_address};
        use qtg_evm::calls::*;
        const UNREADABLE: &str = qtg_executor::DriftFact::UNREADABLE;
        let (messenger, transmitter) = (c.token_messenger, c.message_transmitter);
        let others: Vec<&Domain> = domains.iter().filter(|o| o.domain != d.domain).collect();
        let mut facts: Vec<(String, String)> = Vec::new();
        let minter = self.word(messenger, local_minter_calldata()).await?.map(|w| Address::from_word(w.into()));
        for (name, at) in
            [("token_messenger", Some(messenger)), ("message_transmitter", Some(transmitter)), ("token_minter", minter)]
        {
            let Some(at) = at else {
                facts.push((format!("{name}.code_hash"), UNREADABLE.into()));
                continue;
            };
            facts.push((format!("{name}.code_hash"), code_hash(self.rpc, at).await?));
            if version == Version::V2 {
                let implementation = self.slot_address(at, EIP1967_SLOT).await?.unwrap_or_else(|| "none".into());
                facts.push((format!("{name}.implementation"), implementation));
            }
        }
        facts.push((
            "token_messenger.local_message_transmitter".into(),
            self.show(messenger, local_transmitter_calldata(), Shown::Address).await?,
        ));
        facts.push(("token_messenger.local_minter".into(), minter.map_or_else(|| UNREADABLE.to_string(), hex_address)));
        for other in &others {
            facts.push((
                format!("token_messenger.remote_token_messenger.{}", other.domain),
                self.show(messenger, remote_messenger_calldata(other.domain), Shown::Word).await?,
            ));
        }
        if version == Version::V2 {
            for (name, data, how) in [
                ("min_fee", min_fee_calldata(), Shown::Number),
                ("fee_recipient", fee_recipient_calldata(), Shown::Address),
                ("denylister", denylister_calldata(), Shown::Address),
            ] {
                facts.push((format!("token_messenger.{name}"), self.show(messenger, data, how).await?));
            }
            let mut seen = std::collections::BTreeSet::new();
            for a in watched.iter().filter(|a| seen.insert(**a)) {
                facts.push((
                    format!("token_messenger.denylisted.{}", hex_address(*a)),
                    self.show(messenger, is_denylisted_calldata(*a), Shown::Flag).await?,
                ));
            }
        }
        if let Some(minter) = minter {
            facts.push((
                "token_minter.burn_limit_per_message".into(),
                self.show(minter, burn_limit_calldata(d.usdc), Shown::Number).await?,
            ));
            facts.push((
                "token_minter.token_controller".into(),
                self.show(minter, token_controller_calldata(), Shown::Address).await?,
            ));
            for other in &others {
                facts.push((
                    format!("token_minter.local_token.{}", other.domain),
                    self.show(minter, local_token_of_calldata(other.domain, other.usdc), Shown::Address).await?,
                ));
            }
        }
        facts.push((
            "message_transmitter.local_domain".into(),
            self.show(transmitter, local_domain_calldata(), Shown::Number).await?,
        ));
        facts.push((
            "message_transmitter.signature_threshold".into(),
            self.show(transmitter, signature_threshold_calldata(), Shown::Number).await?,
        ));
        facts.push(("message_transmitter.attesters".into(), self.attesters(transmitter).await?));
        for (name, data, how) in [
            ("attester_manager", attester_manager_calldata(), Shown::Address),
            ("owner", owner_calldata(), Shown::Address),
            ("pauser", pauser_calldata(), Shown::Address),
            ("paused", paused_calldata(), Shown::Flag),
        ] {
            facts.push((format!("message_transmitter.{name}"), self.show(transmitter, data, how).await?));
        }
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chains() -> qtg_evm::Chains {
        let chain = json!([{"chain_id": 1, "rpc_urls": ["http://127.0.0.1:1"], "max_fee_per_gas_wei": "1",
                            "max_priority_fee_per_gas_wei": "1"}]);
        qtg_evm::parse_chains(&chain.to_string()).expect("chains")
    }

    const USDC: &str = "0x00000000000000000000000000000000000000aa";
    const M: &str = "0x00000000000000000000000000000000000000bb";
    const T: &str = "0x00000000000000000000000000000000000000cc";

    fn parse(entry: serde_json::Value) -> Result<Domains, String> {
        let mut e = json!({"domain": 0, "chain_id": 1, "usdc": USDC});
        e.as_object_mut().unwrap().extend(entry.as_object().unwrap().clone());
        Domains::parse(&json!([e]).to_string(), &chains())
    }

    #[test]
    fn a_domain_names_its_v2_and_v1_contracts_or_the_flat_v1_pair() {
        let pair = json!({"token_messenger": M, "message_transmitter": T});
        let d = parse(json!({"v2": pair, "v1": pair})).unwrap();
        let d = d.get(0).unwrap();
        assert_eq!(d.versions().map(|(v, _)| v).collect::<Vec<_>>(), vec![Version::V1, Version::V2]);
        let d = parse(pair.clone()).unwrap();
        assert!(d.get(0).unwrap().v1.is_some() && d.get(0).unwrap().v2.is_none(), "the flat form is V1");
        let twice = json!({"token_messenger": M, "message_transmitter": T, "v1": pair});
        assert!(parse(twice).unwrap_err().contains("twice"));
        assert!(parse(json!({})).unwrap_err().contains("names no contracts"));
        assert!(parse(json!({"token_messenger": M})).unwrap_err().contains("go together"));
        assert_eq!(Version::of(&json!({})), Ok(Version::V1));
        assert_eq!(Version::of(&json!({"cctp_version": 2})), Ok(Version::V2));
        assert!(Version::of(&json!({"cctp_version": 3})).is_err());
        assert_eq!(Version::of_message(&[0, 0, 0, 1, 9]), Some(Version::V2));
    }
}
