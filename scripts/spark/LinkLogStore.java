/*
 * Delta Lake's log store for local files, safe with several writing JVMs.
 *
 * Built by `python -m spark.jars` (make spark-jars) into the jar cache and set as
 * spark.delta.logStore.file.impl by spark/session.py; nothing to run by hand.
 *
 * A Delta commit is the creation of _delta_log/<version>.json, which must fail when the file
 * already exists (another writer took that version). Delta's own store for file: paths checks
 * existence and then renames, which RawLocalFileSystem does with overwrite, under a lock of one
 * JVM only. The lake job and `make lake-optimize` / `make lake-vacuum` are two JVMs on one
 * table, so two commits of the same version could both "succeed" and one would be silently
 * replaced. Here the new version is written to a temporary file and published with link(2)
 * (Files.createLink), which the kernel refuses atomically when the name exists: exactly one
 * writer gets a version, the other gets FileAlreadyExistsException and Delta retries it on the
 * next version after checking for conflicts.
 */
package dedupe.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

public class LinkLogStore extends HadoopFileSystemLogStore {

  public LinkLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (!(fs instanceof RawLocalFileSystem || fs instanceof LocalFileSystem)) {
      writeWithRename(path, actions, overwrite, hadoopConf);  // not a local file: Delta's way
      return;
    }
    java.nio.file.Path target = java.nio.file.Paths.get(fs.makeQualified(path).toUri());
    java.nio.file.Path temp =
        target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      try (FileChannel channel =
              FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
          OutputStream out = java.nio.channels.Channels.newOutputStream(channel)) {
        while (actions.hasNext()) {
          out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        out.flush();
        channel.force(true);  // the commit is durable before it is visible
      }
      if (overwrite) {
        Files.move(temp, target, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
            java.nio.file.StandardCopyOption.ATOMIC_MOVE);
      } else {
        try {
          Files.createLink(target, temp);  // atomic; fails if target exists
        } catch (FileAlreadyExistsException e) {
          throw new FileAlreadyExistsException(path.toString());
        }
      }
    } finally {
      Files.deleteIfExists(temp);
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    // Files that Delta writes without this store (Parquet checkpoints) are visible while
    // being written on a local disk, so Delta must write those to a temporary name first.
    return true;
  }
}
