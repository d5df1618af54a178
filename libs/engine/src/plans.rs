//! Plan versions never change once created, so their edges are read once per process.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use qtg_core::PlanEdge;
use qtg_store::{context as q, PgConnection};
use uuid::Uuid;

static EDGES: LazyLock<RwLock<HashMap<Uuid, Arc<Vec<PlanEdge>>>>> = LazyLock::new(Default::default);

/// The edges of plan version `id` (immutable; keyed by a UUID, so one cache serves every
/// database a process talks to).
pub async fn edges(conn: &mut PgConnection, id: Uuid) -> Result<Arc<Vec<PlanEdge>>, qtg_store::StoreError> {
    if let Some(e) = EDGES.read().unwrap_or_else(|p| p.into_inner()).get(&id) {
        return Ok(e.clone());
    }
    let edges = Arc::new(q::plan_edges(conn, id).await?);
    EDGES.write().unwrap_or_else(|p| p.into_inner()).insert(id, edges.clone());
    Ok(edges)
}
