"""Query side: search pipeline, fusion, rerank, answers with citations."""
