package io.plateau.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Optional;

/**
 * {@code GET /topic/{t}/partition/{p}/records} as an Arrow file, the same request the
 * Python reader sends. One HTTP client per JVM: it is thread-safe and keeps connections
 * alive across tasks.
 */
final class NodeClient {
  static final String ARROW_FILE = "application/vnd.apache.arrow.file";
  // The IPC buffer codecs PageReader decodes (CommonsCompressionFactory: commons-compress's
  // LZ4 frames, zstd-jni; both in Spark's jars): a page the node stores compressed comes as
  // stored, not decompressed and copied again for this reader.
  static final String ACCEPT_COMPRESSION = "x-accept-arrow-compression";
  static final String READ_CODECS = "lz4_frame, zstd";
  private static final Duration TIMEOUT = Duration.ofSeconds(60);
  private static final int ATTEMPTS = 3;
  private static final HttpClient HTTP =
      HttpClient.newBuilder()
          .version(HttpClient.Version.HTTP_1_1)
          .connectTimeout(Duration.ofSeconds(10))
          .build();

  /** A page: its Arrow file, and the index span it covers (absent: nothing left to read). */
  record Page(byte[] body, boolean hasSpan, long spanStart, long spanEnd) {}

  /** The node refused the request (HTTP 400): a focus on a column these rows lack. */
  static final class Refused extends IOException {
    Refused(String message) {
      super(message);
    }
  }

  private final ReadSpec spec;

  NodeClient(ReadSpec spec) {
    this.spec = spec;
  }

  Page read(String partition, long start, int limit, List<String> dataset, List<String> exclude)
      throws IOException, InterruptedException {
    StringBuilder uri = new StringBuilder(spec.url);
    uri.append("/topic/").append(segment(spec.topic));
    uri.append("/partition/").append(segment(partition));
    uri.append("/records?start=").append(start).append("&page_size=").append(limit);
    for (String d : dataset) {
      uri.append("&dataset%5B%5D=").append(query(d));
    }
    for (String d : exclude) {
      uri.append("&dataset.exclude%5B%5D=").append(query(d));
    }
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(uri.toString()))
            .timeout(TIMEOUT)
            .header("accept", ARROW_FILE)
            .header(ACCEPT_COMPRESSION, READ_CODECS)
            .header("user-agent", "plateau-spark-jvm");
    if (spec.token != null && !spec.token.isEmpty()) {
      request.header("authorization", "Bearer " + spec.token);
    }
    HttpResponse<byte[]> reply = send(request.GET().build());
    int status = reply.statusCode();
    if (status == 400) {
      throw new Refused(text(reply));
    }
    if (status != 200) {
      throw new IOException(
          "plateau node at " + spec.url + " answered " + status + " to " + uri + ": " + text(reply));
    }
    Optional<String> lo = reply.headers().firstValue("x-span-start");
    Optional<String> hi = reply.headers().firstValue("x-span-end");
    if (lo.isPresent() && hi.isPresent()) {
      return new Page(reply.body(), true, Long.parseLong(lo.get()), Long.parseLong(hi.get()));
    }
    return new Page(reply.body(), false, start, start);
  }

  /** Retries a connection refused or dropped (a restarting node, an idle connection closed). */
  private static HttpResponse<byte[]> send(HttpRequest request)
      throws IOException, InterruptedException {
    IOException last = null;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
      if (attempt > 0) {
        Thread.sleep(100L << (2 * attempt)); // 0.4 s, then 1.6 s
      }
      try {
        return HTTP.send(request, HttpResponse.BodyHandlers.ofByteArray());
      } catch (java.net.http.HttpConnectTimeoutException e) {
        last = e;
      } catch (java.net.http.HttpTimeoutException e) {
        throw new IOException(
            "the plateau node did not answer within " + TIMEOUT.toSeconds() + " s: " + request.uri(),
            e);
      } catch (IOException e) {
        last = e; // refused, reset, or a kept-alive connection the node had closed: a GET repeats
      }
    }
    throw new IOException("cannot reach the plateau node: " + request.uri() + ": " + last, last);
  }

  private static String text(HttpResponse<byte[]> reply) {
    String body = new String(reply.body(), StandardCharsets.UTF_8);
    return body.length() > 500 ? body.substring(0, 500) + "..." : body;
  }

  private static String segment(String name) {
    return URLEncoder.encode(name, StandardCharsets.UTF_8).replace("+", "%20");
  }

  private static String query(String value) {
    return URLEncoder.encode(value, StandardCharsets.UTF_8);
  }
}
