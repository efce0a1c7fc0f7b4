"""The one MCP client layer: every part that reaches tools (the verl bridge, the CPU
backend, the evaluation's agent loop, the front door) goes through it.

- `base`: errors, the call result and the `McpClient` interface both transports implement.
- `http`: the lean pooled streamable-HTTP client (the project's own server, remote servers).
- `stdio`: a supervised subprocess speaking newline-delimited JSON-RPC (most MCP servers).
- `schemas`: validation of every tool definition a server hands us.
- `sources`: the typed config of tool sources (which servers, how to reach them).
- `catalog`: the union of the sources' tools, with prefixes, clash checks and call routing.

Importing this package imports nothing heavy; each module imports only what it uses.
"""
