"""Passwords for tests: one the policy accepts, and a cheap hashing cost for tests not about hashing.

`FAST_COST` is given to an `Accounts` a test builds itself to make its accounts, and to the servers in the
test process (`tests/conftest.py`, unless a test is marked `real_password_cost`); a server in a process
of its own (`pheby serve`) always hashes at the real cost, and no setting lowers it.
"""

from pheby.db import Database
from pheby.store.accounts import Accounts
from pheby.store.password_hashing import ScryptCost

PASSWORD = "tangerine-orbit-47-quiet"
OTHER_PASSWORD = "lantern-quarry-93-velvet"
FAST_COST = ScryptCost(n=2**10, r=8, p=1)  # 1 MiB, about a millisecond


def fast_accounts(db: Database) -> Accounts:
    """The accounts of `db`, making password hashes at `FAST_COST`."""
    return Accounts(db, password_cost=FAST_COST)
