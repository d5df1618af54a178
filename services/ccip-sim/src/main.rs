//! `qtg-ccip-sim`: a CCIP lane from chain A to chain B on two local nodes (anvil), made of
//! Chainlink's own CCIP 1.6 contracts — the released creation bytecode of the npm package
//! `@chainlink/contracts-ccip` (Router, OnRamp, OffRamp, FeeQuoter, NonceManager, RMNRemote,
//! RMNProxy, TokenAdminRegistry, BurnMint token pools and tokens) — plus a stand-in for the
//! off-chain network that the real lane has and two nodes cannot: it commits each message's
//! merkle root to the OffRamp (signed by F+1 of its OCR signers) and then executes it, exactly
//! as the OffRamp requires. For tests and demos only: its keys are test keys.
//!
//! `deploy` writes the lane (every address, the OCR keys) as JSON; `relay` runs the stand-in
//! over a deployed lane until stopped.

mod abi;
mod deploy;
mod relay;

use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{Address, Bytes, U256};
use clap::{Parser, Subcommand};
use qtg_evm::Rpc;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(name = "qtg-ccip-sim", about = "Chainlink CCIP 1.6 on two local chains, for qtg's tests and demo")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Deploys and configures the lane A → B and writes it (JSON) to --out.
    Deploy(deploy::DeployArgs),
    /// Commits and executes every message A's OnRamp sends to B, until stopped.
    Relay(relay::RelayArgs),
}

/// One chain the simulator transacts on: its RPC and anvil's unlocked accounts.
pub struct Chain {
    pub url: String,
    pub rpc: Rpc,
    pub chain_id: u64,
}

impl Chain {
    pub async fn connect(url: &str) -> anyhow::Result<Chain> {
        let rpc = Rpc::new(vec![url.to_string()], Duration::from_secs(30)).map_err(anyhow::Error::msg)?;
        let chain_id = rpc.quantity("eth_chainId", json!([])).await? as u64;
        Ok(Chain { url: url.to_string(), rpc, chain_id })
    }

    /// `eth_sendTransaction` from an unlocked account (anvil's), waits for the receipt and fails
    /// when the transaction reverted. `to` absent: a deployment.
    pub async fn send(
        &self,
        from: Address,
        to: Option<Address>,
        data: Bytes,
        value: U256,
        gas: Option<u64>,
    ) -> anyhow::Result<Value> {
        let mut tx = json!({"from": from.to_string(), "data": data.to_string(), "value": format!("{value:#x}")});
        if let Some(to) = to {
            tx["to"] = json!(to.to_string());
        }
        if let Some(gas) = gas {
            tx["gas"] = json!(format!("{gas:#x}"));
        }
        let hash = self.rpc.call("eth_sendTransaction", json!([tx])).await?;
        for _ in 0..600 {
            let receipt = self.rpc.call("eth_getTransactionReceipt", json!([hash])).await?;
            if !receipt.is_null() {
                anyhow::ensure!(
                    receipt["status"] == "0x1",
                    "transaction {hash} on chain {} ({}) reverted",
                    self.chain_id,
                    to.map(|t| t.to_string()).unwrap_or_else(|| "a deployment".into())
                );
                return Ok(receipt);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("transaction {hash} on chain {} was not mined", self.chain_id)
    }

    pub async fn call(&self, from: Address, to: Address, data: Bytes) -> anyhow::Result<Value> {
        self.send(from, Some(to), data, U256::ZERO, None).await
    }

    /// Deploys `code` (creation bytecode, hex) with `args` (ABI-encoded constructor arguments).
    pub async fn deploy(&self, from: Address, what: &str, code: &str, args: Vec<u8>) -> anyhow::Result<Address> {
        let mut data: Vec<u8> = alloy::primitives::hex::decode(code.trim().trim_start_matches("0x"))
            .map_err(|e| anyhow::anyhow!("{what}: the bytecode is not hex: {e}"))?;
        data.extend(args);
        let receipt = self
            .send(from, None, data.into(), U256::ZERO, Some(15_000_000))
            .await
            .map_err(|e| anyhow::anyhow!("deploying {what}: {e}"))?;
        let address: Address = receipt["contractAddress"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("deploying {what}: no contract address in the receipt"))?;
        tracing::info!(chain_id = self.chain_id, contract = what, %address, "deployed");
        Ok(address)
    }
}

/// A released artifact of the package: `<dir>/bytecode/<version>/<name>.bin`.
pub fn artifact(dir: &std::path::Path, version: &str, name: &str) -> anyhow::Result<String> {
    let path: PathBuf = dir.join("bytecode").join(version).join(format!("{name}.bin"));
    std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!("{}: {e} (scripts/ensure-evm-tools.sh fetches @chainlink/contracts-ccip)", path.display())
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Args::parse().command {
        Command::Deploy(a) => deploy::run(a).await,
        Command::Relay(a) => relay::run(a).await,
    }
}
