package io.plateau.spark;

import java.math.BigInteger;
import org.apache.arrow.vector.DateMilliVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.FixedSizeBinaryVector;
import org.apache.arrow.vector.Float2Vector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.UInt1Vector;
import org.apache.arrow.vector.UInt2Vector;
import org.apache.arrow.vector.UInt4Vector;
import org.apache.arrow.vector.UInt8Vector;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A top-level Arrow column Spark cannot read as it is, read as the type Python declared
 * for it ({@code plateau.spark.merge.spark_type}): timestamps of another unit than
 * microseconds, unsigned integers (widened), half floats, millisecond dates and
 * fixed-size binaries. Values convert as Spark asks for them: no copy of the column.
 */
final class Converted extends ColumnVector {
  private final FieldVector vector;
  private final long perMicro; // timestamps: the unit's ticks per microsecond (or -micros per tick)

  private Converted(FieldVector vector, DataType type) {
    super(type);
    this.vector = vector;
    if (vector instanceof TimeStampVector) {
      ArrowType.Timestamp t = (ArrowType.Timestamp) vector.getField().getType();
      this.perMicro =
          switch (t.getUnit()) {
            case SECOND -> -1_000_000L;
            case MILLISECOND -> -1_000L;
            case MICROSECOND -> 1L;
            case NANOSECOND -> 1_000L;
          };
    } else {
      this.perMicro = 1L;
    }
  }

  /** The column as {@code declared}, or null when this class does not convert it. */
  static ColumnVector of(FieldVector v, DataType declared) {
    return converts(v, declared) ? new Converted(v, declared) : null;
  }

  /** Whether this class reads {@code v} as {@code declared}. */
  static boolean converts(FieldVector v, DataType declared) {
    return (v instanceof TimeStampVector
            && (declared instanceof TimestampType || declared instanceof TimestampNTZType))
        || (v instanceof UInt1Vector && declared.equals(DataTypes.ShortType))
        || (v instanceof UInt2Vector && declared.equals(DataTypes.IntegerType))
        || (v instanceof UInt4Vector && declared.equals(DataTypes.LongType))
        || (v instanceof UInt8Vector && declared.equals(DataTypes.createDecimalType(20, 0)))
        || (v instanceof Float2Vector && declared.equals(DataTypes.FloatType))
        || (v instanceof DateMilliVector && declared.equals(DataTypes.DateType))
        || (v instanceof FixedSizeBinaryVector && declared.equals(DataTypes.BinaryType));
  }

  @Override
  public void close() {
    // the Arrow vector belongs to the page's reader, which closes it
  }

  @Override
  public boolean hasNull() {
    return vector.getNullCount() > 0;
  }

  @Override
  public int numNulls() {
    return vector.getNullCount();
  }

  @Override
  public boolean isNullAt(int rowId) {
    return vector.isNull(rowId);
  }

  @Override
  public short getShort(int rowId) {
    return (short) Byte.toUnsignedInt(((UInt1Vector) vector).get(rowId));
  }

  @Override
  public int getInt(int rowId) {
    if (vector instanceof DateMilliVector d) {
      return (int) Math.floorDiv(d.get(rowId), 86_400_000L);
    }
    return Short.toUnsignedInt((short) ((UInt2Vector) vector).get(rowId));
  }

  @Override
  public long getLong(int rowId) {
    if (vector instanceof TimeStampVector t) {
      long value = t.get(rowId);
      return perMicro < 0 ? value * -perMicro : Math.floorDiv(value, perMicro);
    }
    return Integer.toUnsignedLong(((UInt4Vector) vector).get(rowId));
  }

  @Override
  public float getFloat(int rowId) {
    return ((Float2Vector) vector).getValueAsFloat(rowId);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    long raw = ((UInt8Vector) vector).get(rowId);
    BigInteger unsigned = new BigInteger(Long.toUnsignedString(raw));
    return Decimal.apply(new java.math.BigDecimal(unsigned), ((DecimalType) type).precision(), 0);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return ((FixedSizeBinaryVector) vector).get(rowId);
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw unsupported();
  }

  @Override
  public byte getByte(int rowId) {
    throw unsupported();
  }

  @Override
  public double getDouble(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    throw unsupported();
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw unsupported();
  }

  private UnsupportedOperationException unsupported() {
    return new UnsupportedOperationException(
        "plateau-url: " + vector.getField() + " read as " + type.simpleString());
  }
}
