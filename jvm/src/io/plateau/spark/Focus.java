package io.plateau.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The data focus a read sends the node ({@code dataset[]}, {@code dataset.exclude[]}): the
 * user's own (options dataset, dataset.exclude), else the data columns the query reads.
 *
 * @param projection whether {@code dataset} is the query's columns (when the node refuses
 *     it, for rows that lack a column added later, the reader asks for the rows whole)
 */
record Focus(List<String> dataset, List<String> exclude, boolean projection)
    implements Serializable {

  static Focus of(ReadSpec spec, StructType schema) {
    if (spec.userFocus()) {
      return new Focus(spec.dataset, spec.datasetExclude, false);
    }
    return new Focus(projection(schema, spec), List.of(), true);
  }

  /**
   * The data columns the query reads: the node sends only those. None (a count): the one
   * column Python named as cheapest to send. All of them: no focus (it is not free).
   */
  private static List<String> projection(StructType schema, ReadSpec spec) {
    List<String> wanted = new ArrayList<>();
    for (StructField f : schema.fields()) {
      if (!f.name().equals(Columns.PARTITION) && !f.name().equals(Columns.INDEX)) {
        wanted.add(f.name());
      }
    }
    if (wanted.isEmpty()) {
      return spec.countColumn == null ? List.of() : List.of(spec.countColumn);
    }
    return wanted.size() == spec.dataColumns ? List.of() : List.copyOf(wanted);
  }

  @Override
  public String toString() {
    if (projection) {
      return dataset.isEmpty() ? "columns=all" : "columns=" + dataset;
    }
    return "dataset=" + dataset + " dataset.exclude=" + exclude;
  }
}
