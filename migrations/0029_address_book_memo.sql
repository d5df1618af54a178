-- A book entry is matched on its lane, network, address and memo (docs/architecture.md §15):
-- the same address with another memo (an exchange's deposit tag) is someone else. Expand
-- only: an entry without a memo has ''.
ALTER TABLE address_book ADD COLUMN IF NOT EXISTS memo text NOT NULL DEFAULT ''
    CHECK (length(memo) <= 200);
DROP INDEX IF EXISTS address_book_active_address;
CREATE UNIQUE INDEX IF NOT EXISTS address_book_active_payee
    ON address_book (lane, network, lower(address), memo) WHERE status = 'active';
