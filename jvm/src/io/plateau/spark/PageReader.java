package io.plateau.spark;

import java.io.IOException;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.ipc.SeekableReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowBlock;
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task's slices, page by page, as columnar batches.
 *
 * <p>Reads go by index, as the Python reader's do: a page's span (headers {@code
 * x-span-start}/{@code x-span-end}) says which indexes it holds, and a span that starts past
 * the index asked for means retention deleted the ones between ({@code failOnDataLoss}).
 *
 * <p>Threads: the task's thread parses pages and hands batches to Spark; one daemon thread
 * ({@code ahead}) fetches the next page meanwhile. They share only the {@link Future} of
 * that page, and no lock: the next request is known from the current page's span (its
 * headers), before its body is parsed. {@link #close} cancels the fetch and stops the
 * thread, so a query that stops early (a {@code limit}) leaves nothing running.
 */
final class PageReader implements PartitionReader<ColumnarBatch> {
  private static final Logger LOG = LoggerFactory.getLogger(PageReader.class);

  private record Fetched(int slice, long position, NodeClient.Page page) {}

  private final ReadSpec spec;
  private final List<Task.Slice> slices;
  private final NodeClient client;
  private final ExecutorService ahead;
  private final BufferAllocator allocator;
  private final Columns columns;
  private final List<String> dataset;
  private final List<String> exclude;
  /** Only the ahead thread reads and writes this: false once the node refused the projection. */
  private boolean projecting;

  private Future<Fetched> pending;
  private ArrowFileReader file;
  private Iterator<ArrowBlock> blocks;
  private String partition;
  private long first;
  private long rowsLeft;
  private ColumnarBatch batch;

  PageReader(ReadSpec spec, StructType schema, Focus focus, Task task) {
    this.spec = spec;
    this.slices = task.slices;
    this.client = new NodeClient(spec);
    this.columns = new Columns(schema, spec.topic, spec.pageRows);
    this.dataset = focus.dataset();
    this.exclude = focus.exclude();
    this.projecting = focus.projection() && !dataset.isEmpty();
    this.allocator = ArrowUtils.rootAllocator().newChildAllocator("plateau-url", 0, Long.MAX_VALUE);
    this.ahead =
        Executors.newSingleThreadExecutor(
            r -> {
              Thread t = new Thread(r, "plateau-url-ahead");
              t.setDaemon(true);
              return t;
            });
    request(0, slices.isEmpty() ? 0 : slices.get(0).start());
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (file != null) {
        while (blocks.hasNext()) {
          file.loadRecordBatch(blocks.next());
          int rows = (int) Math.min(file.getVectorSchemaRoot().getRowCount(), rowsLeft);
          if (rows > 0) {
            batch = columns.batch(file.getVectorSchemaRoot(), partition, first, rows);
            first += rows;
            rowsLeft -= rows;
            return true;
          }
        }
        file.close();
        file = null;
      }
      if (pending == null) {
        return false;
      }
      Fetched got = await();
      Task.Slice slice = slices.get(got.slice());
      NodeClient.Page page = got.page();
      long position = got.position();
      if (!page.hasSpan() || page.spanEnd() <= position) {
        lost(slice.partition(), position, slice.end());
        request(got.slice() + 1, -1);
        continue;
      }
      if (page.spanStart() > position) {
        lost(slice.partition(), position, Math.min(page.spanStart(), slice.end()));
      }
      long keep = Math.min(page.spanEnd(), slice.end()) - page.spanStart();
      long after = page.spanStart() + Math.max(keep, 0);
      if (keep > 0 && after < slice.end()) {
        request(got.slice(), after);
      } else {
        request(got.slice() + 1, -1);
      }
      if (keep <= 0) {
        continue;
      }
      file =
          new ArrowFileReader(
              new SeekableReadChannel(new ByteArrayReadableSeekableByteChannel(page.body())),
              allocator,
              CommonsCompressionFactory.INSTANCE);
      blocks = file.getRecordBlocks().iterator();
      partition = slice.partition();
      first = page.spanStart();
      rowsLeft = keep;
      columns.page(file.getVectorSchemaRoot(), partition, first);
    }
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  /** Starts fetching slice {@code index} from {@code position} (-1: the slice's start). */
  private void request(int index, long position) {
    if (index >= slices.size()) {
      pending = null;
      return;
    }
    Task.Slice slice = slices.get(index);
    long from = position < 0 ? slice.start() : position;
    pending = ahead.submit(() -> new Fetched(index, from, fetch(slice, from)));
  }

  private NodeClient.Page fetch(Task.Slice slice, long position)
      throws IOException, InterruptedException {
    int limit = (int) Math.min(spec.pageRows, slice.end() - position);
    if (projecting) {
      try {
        return client.read(slice.partition(), position, limit, dataset, exclude);
      } catch (NodeClient.Refused e) {
        projecting = false; // a declared column these rows lack (added later): read them whole
      }
    }
    List<String> focus = spec.userFocus() ? dataset : List.of(); // refused, or nothing to prune
    try {
      return client.read(slice.partition(), position, limit, focus, exclude);
    } catch (NodeClient.Refused e) {
      throw new IOException("plateau node refused a read of topic '" + spec.topic + "': " + e.getMessage());
    }
  }

  private Fetched await() throws IOException {
    try {
      return pending.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while reading from the plateau node", e);
    } catch (CancellationException e) {
      throw new IOException("the plateau read was cancelled", e);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof IOException io) {
        throw io;
      }
      if (cause instanceof RuntimeException re) {
        throw re;
      }
      throw new IOException(cause);
    } finally {
      pending = null;
    }
  }

  private void lost(String partition, long start, long end) {
    String message =
        "topic '"
            + spec.topic
            + "' partition '"
            + partition
            + "': indexes ["
            + start
            + ", "
            + end
            + ") were deleted by retention before they were read";
    if (spec.failOnDataLoss) {
      throw new IllegalStateException(
          message + " (failOnDataLoss=true; set failOnDataLoss=false to skip lost records)");
    }
    LOG.warn("{}; skipped (failOnDataLoss=false)", message);
  }

  @Override
  public void close() throws IOException {
    if (pending != null) {
      pending.cancel(true);
      pending = null;
    }
    ahead.shutdownNow();
    try {
      if (file != null) {
        file.close();
        file = null;
      }
    } finally {
      columns.close();
      allocator.close();
    }
  }
}
