-- One envelope for every callback qtg writes (issue 29): the four statements that enqueue a
-- callback build its payload with this function instead of four copies of the same
-- jsonb_build_object, which had drifted. `extra` carries what a kind of event adds at the top
-- level (sequence, request_state, node_key, node_state); `movement_id` is left out when null
-- (an alert about no movement). STABLE: it reads now(), the statement's time.
CREATE OR REPLACE FUNCTION qtg_callback_envelope(
    event_id uuid, event_type text, movement_id uuid, extra jsonb, data jsonb
) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
               'event_id', event_id, 'event_type', event_type,
               'occurred_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', data)
        || CASE WHEN movement_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('movement_id', movement_id) END
        || COALESCE(extra, '{}'::jsonb)
$$;
