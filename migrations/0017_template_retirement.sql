-- Tightened limits bind every movement: a template version is retired when its successor is
-- approved (or by an admin, audited); a retired version takes no new movement or capital
-- transfer, and movements already created on it are checked against the strictest of their
-- version's and the current version's risk controls.
ALTER TABLE plan_versions ADD COLUMN retired_at timestamptz;
ALTER TABLE plan_versions ADD COLUMN retired_by text;
ALTER TABLE plan_versions ADD COLUMN retired_reason text;
