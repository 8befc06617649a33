package io.plateau.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * A query's filters on {@code _partition} and {@code _index}, applied to the planned slices
 * so that {@code df.where("_index >= 1000")} fetches only those pages, as the Python reader
 * does ({@code plateau.spark.pushdown}). Python planned from the options alone; a filter in
 * the query reaches only the JVM.
 *
 * <p>Spark evaluates every filter again on what is read, so narrowing only has to keep
 * every row that can match. Filters on {@code time} are left to Spark: indexes are what a
 * slice holds, and which index a time falls at is known only to the node.
 */
final class Narrowing {
  private Set<String> partitions; // null: any
  private long from = Long.MIN_VALUE; // inclusive
  private long until = Long.MAX_VALUE; // exclusive
  private final List<Filter> used = new ArrayList<>();

  /** Takes {@code f} if it narrows what is read; whether it did. */
  boolean take(Filter f) {
    boolean took = partition(f) || index(f);
    if (took) {
      used.add(f);
    }
    return took;
  }

  Filter[] used() {
    return used.toArray(new Filter[0]);
  }

  private boolean partition(Filter f) {
    Set<String> keep = new HashSet<>();
    if (f instanceof EqualTo eq && eq.attribute().equals(Columns.PARTITION)) {
      keep.add(String.valueOf(eq.value()));
    } else if (f instanceof In in && in.attribute().equals(Columns.PARTITION)) {
      for (Object v : in.values()) {
        if (v != null) {
          keep.add(String.valueOf(v));
        }
      }
    } else {
      return false;
    }
    if (partitions != null) {
      keep.retainAll(partitions);
    }
    partitions = keep;
    return true;
  }

  private boolean index(Filter f) {
    if (f instanceof GreaterThan g && isIndex(g.attribute(), g.value())) {
      long v = (Long) g.value();
      from = Math.max(from, v == Long.MAX_VALUE ? v : v + 1); // MAX: no index is above it
    } else if (f instanceof GreaterThanOrEqual g && isIndex(g.attribute(), g.value())) {
      from = Math.max(from, (Long) g.value());
    } else if (f instanceof LessThan l && isIndex(l.attribute(), l.value())) {
      until = Math.min(until, (Long) l.value());
    } else if (f instanceof LessThanOrEqual l && isIndex(l.attribute(), l.value())) {
      long v = (Long) l.value();
      until = Math.min(until, v == Long.MAX_VALUE ? v : v + 1);
    } else if (f instanceof EqualTo eq && isIndex(eq.attribute(), eq.value())) {
      long v = (Long) eq.value();
      from = Math.max(from, v);
      until = Math.min(until, v == Long.MAX_VALUE ? v : v + 1);
    } else {
      return false;
    }
    return true;
  }

  private static boolean isIndex(String attribute, Object value) {
    return attribute.equals(Columns.INDEX) && value instanceof Long;
  }

  /** The tasks with their slices cut to the filters; tasks left empty are dropped. */
  List<Task> apply(List<Task> tasks) {
    if (used.isEmpty()) {
      return tasks;
    }
    List<Task> out = new ArrayList<>();
    for (Task task : tasks) {
      List<Task.Slice> kept = new ArrayList<>();
      for (Task.Slice s : task.slices) {
        long start = Math.max(s.start(), from);
        long end = Math.min(s.end(), until);
        if (start < end && (partitions == null || partitions.contains(s.partition()))) {
          kept.add(new Task.Slice(s.partition(), start, end));
        }
      }
      if (!kept.isEmpty()) {
        out.add(new Task(kept));
      }
    }
    return out;
  }
}
