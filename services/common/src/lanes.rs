//! The compiled-in lanes: registry entries with `transport = "local"` name one by
//! `impl = "<name>"`. Adding a lane = its crate under `libs/executors/<lane>` (exposing
//! `pub fn lane(&LaneContext) -> Result<Box<dyn LanePlugin>, LaneError>`) + one line here.

use qtg_executor::{LaneContext, LaneFactory, LanePlugin, Registry, RegistryFile};

/// Every lane this build has.
pub const LANES: &[LaneFactory] = &[qtg_sim::lane, qtg_cex::lane, qtg_evm::lane, qtg_cctp::lane, qtg_ccip::lane];

/// Builds the lanes with `ctx` and then the registry of `file` over them.
pub fn build_registry(file: &RegistryFile, ctx: &LaneContext<'_>) -> anyhow::Result<Registry> {
    let lanes: Vec<Box<dyn LanePlugin>> =
        LANES.iter().map(|make| make(ctx)).collect::<Result<_, _>>().map_err(anyhow::Error::new)?;
    Ok(Registry::build(file, &lanes, ctx.setting)?)
}
