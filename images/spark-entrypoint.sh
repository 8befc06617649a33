#!/bin/bash
# The Spark job image's entrypoint, serving Spark on Kubernetes as Apache Spark's
# own image does (resource-managers/kubernetes/docker/.../entrypoint.sh):
#   driver ARGS...    spark-submit in client mode inside the driver pod
#   executor          the executor backend, configured by SPARK_* variables
#   anything else     run as given (spark-submit, python3, bash...)
set -euo pipefail

SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
case "${1:-}" in
    driver)
        shift
        exec "$SPARK_HOME/bin/spark-submit" \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        # SPARK_JAVA_OPT_0, _1, ... in order: the executor's JVM options from the driver
        mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
        exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
            -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
            -cp "${SPARK_CLASSPATH}:${SPARK_DIST_CLASSPATH:-}" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "${SPARK_DRIVER_URL}" \
            --executor-id "${SPARK_EXECUTOR_ID}" \
            --cores "${SPARK_EXECUTOR_CORES}" \
            --app-id "${SPARK_APPLICATION_ID}" \
            --hostname "${SPARK_EXECUTOR_POD_IP}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
            --podName "${SPARK_EXECUTOR_POD_NAME}"
        ;;
    "")
        exec "$SPARK_HOME/bin/spark-submit" --help
        ;;
    *)
        exec "$@"
        ;;
esac
