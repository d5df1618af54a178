-- balance_history_rollup (issue 35): hourly and daily rollups of balance_snapshots per venue,
-- account and asset — first, last, min and max of free and locked, and how many snapshots —
-- kept longer than the snapshots. Hours roll from the snapshots, days from the hours, each
-- bucket once it is closed. A bucket is written once (its key is unique) and the progress row
-- of its granularity is advanced in the same transaction, under that row's lock: one replica
-- rolls a granularity at a time, and a bucket is never rolled from half its snapshots.
CREATE TABLE balance_history (
    granularity  text NOT NULL CHECK (granularity IN ('hour', 'day')),
    venue_key    text NOT NULL,
    account      text NOT NULL,
    asset        text NOT NULL,
    bucket_start timestamptz NOT NULL,
    free_first   numeric NOT NULL,
    free_last    numeric NOT NULL,
    free_min     numeric NOT NULL,
    free_max     numeric NOT NULL,
    locked_first numeric NOT NULL,
    locked_last  numeric NOT NULL,
    locked_min   numeric NOT NULL,
    locked_max   numeric NOT NULL,
    samples      bigint NOT NULL CHECK (samples > 0),
    first_at     timestamptz NOT NULL,
    last_at      timestamptz NOT NULL,
    rolled_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (granularity, venue_key, asset, account, bucket_start)
);
CREATE INDEX balance_history_retention ON balance_history (granularity, bucket_start);

-- Up to where each granularity is rolled (exclusive); NULL: nothing yet.
CREATE TABLE balance_rollup_progress (
    granularity  text PRIMARY KEY CHECK (granularity IN ('hour', 'day')),
    rolled_until timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO balance_rollup_progress (granularity) VALUES ('hour'), ('day');
