"""Test support shared by tests/, bench/ and tools/: real processes (the node, the
operator, etcd and kube-apiserver), memory cgroups, Arrow-over-HTTP helpers and the
stress harness. Never shipped in the wheel."""
