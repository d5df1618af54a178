-- Heartbeats are written on their own period (MG_HEARTBEAT_INTERVAL_SECONDS), not by a
-- worker's loop: a long interval is not a dead process. The row also says when the worker's
-- loop last ticked and when it is next due (as of the last beat), by the database's clock.
ALTER TABLE worker_heartbeats ADD COLUMN last_tick_at timestamptz;
ALTER TABLE worker_heartbeats ADD COLUMN next_tick_at timestamptz;
