"""``read_topic`` with ``url``: where the JVM url reader's jar is (for ``spark.jars``).

A module of its own so that ``url_jvm`` finds the jar without importing the
package (``plateau.spark`` imports ``url_jvm``): no import cycle.
"""

from __future__ import annotations

from pathlib import Path

# plateau's Spark jar (jvm/), built by tools/build-spark-jar: not in git, in the wheel
JAR = Path(__file__).with_name("jars") / "plateau-spark.jar"


def jar_path() -> Path:
    """plateau's Spark jar: put it on ``spark.jars`` for ``read_topic(url=...)`` (the Spark
    image has it on the classpath)."""
    if not JAR.is_file():
        raise FileNotFoundError(
            f"plateau's Spark jar is not built: {JAR} (tools/build-spark-jar builds it)"
        )
    return JAR
