"""Web Push: the agent reaches the person when no client of theirs is in front of them.

Standard Web Push (RFC 8030) with message encryption (RFC 8291) and VAPID (RFC 8292): every
browser's push service and the UnifiedPush distributors take it, with no vendor account. Modules,
one concept each:

- `vapid`: the server's VAPID key and the `Authorization` it signs;
- `subscriptions`: each account's subscriptions (the browser's `PushSubscription` shape), checked and kept;
- `endpoints`: push endpoints as untrusted URLs: https, public addresses only, checked again at each send;
- `notices`: when to push and what a push says (events in, notices out; no I/O);
- `tokens`: the single-use answer tokens of a notification's actions;
- `sender`: one encrypted, signed request to a push service, and what its answer means;
- `delivery`: the bounded queue off the run's path, retries and backoff;
- `service`: `Push`, the whole wired together.

May import: the basics, `pheby.protocol`, `pheby.store`, `pheby.runs` (a notification's answer takes
the same path as `approval.respond`) and its own modules.
"""
