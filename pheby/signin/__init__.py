"""The ways in and the credentials behind them, a module each: every sign-in ends in a session
(`sessions.start_session`), an expiring, revocable, listed token that a browser holds only as an
HttpOnly cookie. `password_change`, `totp` and `totp_setup` (the second factor), `passkeys` with its
`relying_party` and the `recent` authentication adding one asks for, and `oidc` with `oidc_browser`.

May import: the whole domain (it sits at pheby's top, beside `pheby.auth` and `pheby.services`, whose
services it uses); never `handlers`.
"""
