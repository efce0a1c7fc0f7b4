"""verl <-> MCP bridge: a native verl tool that forwards calls to the MCP tool server through
the shared client layer (`serving.mcp_client`), and the generator of verl's tool-config YAML.
Importing this package does not import verl; `training.verl_bridge.tool` does."""
