"""Error messages for an agent: they name the item and a fix the agent can take, never a filesystem path of
the server or a CLI command it cannot run.

The Hub raises agent-ready messages for what the agent asked for (a document, a chunk, a collection, an
ingest path). Errors from deeper in the library are written for an operator (they name the index folder and
the ``zhiku`` command to run); for those the agent gets the message of their code below, and the server log
keeps the original.
"""

from __future__ import annotations

import logging

from zhiku.errors import ZhikuError

log = logging.getLogger("zhiku.mcp.server")

TELL_USER = "tell the user; the server log has the details"
BY_CODE = {
    "INDEX_MISMATCH": "this knowledge base was built with other models or settings and must be rebuilt by "
    "whoever runs the server; " + TELL_USER,
    "INDEX_LOCKED": "the knowledge base is busy with another write; retry in a few seconds",
    "INDEX_READ_ONLY": "this knowledge base is read-only: it cannot be changed through this server",
    "INDEX_NOT_FOUND": "this server has no knowledge base to read yet; " + TELL_USER,
    "STORE_ERROR": "the knowledge base could not be read or written; " + TELL_USER,
    "EMBEDDING_FAILED": "the embedding model failed on this request; retry once, then " + TELL_USER,
    "MISSING_DEPENDENCY": "a component this request needs is not installed on the server; " + TELL_USER,
    "INVALID_CONFIG": "the server's settings do not allow this request; " + TELL_USER,
    "MODEL_INTEGRITY": "a model file of the server failed its integrity check; " + TELL_USER,
    "INGEST_FAILED": "the documents could not be ingested; " + TELL_USER,
}
# Codes whose messages the MCP layer writes for the agent (hub.py, ingest_roots.py, search input checks).
AGENT_READY = {"INVALID_INPUT", "NOT_FOUND", "PATH_NOT_ALLOWED"}


def agent_message(e: ZhikuError) -> str:
    """What the agent reads for ``e``; an operator message is logged and replaced by its code's message."""
    if e.code in AGENT_READY:
        return str(e)
    log.warning("%s: %s", e.code, e)
    return BY_CODE.get(e.code, "the request failed on the server; " + TELL_USER)
