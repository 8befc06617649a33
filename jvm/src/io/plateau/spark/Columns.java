package io.plateau.spark;

import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A page's Arrow vectors as a Spark batch of the read's columns.
 *
 * <p>Columns pass through as they are ({@code ArrowColumnVector}, no copy) when their Arrow
 * type is the one Spark reads for the declared type; the few Spark cannot read as they are
 * convert as Spark reads them ({@link Converted}). {@code _partition} is one
 * constant, {@code _index} the page's first index plus the row's position, and a declared
 * column a page lacks (added to the topic later) is null. Any other difference means the
 * column's type changed within a partition where Python's plan did not look, and fails
 * with the column, the partition and the index.
 */
final class Columns implements AutoCloseable {
  static final String PARTITION = "_partition";
  static final String INDEX = "_index";

  private final StructType schema;
  private final String topic;
  private final OnHeapColumnVector index;
  /** Per output column, for the current page: how it is made. */
  private final Kind[] kinds;

  private enum Kind {
    PARTITION,
    INDEX,
    ARROW,
    CONVERT,
    NULL
  }

  Columns(StructType schema, String topic, int capacity) {
    this.schema = schema;
    this.topic = topic;
    this.kinds = new Kind[schema.size()];
    this.index = new OnHeapColumnVector(capacity, DataTypes.LongType);
  }

  /** Checks a page's columns against the declared ones; call before {@link #batch}. */
  void page(VectorSchemaRoot root, String partition, long firstIndex) {
    StructField[] fields = schema.fields();
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      if (name.equals(PARTITION)) {
        kinds[i] = Kind.PARTITION;
      } else if (name.equals(INDEX)) {
        kinds[i] = Kind.INDEX;
      } else {
        FieldVector v = root.getVector(name);
        kinds[i] = v == null ? Kind.NULL : kind(v, fields[i].dataType(), partition, firstIndex);
      }
    }
  }

  ColumnarBatch batch(VectorSchemaRoot root, String partition, long first, int rows) {
    StructField[] fields = schema.fields();
    ColumnVector[] columns = new ColumnVector[fields.length];
    for (int i = 0; i < fields.length; i++) {
      DataType type = fields[i].dataType();
      switch (kinds[i]) {
        case PARTITION -> {
          ConstantColumnVector c = new ConstantColumnVector(rows, type);
          c.setUtf8String(UTF8String.fromString(partition));
          columns[i] = c;
        }
        case INDEX -> {
          index.reset();
          index.reserve(rows);
          for (int r = 0; r < rows; r++) {
            index.putLong(r, first + r);
          }
          columns[i] = index;
        }
        case ARROW -> columns[i] = new ArrowColumnVector(root.getVector(fields[i].name()));
        case CONVERT -> columns[i] = Converted.of(root.getVector(fields[i].name()), type);
        case NULL -> {
          ConstantColumnVector c = new ConstantColumnVector(rows, type);
          c.setNull();
          columns[i] = c;
        }
      }
    }
    return new ColumnarBatch(columns, rows);
  }

  private Kind kind(FieldVector v, DataType declared, String partition, long firstIndex) {
    if (v instanceof TimeStampMicroTZVector && declared instanceof TimestampType
        || v instanceof TimeStampMicroVector && declared instanceof TimestampNTZType) {
      return Kind.ARROW;
    }
    if (Converted.converts(v, declared)) {
      return Kind.CONVERT;
    }
    DataType held = null;
    try {
      held = ArrowUtils.fromArrowField(v.getField());
    } catch (RuntimeException e) {
      // a type Spark cannot read from Arrow: reported below
    }
    if (held != null && DataType.equalsIgnoreNullability(held, declared)) {
      return Kind.ARROW;
    }
    throw new IllegalStateException(
        "plateau-url: topic '"
            + topic
            + "' partition '"
            + partition
            + "': column '"
            + v.getName()
            + "' holds "
            + v.getField().getType()
            + " from index "
            + firstIndex
            + ", not the "
            + declared.simpleString()
            + " the read declared (its type changed within the partition); read this "
            + "range with spark.read.format('plateau'), which converts types");
  }

  @Override
  public void close() {
    index.close();
  }
}
