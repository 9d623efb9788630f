-- PostgreSQL: 0023_run_leases.sql with PostgreSQL's types.
-- Each run under way has one owner, the process reading it (`pheby.runs.leases`): who (`owner`: host,
-- pid and random parts), its `epoch` (one more at each takeover; the owner's writes name it, so a paused
-- ex-owner's are refused), and until when the owner holds it unless renewed (`lease_expires_at`).
-- Rows from before owners: no owner, an epoch of 0, expired, so the next process takes them over.
ALTER TABLE active_runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE active_runs ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE active_runs ADD COLUMN lease_expires_at DOUBLE PRECISION NOT NULL DEFAULT 0;
CREATE INDEX active_runs_owner ON active_runs (owner);
