"""5. Commit: the commit pipeline and the checkpoint formats and topic."""
