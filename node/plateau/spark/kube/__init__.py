"""Spark on Kubernetes: ``plateau spark-conf``'s settings, sized to the cluster it sees."""
