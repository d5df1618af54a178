//! Observation pacing: the seed's DEFAULT_OBSERVE_INTERVALS and the retry-hint clamp.

/// Retry hints are clamped to this many seconds.
pub const MAX_BACKOFF_SECONDS: f64 = 600.0;

/// Interval for action types the table does not name.
pub const DEFAULT_OBSERVE_INTERVAL_SECONDS: f64 = 10.0;

pub const DEFAULT_OBSERVE_INTERVALS: [(&str, f64); 9] = [
    ("cex_withdrawal_status", 5.0),
    ("cex_deposit_status", 10.0),
    ("destination_chain_receive_observe", 10.0),
    ("destination_chain_finality_observe", 15.0),
    ("protocol_observe", 15.0),
    ("cctp_attestation", 15.0),
    ("cctp_mint_status", 5.0),
    ("ccip_delivery", 60.0),
    ("debridge_fulfillment", 30.0),
];

/// Seconds until the next observation: the executor's `retry_after_seconds` wins (clamped to
/// `[0, 600]`), else the action type's default.
pub fn next_observe_delay(action_type: &str, retry_after_seconds: Option<f64>) -> f64 {
    match retry_after_seconds {
        Some(s) if s.is_finite() => s.clamp(0.0, MAX_BACKOFF_SECONDS),
        _ => DEFAULT_OBSERVE_INTERVALS
            .iter()
            .find(|(t, _)| *t == action_type)
            .map(|(_, s)| *s)
            .unwrap_or(DEFAULT_OBSERVE_INTERVAL_SECONDS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_wins_and_is_clamped() {
        assert_eq!(next_observe_delay("ccip_delivery", None), 60.0);
        assert_eq!(next_observe_delay("anything", None), 10.0);
        assert_eq!(next_observe_delay("ccip_delivery", Some(2.5)), 2.5);
        assert_eq!(next_observe_delay("x", Some(10_000.0)), 600.0);
        assert_eq!(next_observe_delay("x", Some(-1.0)), 0.0);
        assert_eq!(next_observe_delay("cctp_mint_status", Some(f64::NAN)), 5.0);
    }
}
