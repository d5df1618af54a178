-- The DLQ-size signal counts dead letters on every scrape.
CREATE INDEX callback_outbox_dlq ON movement_callback_outbox (created_at) WHERE status = 'dlq';
