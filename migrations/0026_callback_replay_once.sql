-- A dead letter is replayed at most once: a second replay of the same row would deliver the
-- event again for nothing (a replay that dead-letters in turn is replayed itself). Expand only.
CREATE UNIQUE INDEX IF NOT EXISTS callback_outbox_replay_once
    ON movement_callback_outbox (replay_of) WHERE replay_of IS NOT NULL;
