#!/bin/sh
# Installs Debian's PostgreSQL 15 and Redis (7 on Debian 12) where they are missing (`make services`, as root).
# The tests start throwaway servers of their own (tests/postgres_server.py, tests/redis_server.py); the
# system-wide services the packages come with must not start: while apt-get runs, a policy-rc.d that
# refuses every start is in place (one already there is kept as it is), so postgresql-common's default
# cluster and redis-server's service are set up but left stopped.
set -eu
postgres=/usr/lib/postgresql/15/bin/postgres
missing=""
test -x "$postgres" || missing="$missing postgresql-15"
command -v redis-server >/dev/null 2>&1 || test -x /usr/bin/redis-server || missing="$missing redis-server"
test -n "$missing" || exit 0

policy=/usr/sbin/policy-rc.d
if ! test -e "$policy"; then
    printf '#!/bin/sh\n# Put here by pheby-server scripts/install-services.sh while it installs; removed after.\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
    trap 'exit 1' HUP INT TERM
fi
apt-get update
# shellcheck disable=SC2086  # one word per package
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
