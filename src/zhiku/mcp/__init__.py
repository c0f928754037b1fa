"""The MCP surface: server (the only MCP SDK importer), hub, tool models, HTTP security, result cache, latency harness."""
