package io.plateau.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A topic on a node, as planned by Python; reads prune to the columns a query needs and
 * narrow to its filters on {@code _partition} and {@code _index}.
 */
final class UrlTable implements SupportsRead {
  private final StructType schema;
  private final ReadSpec spec;

  UrlTable(StructType schema, ReadSpec spec) {
    this.schema = schema;
    this.spec = spec;
  }

  @Override
  public String name() {
    return "plateau topic " + spec.topic + " at " + spec.url;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new Builder();
  }

  private final class Builder
      implements SupportsPushDownRequiredColumns, SupportsPushDownFilters {
    private StructType required = schema;
    private final Narrowing narrowing = new Narrowing();

    /** Every filter goes back to Spark: narrowing keeps whole pages, not exact rows. */
    @Override
    public Filter[] pushFilters(Filter[] filters) {
      for (Filter f : filters) {
        narrowing.take(f);
      }
      return filters;
    }

    @Override
    public Filter[] pushedFilters() {
      return narrowing.used();
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    @Override
    public UrlScan build() {
      return new UrlScan(required, spec, narrowing.apply(spec.tasks), narrowing.used());
    }
  }
}
