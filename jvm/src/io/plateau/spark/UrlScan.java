package io.plateau.spark;

import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One read: Python's tasks, each a list of index slices, as the query's filters left them
 * ({@link Narrowing}), read as columnar batches.
 */
final class UrlScan implements Scan, Batch {
  private final StructType readSchema;
  private final ReadSpec spec;
  private final List<Task> tasks;
  private final Filter[] narrowedBy;

  UrlScan(StructType readSchema, ReadSpec spec, List<Task> tasks, Filter[] narrowedBy) {
    this.readSchema = readSchema;
    this.spec = spec;
    this.tasks = tasks;
    this.narrowedBy = narrowedBy;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return "PlateauUrlScan topic="
        + spec.topic
        + " url="
        + spec.url
        + " "
        + Focus.of(spec, readSchema)
        + " tasks="
        + tasks.size()
        + (narrowedBy.length == 0 ? "" : " narrowedBy=" + Arrays.toString(narrowedBy));
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return tasks.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(spec, readSchema, Focus.of(spec, readSchema));
  }

  /** Serialized to the executors with the spec and the pruned schema. */
  private static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReadSpec spec;
    private final StructType schema;
    private final Focus focus;

    Factory(ReadSpec spec, StructType schema, Focus focus) {
      this.spec = spec;
      this.schema = schema;
      this.focus = focus;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<org.apache.spark.sql.catalyst.InternalRow> createReader(
        InputPartition partition) {
      throw new UnsupportedOperationException("plateau-url reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new PageReader(spec, schema, focus, (Task) partition);
    }
  }
}
