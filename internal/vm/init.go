package vm

// initScript is the initramfs's /init: load the modules, mount the host's /
// read-only under a tmpfs overlay, switch to it and run stage two there.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mod/order); do
	insmod /mod/$m 2>/dev/null || echo "cistern-vm: insmod $m failed"
done
mount -t virtiofs -o ro host /host || { echo "cistern-vm: cannot mount the host (virtiofs)"; poweroff -f; }
mount -t tmpfs -o size=80% tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot || { echo "cistern-vm: overlay failed"; poweroff -f; }
mkdir -p /newroot/results
mount -t virtiofs results /newroot/results || echo "cistern-vm: cannot mount the results directory"
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh -c "$(cat /stage2 2>/dev/null || echo 'echo no stage2')"
`

// stage2 runs in the host's file system (read-only, overlaid): the usual
// mounts, loopback up, the script, its exit code, power off. The scratch
// disk is TMPDIR at /cistern-scratch, not /tmp: mounted on /tmp it hid a
// clone of the repository under the host's /tmp (see GuestMounts).
const stage2 = `mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mkdir -p /cistern-scratch
mount -t ext4 /dev/vda /cistern-scratch 2>/dev/null || mount -t tmpfs tmpfs /cistern-scratch
chmod 1777 /cistern-scratch
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /run/lock
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
hostname cistern-vm
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root CISTERN_VM=1 TMPDIR=/cistern-scratch
cd /results
echo "cistern-vm: running $(uname -r)"
/bin/sh /results/run.sh > /dev/console 2>&1
echo $? > /results/exit-code
sync
echo "cistern-vm: done"
echo o > /proc/sysrq-trigger
sleep 10
`
