-- PostgreSQL: 0003_task_owners.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Which account created each Hermes job through the server, so a cron run's output goes to it.
CREATE TABLE task_owners (
    hermes_url TEXT NOT NULL,
    job_id TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (hermes_url, job_id)
);

-- When the job poller first looked at a Hermes: older cron sessions are history, not news.
CREATE TABLE cron_baselines (
    hermes_url TEXT PRIMARY KEY,
    since DOUBLE PRECISION NOT NULL
);
