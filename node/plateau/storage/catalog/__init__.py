"""The node's bookkeeping: which segments exist (the manifest), who owns a topic,
and the locks, memory budget and progress that keep the engine honest."""
