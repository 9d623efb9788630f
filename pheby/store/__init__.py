"""The SQL stores, one module per domain: `accounts` (and tokens), `conversations`, `artifacts`,
`attachments` (metadata here, bytes in `storage`), the change feed (`changes`), `lockout` (failed
attempts, password hashing), `second_factor` (TOTP secrets, recovery codes, sign-in tickets and
the limits on their codes), `passkeys` (and their WebAuthn challenges), `reauthentication` (when a
session last proved who holds it), `task_owners` and upload `quotas`.

May import: the basics (`pheby.db`, `pheby.errors`, `pheby.settings`), `pheby.files`,
`pheby.protocol.frames` (wire shapes of stored things) and `storage`; never `pheby.protocol.hub`,
`pheby.hermes`, `pheby.runs`, `pheby.plugin` or `hermes_client`.
"""
