"""Model files: Hugging Face hub loading, SHA-256 pinning and verification."""
