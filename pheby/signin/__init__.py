"""The ways in: each sign-in method is a module of this package, and every one ends in a session
(`pheby.signin.sessions.start_session`): an expiring, revocable, listed token that a browser holds only
as an HttpOnly cookie.

May import: everything of the domain (it belongs to the top, beside `pheby.auth` and `pheby.services`).
"""
