"""State: per-task LMDB stores, changelogged to Kafka, restored on start."""
