import { describe, expect, it } from 'vitest';
import { writableBlockMounts } from '../../src/snapshot/filesystems.js';

const MOUNTINFO = [
  '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard',
  '42 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw,discard',
  '50 27 254:16 / /mnt/data\\040disk rw,noatime - xfs /dev/vdb rw',
  '51 27 254:32 / /mnt/ro ro,relatime - ext4 /dev/vdc ro',
  '52 27 254:48 / /mnt/remounted ro - ext4 /dev/vdd rw',
  '60 27 0:25 / /run rw,nosuid - tmpfs tmpfs rw',
  '61 27 0:6 / /dev rw - devtmpfs udev rw',
  '62 27 0:50 / /var/lib/docker/overlay rw - overlay overlay rw',
  '63 27 0:24 / /proc rw - proc proc rw',
  '',
].join('\n');

describe('writableBlockMounts', () => {
  it('lists each writable block-device filesystem once, deepest mount point first, with escaped names decoded', () => {
    expect(writableBlockMounts(MOUNTINFO)).toEqual([
      { path: '/mnt/data disk', device: '254:16', type: 'xfs' },
      { path: '/', device: '254:0', type: 'ext4' },
    ]);
  });

  it('leaves out read-only mounts, tmpfs, devtmpfs, overlay and proc: nothing on a disk to keep consistent', () => {
    const paths = writableBlockMounts(MOUNTINFO).map((mount) => mount.path);
    for (const path of ['/mnt/ro', '/mnt/remounted', '/run', '/dev', '/var/lib/docker/overlay', '/proc', '/run/netns']) expect(paths).not.toContain(path);
  });
});
