"""The node's bookkeeping: which topics and segments exist, what may be deleted, who owns
what, and the locks, memory budget and progress that keep the engine honest."""
