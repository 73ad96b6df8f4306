package org.amqpconformance.localfs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system ({@code file:}, checksummed as {@link LocalFileSystem} is) whose raw layer sets
 * permissions through {@code java.nio} rather than by starting a {@code chmod} process, which is what
 * {@link RawLocalFileSystem#setPermission} does when Hadoop's native library is not loaded. Everything else
 * is Hadoop's own. Spark uses it when {@code spark.hadoop.fs.file.impl} names this class.
 */
public class ChmodlessLocalFileSystem extends LocalFileSystem {

  public ChmodlessLocalFileSystem() {
    super(new Raw());
  }

  /** {@link RawLocalFileSystem} with {@link #setPermission} done in-process. */
  public static class Raw extends RawLocalFileSystem {

    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
      PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    /**
     * Sets {@code permission} on {@code p} as {@code chmod} would. A mode beyond the nine read, write and
     * execute bits (the sticky bit), which {@code java.nio} cannot set, is left to Hadoop's own way.
     */
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      int mode = permission.toShort();
      if ((mode & ~0777) != 0) {
        super.setPermission(p, permission);
        return;
      }
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int bit = 0; bit < BITS.length; bit++) {
        if ((mode & (1 << bit)) != 0) {
          set.add(BITS[bit]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    }
  }
}
