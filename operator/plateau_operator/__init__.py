"""The plateau Kubernetes operator (kopf)."""
