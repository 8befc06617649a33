package io.plateau.spark;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: consecutive index slices, read in order by one {@link PageReader}. */
final class Task implements InputPartition {
  private static final long serialVersionUID = 1L;

  /** Indexes {@code [start, end)} of one partition. */
  record Slice(String partition, long start, long end) implements Serializable {}

  final List<Slice> slices;

  Task(List<Slice> slices) {
    this.slices = List.copyOf(slices);
  }
}
