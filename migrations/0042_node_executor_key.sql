-- Issue 36 (docs/benchmarks.md, session 34): the dispatch listing walked every READY node in
-- creation order, reading past the ones it turns down. A backlog behind a pause (an executor
-- or a lane paused during an incident while approvals go on) or of an executor this
-- dispatcher does not serve was read by every listing of every dispatcher, for every other
-- executor's node it was looking for. The listing now walks the READY nodes of each served
-- executor and lane apart, and skips a paused one without reading its nodes (0043); for that,
-- a node carries the executor key of its plan node.
--
-- The key is set when the nodes are inserted (`movements::insert`). The trigger fills it for a
-- writer that does not set it — the previous release's workers while an upgrade rolls out. It
-- fires on INSERT only: a BEFORE UPDATE row trigger, even one whose WHEN is false, makes
-- PostgreSQL lock the row it updates first, a WAL record on every node write. The READY nodes
-- are filled here, under the table's lock (about 25 ms per thousand READY nodes). A node
-- without a key that becomes READY later (written before this migration, then made READY by
-- its predecessor or an operator's retry) is listed from `mrn_dispatch_keyless` (0044). A
-- plan node never changes, so neither does a node's key.
--
-- The column first: its ACCESS EXCLUSIVE lock is the strongest this migration takes, so it
-- never waits for a stronger one while holding a weaker (the workers keep writing nodes). While
-- it waits for the lock, every statement on the node table queues behind it: bounded, so a long
-- transaction on the table fails the migration (run it again) instead of stalling the workers.
SET LOCAL lock_timeout = '10s';
ALTER TABLE movement_request_nodes ADD COLUMN executor_key text;

CREATE FUNCTION qtg_node_executor_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.executor_key := (SELECT p.executor_key FROM plan_nodes p WHERE p.id = NEW.plan_node_id);
    RETURN NEW;
END
$$;

CREATE TRIGGER mrn_executor_key BEFORE INSERT ON movement_request_nodes
    FOR EACH ROW WHEN (NEW.executor_key IS NULL) EXECUTE FUNCTION qtg_node_executor_key();

UPDATE movement_request_nodes n SET executor_key = p.executor_key
FROM plan_nodes p
WHERE p.id = n.plan_node_id AND n.executor_key IS NULL AND n.node_state = 'READY';
