-- The fee cap an approval-policy rule puts on a movement (its asset's units): merged into the
-- execution context's risk_controls.max_fee, the stricter winning. Expand only.
ALTER TABLE movement_requests ADD COLUMN IF NOT EXISTS policy_max_fee text;
