-- Failed logins are now also counted per username (scope 'login-username', a ten-minute window), so
-- under a flood of random usernames the table holds many subjects; the pruning on each write
-- (`scope = ? AND at <= ?`) reads this index instead of every subject's rows.
CREATE INDEX auth_failures_expiry ON auth_failures (scope, at);
