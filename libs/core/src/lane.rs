//! Recovery lanes: each executor key belongs to one; recovery sweeps them in priority order.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    Ccip,
    Stargate,
    Cex,
    Other,
}

impl Lane {
    /// Recovery's arm order.
    pub const ALL: [Lane; 4] = [Lane::Ccip, Lane::Stargate, Lane::Cex, Lane::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Ccip => "ccip",
            Lane::Stargate => "stargate",
            Lane::Cex => "cex",
            Lane::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Lane> {
        Lane::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The lane a key names by the `exec.{lane}.{role}` pattern; `other` when it names none.
    pub fn from_executor_key(key: &str) -> Lane {
        let mut parts = key.split('.');
        match (parts.next(), parts.next()) {
            (Some("exec"), Some(lane)) => Lane::parse(lane).unwrap_or(Lane::Other),
            _ => Lane::Other,
        }
    }
}

/// A `lane` column as the store reads it.
impl TryFrom<String> for Lane {
    type Error = crate::state::UnknownName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Lane::parse(&s).ok_or(crate::state::UnknownName("lane", s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_from_key_pattern() {
        assert_eq!(Lane::from_executor_key("exec.cex.withdrawal_action"), Lane::Cex);
        assert_eq!(Lane::from_executor_key("exec.ccip.send"), Lane::Ccip);
        assert_eq!(Lane::from_executor_key("exec.sim.transfer"), Lane::Other);
        assert_eq!(Lane::from_executor_key("cex"), Lane::Other);
    }
}
