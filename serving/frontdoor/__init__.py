"""The OpenAI-compatible front door: a chat request runs the agent loop against the served
model and the real MCP tools, and the final answer comes back as the assistant message."""
