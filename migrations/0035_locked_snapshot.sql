-- Derivation reads a movement's nodes under the movement's row lock (libs/store/src/context.rs
-- `request_snapshot_for_update`). A statement that waited for that lock reads the other rows
-- as its snapshot, taken before the wait, shows them: a parallel branch that completed and
-- committed while this one waited would still read as running, and neither branch would see
-- both done (a fan-in never activated, a movement never derived). So the lock and the read
-- are two statements — here in one function, one round trip: a VOLATILE function takes a new
-- snapshot for each statement it runs (READ COMMITTED), the read's after the lock is held.
CREATE FUNCTION qtg_locked_snapshot(movement uuid)
RETURNS TABLE (request_state text, id uuid, node_key text, node_kind text, node_state text,
               provider_refs jsonb, error_code text, submit_accepted boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM movement_requests r WHERE r.id = movement FOR UPDATE;
    RETURN QUERY
        SELECT r.request_state, n.id, n.node_key, n.node_kind, n.node_state, n.provider_refs, n.error_code,
               n.submit_accepted_at IS NOT NULL
        FROM movement_requests r JOIN movement_request_nodes n ON n.request_id = r.id
        WHERE r.id = movement ORDER BY n.node_key;
END
$$;
