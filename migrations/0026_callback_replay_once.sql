-- A dead letter is replayed at most once (a second replay would deliver the event again for
-- nothing; a replay that dead-letters in turn is replayed itself). The replay locks the dead
-- letter's row and inserts only when no replay of it exists (libs/store callbacks::replay);
-- this index serves that check, the open-DLQ list and the attention count. Not unique: a
-- deployment that replayed a row twice before this rule must still migrate. Expand only.
CREATE INDEX IF NOT EXISTS callback_outbox_replay_of
    ON movement_callback_outbox (replay_of) WHERE replay_of IS NOT NULL;
