"""Ingestion: pipeline and history, loaders (one module per format), structure-aware chunking, images."""
