-- Numbers from outside are numbers: a balance snapshot holds finite non-negative decimals.
-- The balance worker refuses anything else before it gets here (the venue's whole answer is
-- not stored); this is the database's own guard. NOT VALID: rows written before it are left
-- as they are (they age out with the retention) and new rows are checked.
ALTER TABLE balance_snapshots ADD CONSTRAINT balance_snapshots_finite CHECK (
    free >= 0 AND free <> 'NaN'::numeric AND free <> 'Infinity'::numeric
    AND (locked IS NULL OR (locked >= 0 AND locked <> 'NaN'::numeric AND locked <> 'Infinity'::numeric))
) NOT VALID;
