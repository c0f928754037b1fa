"""The MCP surface: the server builder, the knowledge tools, their models and texts, transports and HTTP security."""
