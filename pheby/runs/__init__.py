"""The run engine: one active run per conversation, from `chat.send` to `run.finished`.

Hermes 0.19.0 allows a single consumer per run stream and no resume, so the server holds it and fans the
events out through the hub; a 0.22-era stream is resumed where it broke. Runs outlive the server process: a
graceful stop hands them over, and the next process (or the one after a crash) carries them on.
Modules, one concept each:

- `engine`: `RunManager`, the wiring (send, cancel, reading, snapshots, hand-over at shutdown);
- `active`: `ActiveRun`, one run's live state, enough to rebuild a client's view after a reconnect;
- `phase`: the explicit phase of a run and the one table of allowed transitions;
- `decisions`: the shared lifecycle of approvals and clarifications;
- `decision_desk`: the runs' questions asked of the clients, and their answers taken to Hermes;
- `unseen`: what Hermes's status says of a run whose stream nobody reads (an approval nobody saw);
- `journal`: what a new process needs to carry the runs on (SQLite), written before clients hear of it;
- `leases`: each run's one owner, fenced by an epoch, and how another process takes a run over;
- `reattach`: carrying a run on from the journal: at start-up, every run a stopped process left;
- `keeper`: renewing this process's leases, letting go of runs taken over, taking over runs left;
- `forwarding`: a client's commands for a run another process owns, and how they get there (`RunOwners`);
- `commands`: carrying out here such a command for a run this process owns;
- `snapshots_elsewhere`: the run part of a snapshot, asked of the process that owns the run;
- `translate`: Hermes events → Pheby events and effects, a pure state machine;
- `plugin_inputs`: the companion plugin's pushes, as inputs of their own;
- `plugin_runs`: the runs those pushes name by Hermes's run id, and what each push does to its run;
- `reader`: the stream's health, its resumption (numbered events), and how a lost stream's run is
  followed to its end by asking Hermes;
- `media`: a completed run's `MEDIA:` files, pushed by the plugin or copied from disk;
- `turn_log`: what history keeps of each turn, and the re-anchoring of its files;
- `settled`: finished turns kept until the stored transcript holds them, for snapshots;
- `tool_merge`: one run's tool calls from the run stream and the plugin's pushes, merged;
- `cron_delivery`: a cron run's output filed as an unsolicited turn of its task's conversation.

May import: `hermes_client`, the basics, `pheby.redact`, `pheby.protocol`, `pheby.files`,
`pheby.store`, `pheby.hermes` and the plugin's extras (`pheby.plugin.extras`); never the rest of
`pheby.plugin` (which sits above the engine).
"""

from pheby.runs.active import ActiveRun, AssistantTurn
from pheby.runs.decision_desk import session_key
from pheby.runs.engine import RUN_INSTRUCTIONS, RunManager, RunPlugin, hermes_session_id

__all__ = [
    "RUN_INSTRUCTIONS",
    "ActiveRun",
    "AssistantTurn",
    "RunManager",
    "RunPlugin",
    "hermes_session_id",
    "session_key",
]
