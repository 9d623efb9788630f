"""Files: what a file is (`file_types`), text extraction (`extraction`), `MEDIA:` tags in agent text
(`media_tags`) and reading a `MEDIA:` file from disk safely (`media_files`).

May import: `pheby.errors` and `storage` only; never `pheby.store`, `pheby.hermes`, `pheby.runs`,
`pheby.plugin` or `pheby.protocol.hub`.
"""
