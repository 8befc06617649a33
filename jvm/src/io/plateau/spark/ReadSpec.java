package io.plateau.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * What Python planned: where the node is, which topic, and the tasks. Options are written
 * by {@code plateau.spark.url_jvm} (never by users), so a missing one is a bug there and
 * fails with the option's name.
 */
final class ReadSpec implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();

  final String url;
  final String token; // null: no Authorization header
  final String topic;
  final int pageRows;
  final boolean failOnDataLoss;
  /** The user's data focus (options dataset, dataset.exclude); null: none, prune instead. */
  final List<String> dataset;
  final List<String> datasetExclude;
  /** The driver's alone (planning): not shipped to executors with every task's reader. */
  final transient List<Task> tasks;
  /** How many data columns the table has: a read of all of them sends no focus. */
  final int dataColumns;
  /** The column a read of no data columns (a count) asks for; null: none. */
  final String countColumn;

  private ReadSpec(
      String url,
      String token,
      String topic,
      int pageRows,
      boolean failOnDataLoss,
      List<String> dataset,
      List<String> datasetExclude,
      List<Task> tasks,
      int dataColumns,
      String countColumn) {
    this.url = url;
    this.token = token;
    this.topic = topic;
    this.pageRows = pageRows;
    this.failOnDataLoss = failOnDataLoss;
    this.dataset = dataset;
    this.datasetExclude = datasetExclude;
    this.tasks = tasks;
    this.dataColumns = dataColumns;
    this.countColumn = countColumn;
  }

  boolean userFocus() {
    return !dataset.isEmpty() || !datasetExclude.isEmpty();
  }

  static ReadSpec parse(CaseInsensitiveStringMap options) {
    try {
      List<Task> tasks = new ArrayList<>();
      for (JsonNode task : JSON.readTree(required(options, "plateau.tasks"))) {
        List<Task.Slice> slices = new ArrayList<>();
        for (JsonNode s : task) {
          slices.add(new Task.Slice(s.get(0).asText(), s.get(1).asLong(), s.get(2).asLong()));
        }
        tasks.add(new Task(slices));
      }
      return new ReadSpec(
          required(options, "url").replaceAll("/+$", ""),
          options.get("token"),
          required(options, "topic"),
          Integer.parseInt(required(options, "url.pageRows")),
          Boolean.parseBoolean(options.getOrDefault("failOnDataLoss", "true")),
          strings(options.getOrDefault("dataset", "[]")),
          strings(options.getOrDefault("dataset.exclude", "[]")),
          tasks,
          Integer.parseInt(required(options, "plateau.dataColumns")),
          options.get("plateau.countColumn"));
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException("plateau-url: a malformed plan option: " + e, e);
    }
  }

  private static List<String> strings(String json) throws java.io.IOException {
    List<String> out = new ArrayList<>();
    for (JsonNode n : JSON.readTree(json)) {
      out.add(n.asText());
    }
    return List.copyOf(out);
  }

  private static String required(CaseInsensitiveStringMap options, String name) {
    String value = options.get(name);
    if (value == null) {
      throw new IllegalArgumentException(
          "plateau-url: option '" + name + "' is missing (plan reads with plateau.spark.read_topic)");
    }
    return value;
  }
}
