"""The MCP surface: server (the builder), builtin (the knowledge tools), calls, middleware, transport (the SDK
importers), hub, tool models, HTTP security, result cache, latency harness."""
