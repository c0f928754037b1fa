"""Optional ingest transforms between chunking and embedding (see docs/transforms.md)."""
