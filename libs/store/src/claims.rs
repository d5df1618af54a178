//! Worker claims (docs/architecture.md §4.6): candidate ids are listed without locks, then each one is
//! claimed alone with `FOR UPDATE OF n, r SKIP LOCKED` inside a savepoint that is rolled back
//! on a miss, so a skipped request never keeps a stray node lock.

use qtg_core::Lane;
use sqlx::{Acquire, AssertSqlSafe, PgConnection, Row};
use uuid::Uuid;

use crate::rows::{ClaimContext, CLAIM_CONTEXT_COLUMNS, WORK_ITEM_COLUMNS, WORK_ITEM_FROM};
use crate::{is_lock_not_available, Result, WorkItem};

/// What a worker is looking for.
#[derive(Debug, Clone, Copy)]
pub enum Pickup {
    /// READY non-manual nodes of APPROVED/EXECUTING requests that no pause holds — and
    /// PREPARING / AWAITING_SIGNATURE ones whose lease expired (their dispatcher died or froze
    /// before arming) — oldest request first.
    Dispatch,
    /// A successor a dispatcher's record activated and claims at once, in the record's
    /// transaction, before writing it READY: the dispatch predicate for a BLOCKED node
    /// (docs/architecture.md §6.1, step 6). Only for [`claim_first`] with the id the record
    /// chose ([`candidates`] refuses it). Counted as `dispatch` in the claim metrics.
    HandOff,
    /// Due SUBMITTED/OBSERVING nodes of EXECUTING requests, oldest request first.
    Observe,
    /// In `lane`: UNKNOWN nodes recovery may still decide, and SUBMITTING nodes, once
    /// `grace_seconds` have passed since `started_at` (and, for SUBMITTING, `skew_seconds`
    /// since `submit_by`: the attempt can no longer start at the venue); longest idle first.
    Recover { lane: Lane, grace_seconds: f64, skew_seconds: f64 },
}

/// The SQL form of `qtg_core::NodeView::handed_to_person` for an UNKNOWN node `n` (an
/// observation timeout, or an executor's review marker that is neither null nor false):
/// recovery leaves such a node to a person. `tests/tests/claims.rs` checks both forms agree.
pub const HANDED_TO_PERSON: &str = "(n.error_code IS NOT DISTINCT FROM 'OBSERVATION_TIMEOUT' OR \
                                    COALESCE(n.provider_refs->'__manual_review_required', 'false'::jsonb) NOT IN \
                                    ('false'::jsonb, 'null'::jsonb))";

/// The dispatch predicate's two arms: a READY node no lease holds back, and a claimed node
/// whose dispatcher died or froze before arming (its lease expired).
const DISPATCH_READY: &str = "n.node_state = 'READY' AND (n.lease_expires_at IS NULL OR n.lease_expires_at < now())";
const DISPATCH_EXPIRED: &str = "n.node_state IN ('PREPARING', 'AWAITING_SIGNATURE') AND n.lease_expires_at < now()";

/// The movement (`r`) of a node a dispatcher may take.
const MOVEMENT_DISPATCHABLE: &str = "r.request_state IN ('APPROVED', 'EXECUTING')";

/// A node in `state` (one or more arms) that a dispatcher serving `served` may take: not a
/// manual step, its movement APPROVED or EXECUTING, no pause holding it.
fn dispatchable(served: &str, state: &str) -> String {
    format!(
        "{served} AND n.node_kind <> 'manual' AND ({state})
         AND {MOVEMENT_DISPATCHABLE} AND NOT {PAUSED}",
        PAUSED = crate::controls::PAUSED
    )
}

impl Pickup {
    /// The predicate both the listing and the claim re-check. `$first` is the list of executor
    /// keys this worker serves (a replica never takes a node it cannot call — e.g. during a
    /// rolling registry change); for recovery the next two are the lane and its grace.
    fn predicate(self, first: usize) -> String {
        let served = format!("p.executor_key = ANY(${first}::text[])");
        match self {
            Pickup::Dispatch => dispatchable(&served, &format!("({DISPATCH_READY}) OR ({DISPATCH_EXPIRED})")),
            Pickup::HandOff => dispatchable(
                &served,
                "n.node_state = 'BLOCKED' AND (n.lease_expires_at IS NULL OR n.lease_expires_at < now())",
            ),
            Pickup::Observe => format!(
                "{served} AND n.node_state IN ('SUBMITTED', 'OBSERVING')
                AND r.request_state = 'EXECUTING'
                AND (n.next_observe_at IS NULL OR n.next_observe_at <= now())"
            ),
            Pickup::Recover { .. } => format!(
                "{served} AND n.lane = ${lane} AND r.request_state = 'EXECUTING'
                AND n.started_at IS NOT NULL
                AND n.started_at + make_interval(secs => ${grace}::float8) < now()
                AND (n.next_observe_at IS NULL OR n.next_observe_at <= now())
                AND ((n.node_state = 'SUBMITTING'
                      AND (n.submit_by IS NULL OR n.submit_by + make_interval(secs => ${skew}::float8) < now()))
                     OR (n.node_state = 'UNKNOWN' AND NOT {HANDED_TO_PERSON}))",
                lane = first + 1,
                grace = first + 2,
                skew = first + 3
            ),
        }
    }

    /// The metric label of this pickup.
    pub fn name(self) -> &'static str {
        match self {
            Pickup::Dispatch | Pickup::HandOff => "dispatch",
            Pickup::Observe => "observe",
            Pickup::Recover { .. } => "recover",
        }
    }

    fn order(self) -> &'static str {
        match self {
            // Dispatch lists in the same order from the node ([`dispatch_listing`]); a hand-off
            // is never listed.
            Pickup::Dispatch | Pickup::HandOff | Pickup::Observe => "r.created_at, n.id",
            Pickup::Recover { .. } => "n.updated_at, n.id",
        }
    }
}

/// Lists up to `limit` candidate node ids (no locks) among nodes bound to `served` executor
/// keys, leaving out `exclude`.
pub async fn candidates(
    conn: &mut PgConnection,
    pickup: Pickup,
    served: &[String],
    exclude: &[Uuid],
    limit: i64,
) -> Result<Vec<Uuid>> {
    if let Pickup::HandOff = pickup {
        // Its predicate does not read the plan: only the record that activated the node knows
        // its predecessors are done. Listed, it would offer every BLOCKED node.
        return Err(crate::StoreError::corrupt("a hand-off is claimed by its id, never listed"));
    }
    let sql = match pickup {
        Pickup::Dispatch => return dispatch_candidates(conn, served, exclude, limit).await,
        // Dynamic: the predicate, its parameters and the order depend on `pickup`. The nodes
        // come from the state's partial index; each one's movement is then looked up by its key
        // (the `OFFSET 0` keeps that lookup a nested index probe: on a table whose statistics
        // lag its growth, the planner otherwise scanned every movement once per candidate node).
        _ => format!(
            "SELECT n.id FROM movement_request_nodes n
             CROSS JOIN LATERAL (SELECT r0.request_state, r0.created_at FROM movement_requests r0
                                 WHERE r0.id = n.request_id OFFSET 0) r
             JOIN plan_nodes p ON p.id = n.plan_node_id
             WHERE {} AND NOT (n.id = ANY($1)) ORDER BY {} LIMIT $2",
            pickup.predicate(3),
            pickup.order()
        ),
    };
    let query = bind_lane(sqlx::query(AssertSqlSafe(sql)).bind(exclude).bind(limit).bind(served), pickup);
    let rows = query.fetch_all(&mut *conn).await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// The dispatch listing, oldest movement first, read in the order of an index so that it
/// stops once it has its rows: a burst of READY nodes (200 roots made READY by a burst of
/// approvals) must not make every listing join, test and sort all of them, and a backlog this
/// dispatcher may not take — behind a pause, or of an executor it does not serve — must not be
/// read by every listing for the nodes it may take.
///
/// `mrn_dispatch_by_executor` holds the READY nodes that are not manual steps by executor key,
/// lane and `created_at, id`. The first statement ([`dispatch_lanes`]) finds the executor keys
/// and lanes that have READY nodes, each with its oldest entry (a loose index scan: one probe
/// each, and one more to find there is no other, however many nodes each has and however many
/// keys the registry names), keeps those this dispatcher serves and no pause holds (global,
/// the lane, the executor: the claim's test, on the key and lane — a node's own — instead of on
/// each node), and answers them with the expired leases and the READY nodes without a key
/// (written before migration 0042; few, read from `mrn_lease` and `mrn_dispatch_keyless` with
/// [`Pickup::Dispatch`]'s predicate). Then the keys and lanes are walked in order
/// ([`dispatch_walk`]), the one with the oldest entry first, until no key and lane left can hold
/// a node older than the `limit`th found; the rows are merged. Inside one key and lane the walk
/// still reads past the READY nodes it turns down for their own reasons (held back, a movement
/// not APPROVED or EXECUTING, just tried), never more than those. A node's `created_at` is its
/// movement's and its executor key its plan node's (`movements::insert` copies both), so this
/// is the order of [`Pickup::order`] without reading the movement first; the claim re-checks
/// the whole predicate.
///
/// Short statements rather than one: as one, PostgreSQL planned the listing afresh on every
/// call (its generic plan, not knowing how many keys or rows, looked dearer than each custom
/// one), 2 ms of planning for 0.2 ms of execution. Each of these keeps one plan, the limit
/// written into their text for that. `tests/claims.rs`
/// `the_dispatch_listing_takes_the_oldest_first_and_reads_only_what_it_returns`,
/// `a_paused_or_unserved_backlog_is_not_read_by_the_dispatch_listing` and
/// `the_dispatch_listing_walks_only_the_executors_that_hold_the_oldest_nodes` check the order
/// and what it reads.
async fn dispatch_candidates(
    conn: &mut PgConnection,
    served: &[String],
    exclude: &[Uuid],
    limit: i64,
) -> Result<Vec<Uuid>> {
    type At = chrono::DateTime<chrono::Utc>;
    if limit <= 0 {
        return Ok(Vec::new());
    }
    let wanted = limit as usize;
    let rows =
        sqlx::query(AssertSqlSafe(dispatch_lanes(limit))).bind(exclude).bind(served).fetch_all(&mut *conn).await?;
    // Nodes found, and the keys and lanes to walk with their oldest entry: `(at, id)` each.
    let mut found: Vec<(At, Uuid)> = Vec::new();
    let mut lanes: Vec<((At, Uuid), String, String)> = Vec::new();
    for row in &rows {
        let oldest: (At, Uuid) = (row.try_get("created_at")?, row.try_get("id")?);
        match row.try_get::<Option<String>, _>("executor_key")? {
            Some(key) => lanes.push((oldest, key, row.try_get("lane")?)),
            None => found.push(oldest),
        }
    }
    lanes.sort_unstable();
    let walk = dispatch_walk(limit);
    for (oldest, key, lane) in &lanes {
        found.sort_unstable();
        // Every node of this key and lane, and of those after it, is at least as old as its
        // oldest entry: none can be among the first `limit` once that many are older.
        if found.len() >= wanted && found[wanted - 1] < *oldest {
            break;
        }
        let rows =
            sqlx::query(AssertSqlSafe(walk.as_str())).bind(key).bind(lane).bind(exclude).fetch_all(&mut *conn).await?;
        for row in &rows {
            found.push((row.try_get("created_at")?, row.try_get("id")?));
        }
    }
    found.sort_unstable();
    Ok(found.into_iter().take(wanted).map(|(_, id)| id).collect())
}

/// The executor keys and lanes with READY nodes that a dispatcher serving `$2` may walk, each
/// with its oldest entry (`id`, `created_at`); and, with a NULL key, the oldest `limit` expired
/// leases and READY nodes without a key it may take (`$1`: ids left out).
fn dispatch_lanes(limit: i64) -> String {
    const TAKEABLE: &str = "n.node_state = 'READY' AND n.node_kind <> 'manual'";
    const OLDEST: &str = "ORDER BY n.executor_key, n.lane, n.created_at, n.id LIMIT 1";
    let arm = |state: &str| {
        format!(
            "(SELECT NULL, NULL, n.id, n.created_at FROM movement_request_nodes n
              CROSS JOIN LATERAL (SELECT r0.request_state FROM movement_requests r0
                                  WHERE r0.id = n.request_id OFFSET 0) r
              JOIN plan_nodes p ON p.id = n.plan_node_id
              WHERE {} AND NOT (n.id = ANY($1))
              ORDER BY n.created_at, n.id LIMIT {limit})",
            dispatchable("p.executor_key = ANY($2::text[])", state)
        )
    };
    // The pause test is the claim's (`controls::PAUSED`), which reads the node's lane as `n.lane`
    // and its executor key as `p.executor_key`: `n` and `p` name the key and lane here.
    format!(
        "WITH RECURSIVE lanes(executor_key, lane, id, created_at) AS (
             (SELECT n.executor_key, n.lane, n.id, n.created_at FROM movement_request_nodes n
              WHERE n.executor_key IS NOT NULL AND {TAKEABLE} {OLDEST})
           UNION ALL
             SELECT f.executor_key, f.lane, f.id, f.created_at FROM lanes h
             CROSS JOIN LATERAL (SELECT n.executor_key, n.lane, n.id, n.created_at FROM movement_request_nodes n
                                 WHERE (n.executor_key, n.lane) > (h.executor_key, h.lane) AND {TAKEABLE}
                                 {OLDEST}) f)
         SELECT h.executor_key, h.lane, h.id, h.created_at FROM lanes h
         CROSS JOIN LATERAL (SELECT h.lane) n
         CROSS JOIN LATERAL (SELECT h.executor_key) p
         WHERE h.executor_key = ANY($2::text[]) AND NOT {PAUSED}
         UNION ALL {}
         UNION ALL {}",
        arm(DISPATCH_EXPIRED),
        arm(&format!("n.executor_key IS NULL AND {DISPATCH_READY}")),
        PAUSED = crate::controls::PAUSED
    )
}

/// The oldest `limit` READY nodes of executor key `$1` in lane `$2` that a dispatcher may take,
/// `$3` left out: the tests of the node itself — the pause and the executor are the key's and
/// lane's, tested by [`dispatch_lanes`].
fn dispatch_walk(limit: i64) -> String {
    format!(
        "SELECT n.id, n.created_at FROM movement_request_nodes n
         CROSS JOIN LATERAL (SELECT r0.request_state FROM movement_requests r0
                             WHERE r0.id = n.request_id OFFSET 0) r
         WHERE n.executor_key = $1 AND n.lane = $2 AND n.node_kind <> 'manual' AND ({DISPATCH_READY})
           AND {MOVEMENT_DISPATCHABLE} AND NOT (n.id = ANY($3))
         ORDER BY n.created_at, n.id LIMIT {limit}"
    )
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn bind_lane(query: PgQuery<'_>, pickup: Pickup) -> PgQuery<'_> {
    match pickup {
        Pickup::Recover { lane, grace_seconds, skew_seconds } => {
            query.bind(lane.as_str()).bind(grace_seconds).bind(skew_seconds)
        }
        _ => query,
    }
}

/// Claims one candidate as the first statement of a fresh transaction `tx` — or of a
/// savepoint in a transaction that already holds the node and its request (a dispatcher's
/// hand-off) —: locks node and request (SKIP LOCKED; rows this transaction holds are not
/// skipped). `None` on a miss (locked elsewhere or no longer matching): the caller rolls `tx`
/// (or the savepoint) back, which also drops a stray lock on the node.
pub async fn claim_first(
    tx: &mut PgConnection,
    pickup: Pickup,
    served: &[String],
    node_id: Uuid,
) -> Result<Option<WorkItem>> {
    // Dynamic: the predicate and its parameters depend on `pickup` (as in `candidates`).
    // With the row: what its execution context is built from (one round trip, not three).
    let sql = format!(
        "SELECT {WORK_ITEM_COLUMNS}, {CLAIM_CONTEXT_COLUMNS} {WORK_ITEM_FROM}
         WHERE n.id = $1 AND {} FOR UPDATE OF n, r SKIP LOCKED",
        pickup.predicate(2)
    );
    let row =
        bind_lane(sqlx::query(AssertSqlSafe(sql)).bind(node_id).bind(served), pickup).fetch_optional(&mut *tx).await?;
    match row {
        Some(row) => {
            let mut item = <WorkItem as sqlx::FromRow<_>>::from_row(&row)?;
            item.context = ClaimContext::from_json(row.try_get("context_nodes")?, row.try_get("context_artifacts")?)?;
            Ok(Some(item))
        }
        None => {
            qtg_telemetry::sink().claim_miss(pickup.name());
            Ok(None)
        }
    }
}

/// Where a node stands now: read after a compare-and-set matched nothing, to tell why.
#[derive(Debug, Clone)]
pub struct NodeNow {
    pub node_state: qtg_core::NodeState,
    pub attempt_no: i32,
    pub claim_token: Option<Uuid>,
    pub request_state: qtg_core::RequestState,
    /// `scope:target` of a pause that holds the node.
    pub held_by: Option<String>,
}

/// Reads a node's state, attempt and token, its request's state and the pause holding it.
pub async fn node_now(conn: &mut PgConnection, node_id: Uuid) -> Result<Option<NodeNow>> {
    // `held_by`: the `scope:target` of the pause that holds the node, or NULL — the one
    // definition of a holding pause the claim shares (`controls::holding_pauses!`), handed to the
    // checked macro as literals.
    let row = crate::controls::holding_pauses!(
        sqlx::query!,
        "SELECT n.node_state, n.attempt_no, n.claim_token, r.request_state, (",
        "c.scope || ':' || c.target",
        r#") AS "held_by?"
         FROM movement_request_nodes n
         JOIN movement_requests r ON r.id = n.request_id
         JOIN plan_nodes p ON p.id = n.plan_node_id
         WHERE n.id = $1"#,
        node_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| {
        Ok(NodeNow {
            node_state: crate::rows::column("node_state", r.node_state)?,
            attempt_no: r.attempt_no,
            claim_token: r.claim_token,
            request_state: crate::rows::column("request_state", r.request_state)?,
            held_by: r.held_by,
        })
    })
    .transpose()
}

/// Locks a request row without waiting: `Busy` if another operation holds it.
pub async fn lock_request_nowait(conn: &mut PgConnection, request_id: Uuid) -> Result<Option<qtg_core::RequestState>> {
    let mut savepoint = conn.begin().await?;
    let res =
        sqlx::query_scalar!("SELECT request_state FROM movement_requests WHERE id = $1 FOR UPDATE NOWAIT", request_id)
            .fetch_optional(&mut *savepoint)
            .await;
    match res {
        Ok(state) => {
            savepoint.commit().await?;
            state.map(|s| crate::rows::column("request_state", s)).transpose()
        }
        Err(e) if is_lock_not_available(&e) => {
            savepoint.rollback().await?;
            Err(crate::StoreError::Busy(format!("movement {request_id}")))
        }
        Err(e) => Err(e.into()),
    }
}

/// Seconds until the earliest node of `pickup` that is scheduled but not yet due becomes
/// due (observe: `next_observe_at`; recover: the later of `next_observe_at` and the lane's
/// grace after `started_at`). `None` when nothing is scheduled.
/// `grace` names each lane's grace by the lane (a lane it does not name has none).
pub async fn next_due_in(conn: &mut PgConnection, pickup: Pickup, grace: &[(Lane, f64)]) -> Result<Option<f64>> {
    let due = match pickup {
        Pickup::Dispatch | Pickup::HandOff => return Ok(None),
        Pickup::Observe => {
            // The earliest first, along the observation index: the first row of an executing
            // movement answers, however many open nodes wait (a `min()` over a join read
            // them all).
            sqlx::query_scalar!(
                r#"SELECT extract(epoch FROM n.next_observe_at - now())::float8 AS "due_in!"
                 FROM movement_request_nodes n
                 CROSS JOIN LATERAL (SELECT 1 FROM movement_requests r0
                                     WHERE r0.id = n.request_id AND r0.request_state = 'EXECUTING' OFFSET 0) r
                 WHERE n.node_state IN ('SUBMITTED', 'OBSERVING') AND n.next_observe_at > now()
                 ORDER BY n.next_observe_at LIMIT 1"#
            )
            .fetch_optional(&mut *conn)
            .await?
        }
        Pickup::Recover { .. } => {
            let lanes: Vec<&str> = grace.iter().map(|(l, _)| l.as_str()).collect();
            let seconds: Vec<f64> = grace.iter().map(|(_, s)| *s).collect();
            sqlx::query_scalar!(
                r#"SELECT extract(epoch FROM min(d) - now())::float8 AS "due_in?" FROM (
                     SELECT GREATEST(COALESCE(n.next_observe_at, '-infinity'),
                         n.started_at + make_interval(secs => COALESCE(
                             (SELECT g.secs FROM unnest($1::text[], $2::float8[]) AS g(lane, secs)
                              WHERE g.lane = n.lane),
                             0))) AS d
                     FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
                     WHERE n.node_state IN ('UNKNOWN', 'SUBMITTING') AND r.request_state = 'EXECUTING'
                       AND n.started_at IS NOT NULL) s
                 WHERE d > now()"#,
                &lanes as &[&str],
                &seconds
            )
            .fetch_one(&mut *conn)
            .await?
        }
    };
    Ok(due.map(|s| s.max(0.0)))
}

/// Locks every node of a request without waiting (an operator action holding the request
/// lock). `Busy` if a worker holds one (e.g. a submit in flight).
pub async fn lock_nodes_nowait(conn: &mut PgConnection, request_id: Uuid) -> Result<Vec<crate::NodeBrief>> {
    let mut savepoint = conn.begin().await?;
    let res = sqlx::query!(
        "SELECT id FROM movement_request_nodes WHERE request_id = $1 ORDER BY id FOR UPDATE NOWAIT",
        request_id
    )
    .fetch_all(&mut *savepoint)
    .await;
    match res {
        Ok(_) => {
            savepoint.commit().await?;
            crate::context::request_nodes(conn, request_id).await
        }
        Err(e) if is_lock_not_available(&e) => {
            savepoint.rollback().await?;
            Err(crate::StoreError::Busy(format!("a node of movement {request_id} (a worker is on it)")))
        }
        Err(e) => Err(e.into()),
    }
}

/// The executor key of a node and whether its armed attempt's `submit_by` plus `skew_seconds`
/// has passed by the database's clock (no attempt armed: `false`).
pub async fn past_submit_by(conn: &mut PgConnection, node_id: Uuid, skew_seconds: f64) -> Result<(String, bool)> {
    let row = sqlx::query!(
        r#"SELECT p.executor_key,
                COALESCE(n.submit_by + make_interval(secs => $2::float8) < now(), false) AS "past!"
         FROM movement_request_nodes n JOIN plan_nodes p ON p.id = n.plan_node_id WHERE n.id = $1"#,
        node_id,
        skew_seconds
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((row.executor_key, row.past))
}

/// Holds node `node_id` back for `seconds` after a failure that was not its executor's (an
/// error while claiming it or recording its answer), with an event saying so: a READY or
/// leased node is not claimed again before then (`lease_expires_at` as "not before"), an
/// observed or recovered one is not due (`next_observe_at`). The worker goes on with the
/// next item. The event is written in the same statement.
pub async fn hold_back(
    conn: &mut PgConnection,
    node_id: Uuid,
    seconds: f64,
    event: &crate::events::Call,
    actor: &str,
) -> Result<bool> {
    let row = sqlx::query_scalar!(
        "WITH held AS (
             UPDATE movement_request_nodes
             SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, now()), now() + make_interval(secs => $2)),
                 next_observe_at = CASE WHEN node_state IN ('SUBMITTED', 'OBSERVING', 'SUBMITTING', 'UNKNOWN')
                     THEN GREATEST(COALESCE(next_observe_at, now()), now() + make_interval(secs => $2))
                     ELSE next_observe_at END
             WHERE id = $1
             RETURNING id, request_id, attempt_no)
         INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome,
             error_code, error_detail, duration_ms, actor)
         SELECT request_id, id, attempt_no, 'call', $3, $4, $5, left($6, 2000), $7, $8 FROM held
         RETURNING request_node_id",
        node_id,
        seconds,
        event.method,
        &event.outcome,
        event.error_code.as_deref(),
        event.error_detail.as_deref(),
        event.duration_ms,
        actor
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.is_some())
}
