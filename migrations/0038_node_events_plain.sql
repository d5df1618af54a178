-- Issue 36 (docs/benchmarks.md, session 30): the node write's events. Every hop wrote its
-- events by one INSERT … SELECT over a UNION ALL of the calls (`unnest … WITH ORDINALITY`)
-- and the transition, sorted — set up on every call inside the function, though
-- most hops have no calls. A hop without calls now writes its one transition event by a plain
-- VALUES; a hop with calls keeps the ordered INSERT (calls first, then the transition). Same
-- rows, same order, same signature (the 22-argument wrapper of 0037 calls this one).

CREATE OR REPLACE FUNCTION qtg_node_written(
    node uuid, movement uuid, node_key text, from_state text, to_state text, attempt integer,
    provider_state text, error_code text, error_detail text,
    is_transition boolean, begin_attempt boolean, actor text, reason text,
    call_methods text[], call_outcomes text[], call_codes text[], call_details text[], call_ms int4[],
    calls_attempt integer, new_artifacts jsonb, channel text, traceparent text,
    via_state text, event_type text, event_data jsonb, frontier jsonb, event_traceparent text)
RETURNS text  -- a begun attempt's prepared-action hash as stored, else NULL
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    cb record;
    event uuid;
    hash text;
    hops text[] := CASE WHEN via_state IS NULL THEN ARRAY[from_state, to_state]
                        ELSE ARRAY[from_state, via_state, to_state] END;
    hop_from text;
    hop_to text;
    last_hop boolean;
    -- The callbacks: only a transition of a movement with a callback URL (set at creation,
    -- never changed) takes the next numbers of its sequence.
    with_callback boolean := is_transition AND EXISTS (
        SELECT 1 FROM movement_requests r WHERE r.id = movement AND r.callback_url IS NOT NULL);
BEGIN
    FOR i IN 1 .. cardinality(hops) - 1 LOOP
        hop_from := hops[i];
        hop_to := hops[i + 1];
        last_hop := i = cardinality(hops) - 1;
        IF with_callback THEN
            UPDATE movement_requests r SET callback_sequence = r.callback_sequence + 1
            WHERE r.id = movement AND r.callback_url IS NOT NULL
            RETURNING r.callback_sequence, r.callback_url, r.request_state INTO cb;
            IF FOUND THEN
                event := qtg_uuid7();
                INSERT INTO movement_callback_outbox
                    (id, request_id, event_id, event_type, sequence, payload, callback_url,
                     callback_timestamp, callback_nonce, traceparent)
                VALUES (qtg_uuid7(), movement, event, 'node_state_changed', cb.callback_sequence,
                    qtg_callback_envelope(event, 'node_state_changed', movement,
                        jsonb_build_object('sequence', cb.callback_sequence, 'request_state', cb.request_state,
                            'node_key', node_key, 'node_state', hop_to),
                        jsonb_build_object('from', hop_from, 'to', hop_to,
                            'attempt_no', attempt, 'provider_state', provider_state,
                            'error_code', error_code)),
                    cb.callback_url, extract(epoch FROM now())::bigint, gen_random_uuid()::text,
                    CASE WHEN i = 1 AND via_state IS NOT NULL AND event_type IS NOT NULL
                         THEN event_traceparent ELSE traceparent END);
                PERFORM pg_notify('qtg_callback', '');
            END IF;
        END IF;

        IF is_transition THEN
            INSERT INTO audit_outbox (event_id, actor, action, entity_type, entity_id, movement_id, data)
            VALUES (qtg_uuid7(), actor, 'node.transition', 'node', node::text, movement,
                jsonb_build_object('node_key', node_key, 'from', hop_from, 'to', hop_to,
                    'attempt_no', attempt, 'error_code', error_code, 'reason', reason));
        END IF;

        -- The calls (with the last hop) first, then the transition: one INSERT, so ids follow
        -- this order. A hop without calls — most of them — writes its one event by a plain
        -- VALUES, which sets up no union, function scan or sort.
        IF last_hop AND cardinality(call_methods) > 0 THEN
            INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, method, outcome,
                from_state, to_state, error_code, error_detail, duration_ms, actor)
            SELECT movement, node, ev.attempt_no, ev.kind, ev.method, ev.outcome, ev.from_state,
                ev.to_state, ev.error_code, left(ev.error_detail, 2000), ev.duration_ms, actor
            FROM (
                SELECT c.i AS ord, COALESCE(calls_attempt, attempt) AS attempt_no, 'call' AS kind,
                    c.m AS method, c.o AS outcome, NULL::text AS from_state, NULL::text AS to_state,
                    c.cd AS error_code, c.d AS error_detail, c.ms AS duration_ms
                FROM unnest(call_methods, call_outcomes, call_codes, call_details, call_ms)
                    WITH ORDINALITY AS c(m, o, cd, d, ms, i)
                UNION ALL
                SELECT 2147483647, attempt, 'transition', NULL, NULL, hop_from, hop_to,
                    error_code, error_detail, NULL
                WHERE is_transition
            ) ev
            ORDER BY ev.ord;
        ELSIF is_transition THEN
            INSERT INTO node_events (request_id, request_node_id, attempt_no, kind, from_state, to_state,
                error_code, error_detail, actor)
            VALUES (movement, node, attempt, 'transition', hop_from, hop_to, error_code,
                left(error_detail, 2000), actor);
        END IF;

        -- The movement event written with the node (a completion's `frontier_advanced`, with
        -- the activation): after the first hop, before a claim's.
        IF i = 1 AND event_type IS NOT NULL THEN
            PERFORM qtg_movement_event(movement, event_type, event_data, frontier, event_traceparent);
        END IF;
    END LOOP;

    IF jsonb_array_length(new_artifacts) > 0 THEN
        WITH art AS (
            INSERT INTO artifacts (id, request_id, request_node_id, attempt_no, kind, payload, payload_hash)
            SELECT qtg_uuid7(), movement, node, COALESCE(calls_attempt, attempt), a->>'kind', a->'payload',
                a->>'payload_hash'
            FROM jsonb_array_elements(new_artifacts) AS a
            RETURNING kind, payload_hash)
        SELECT art.payload_hash INTO hash FROM art WHERE art.kind = 'prepared_action' LIMIT 1;
    END IF;

    -- The node's worker channel.
    IF channel IS NOT NULL THEN
        PERFORM pg_notify(channel, '');
    END IF;

    -- An attempt begun: the hash of its prepared action as stored (written just now — as the
    -- table's triggers left it — or when it was prepared before signing), which the submit
    -- must carry.
    IF NOT begin_attempt THEN
        RETURN NULL;
    END IF;
    IF hash IS NULL THEN
        hash := (SELECT a.payload_hash FROM artifacts a
                 WHERE a.request_node_id = node AND a.attempt_no = attempt AND a.kind = 'prepared_action'
                 ORDER BY a.created_at DESC, a.id DESC LIMIT 1);
    END IF;
    RETURN hash;
END
$$;

