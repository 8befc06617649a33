"""How this project's Kubernetes control plane is laid out and started, in one place.

tools/cluster (the whole single-node cluster) and testkit.kubeapi (etcd and
kube-apiserver alone, for integration tests) both take from here the
certificates (``pki``), etcd's and kube-apiserver's command lines (``flags``)
and the configuration files (``configs``, ``objects``), so that a test's API
server is started as the cluster's is. tools/cluster calls it through
``python -m testkit.controlplane`` (``__main__``).
"""
