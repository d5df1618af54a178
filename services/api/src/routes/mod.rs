//! The `/v3` operations, one module per resource. Each handler takes its role extractor
//! first, then its path, query and body (see `crate::extract`), and calls one engine
//! operation for a change or the store for a read.

pub mod attention;
pub mod audit;
pub mod balances;
pub mod callbacks;
pub mod capital;
pub mod controls;
pub mod drift;
pub mod keys;
pub mod movements;
pub mod notify;
pub mod operator;
pub mod policies;
pub mod roster;
pub mod templates;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;

/// Every operation, served and documented from the same `routes!` calls.
pub fn all() -> OpenApiRouter<AppState> {
    use self::{
        attention::*, audit::*, balances::*, callbacks::*, capital::*, controls::*, drift::*, keys::*, movements::*,
        notify::*, operator::*, policies::*, roster::*, templates::*,
    };
    OpenApiRouter::new()
        .routes(routes!(propose_template, list_proposals))
        .routes(routes!(get_proposal))
        .routes(routes!(approve_proposal))
        .routes(routes!(reject_proposal))
        .routes(routes!(list_templates))
        .routes(routes!(get_template))
        .routes(routes!(retire_template_version))
        .routes(routes!(create_movement, list_movements))
        .routes(routes!(get_movement))
        .routes(routes!(approve_movement))
        .routes(routes!(reject_movement))
        .routes(routes!(cancel_movement))
        .routes(routes!(resume_movement))
        .routes(routes!(retry_node))
        .routes(routes!(diagnose_node))
        .routes(routes!(get_node))
        .routes(routes!(complete_manual))
        .routes(routes!(list_audit_events))
        .routes(routes!(list_executors))
        .routes(routes!(list_signers))
        .routes(routes!(set_expected_identity))
        .routes(routes!(list_workers))
        .routes(routes!(list_callbacks))
        .routes(routes!(replay_callback))
        .routes(routes!(replay_callbacks))
        .routes(routes!(list_controls))
        .routes(routes!(pause_dispatch))
        .routes(routes!(resume_dispatch))
        .routes(routes!(list_drift))
        .routes(routes!(list_balances))
        .routes(routes!(balance_history))
        .routes(routes!(list_venue_transfers))
        .routes(routes!(create_capital_transfer, list_capital_transfers))
        .routes(routes!(get_capital_transfer))
        .routes(routes!(close_capital_transfer))
        .routes(routes!(record_baseline))
        .routes(routes!(create_api_key, list_api_keys))
        .routes(routes!(revoke_api_key))
        .routes(routes!(list_key_requests))
        .routes(routes!(approve_key_request))
        .routes(routes!(reject_key_request))
        .routes(routes!(whoami))
        .routes(routes!(attention))
        .routes(routes!(propose_policy, list_policies))
        .routes(routes!(current_policy))
        .routes(routes!(get_policy))
        .routes(routes!(approve_policy))
        .routes(routes!(reject_policy))
        .routes(routes!(simulate_policy))
        .routes(routes!(propose_entry, list_entries))
        .routes(routes!(approve_entry))
        .routes(routes!(reject_entry))
        .routes(routes!(remove_entry))
        .routes(routes!(create_channel, list_channels))
        .routes(routes!(delete_channel))
        .routes(routes!(create_route, list_routes))
        .routes(routes!(delete_route))
        .routes(routes!(list_notifications))
        .routes(routes!(redeliver_notification))
}
