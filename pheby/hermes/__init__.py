"""The server's use of Hermes: one client per distinct gateway (`pool`), what each gateway offers
(`features`), a conversation's transcript (`history`) and its pages served from the server's log
(`history_pages`), memory files (`memory`), scheduled tasks
(`tasks`), model and effort selection (`model_choice`) and what a client may offer (`capabilities`).

May import: `hermes_client`, the basics, `pheby.redact`, `pheby.store`, `pheby.files`,
`pheby.protocol.frames` and the declaration of the plugin's extras (`pheby.plugin.extras`); never
`pheby.runs`, the rest of `pheby.plugin` or `pheby.protocol.hub`.
"""
