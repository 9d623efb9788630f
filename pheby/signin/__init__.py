"""The ways in: each sign-in method is a module of this package, and every one ends in a session
(`pheby.signin.sessions.start_session`): an expiring, revocable, listed token that a browser holds only
as an HttpOnly cookie.

May import: the whole domain (it sits at pheby's top, beside `pheby.auth` and `pheby.services`, whose
services it uses); never `handlers`.
"""
