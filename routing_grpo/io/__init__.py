"""Files and folders: JSONL, locks, atomic writes, checkpoints, paths, model folders and one-line errors."""
