-- Issue 36 (docs/benchmarks.md "History grown"): the rows a node step inserts — nodes, their
-- artifacts, audit rows, callbacks and their event ids — were keyed by random UUIDs (v4), so
-- every insert went to a random leaf page of indexes that grow by millions of entries, which
-- a buffer cache stops holding as history grows. A time-ordered UUID (version 7, RFC 9562:
-- 48 bits of Unix milliseconds, then random bits) puts new keys at the right edge of each
-- index, and so do the indexes keyed by a node's id (`node_events_node`, `artifacts_node`).
-- PostgreSQL 15 has no uuidv7() (18 does): this is one. Nonces and claim tokens stay
-- gen_random_uuid(): they must not be guessable. A movement's own id stays random too: people
-- quote a movement by the first characters of its id, which in a time-ordered id would be the
-- minute it was made in.
CREATE FUNCTION qtg_uuid7(at timestamptz DEFAULT clock_timestamp()) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- The v4's first 48 bits replaced by `at`'s Unix milliseconds (now, unless a caller keys a
    -- row by another time: `make bench` loads history that way), its version nibble 0100 made
    -- 0111 (bits 52 and 53 of the bytea, least significant first within each byte).
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM at) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
