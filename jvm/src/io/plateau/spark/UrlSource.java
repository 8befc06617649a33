package io.plateau.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM half of a url-mode batch read: Spark reads a node's pages as Arrow columnar
 * batches, with column pruning, and no record crosses into a Python worker.
 *
 * <p>Why in the JVM: PySpark's Python data source gives a reader no required columns and
 * turns every batch it yields into rows of every declared column; that cost more CPU per
 * row than the node spent serving it. Here the node's Arrow buffers become Spark's column
 * vectors as they are ({@code ArrowColumnVector}).
 *
 * <p>Python plans the read ({@code plateau.spark.url_jvm}): it checks the options, asks
 * the node for the topic's spans and schema, and passes the schema and the task list here.
 * This source only executes that plan, so both halves agree on what a read means.
 */
public final class UrlSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "plateau-url";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    throw new IllegalArgumentException(
        "plateau-url is planned by plateau.spark.read_topic(spark, url=..., topic=...); "
            + "it takes its schema from there");
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> options) {
    return new UrlTable(schema, ReadSpec.parse(new CaseInsensitiveStringMap(options)));
  }
}
