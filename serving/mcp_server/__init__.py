"""The MCP tool server: the tool catalog over MCP streamable HTTP, in real and mock modes.

Import-light on purpose: `serving.mcp_server.config` is all a client needs; the server
itself (`server.start`, `server.run`) pulls in uvicorn and the MCP SDK.
"""
