#!/bin/busybox sh
# The guest's /init (built into the initramfs by rig::vm::bundle): mounts the kernel's
# filesystems, loads the modules listed in /modules/order, brings up user-mode
# networking (10.0.2.15, the host as 10.0.2.2), mounts /dev/vda (ext4) at /mnt and
# runs `plugpull` with the kernel command line's settings:
#   plugpull.args=A,B,C      the arguments, commas for spaces (no command: just boot)
#   plugpull.end=hang        after the command: wait for the power cut (default)
#   plugpull.end=poweroff    after the command: unmount /mnt and power off
#   plugpull.shutdown=SECS   a clean shutdown SECS after the command started: SIGKILL
#                            it (as a shutdown's last kill), sync, unmount, power off
#   plugpull.hostname=NAME   the guest's host name (default: /etc/hostname, plugpull-vm),
#                            which its runs and reports name
#   plugpull.pgdata=DIR      before the command: start PostgreSQL (the bundle's, its
#                            binary directory in /etc/plugpull-pgbin) on the cluster in
#                            DIR as user postgres, socket /tmp port 5432, no TCP; wait
#                            until it accepts connections (its log goes to the console)
# Every step prints one `plugpull-vm: ...` line on the console (ttyS0).
/bin/busybox mkdir -p /proc /sys /dev /tmp /mnt /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo "plugpull-vm: kernel up after $(cut -d' ' -f1 /proc/uptime) s"
for m in $(cat /modules/order); do
    insmod "/modules/$m.ko" || echo "plugpull-vm: insmod $m failed"
done
args=""; end=hang; shutdown=""; pgdata=""
hostname -F /etc/hostname
for w in $(cat /proc/cmdline); do
    case "$w" in
        plugpull.args=*) args=$(echo "${w#plugpull.args=}" | tr , ' ');;
        plugpull.end=*) end="${w#plugpull.end=}";;
        plugpull.shutdown=*) shutdown="${w#plugpull.shutdown=}";;
        plugpull.hostname=*) hostname "${w#plugpull.hostname=}";;
        plugpull.pgdata=*) pgdata="${w#plugpull.pgdata=}";;
    esac
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
mount -t ext4 /dev/vda /mnt || { echo "plugpull-vm: cannot mount /dev/vda"; poweroff -f; }
echo "plugpull-vm: booted in $(cut -d' ' -f1 /proc/uptime) s"
if [ -n "$pgdata" ]; then
    mkdir -p /dev/shm
    mount -t tmpfs -o mode=1777 tmpfs /dev/shm
    chmod 1777 /tmp
    su -s /bin/sh -c "exec $(cat /etc/plugpull-pgbin)/postgres -D $pgdata -k /tmp -p 5432 -c listen_addresses=''" postgres &
    n=0
    until grep -q ready "$pgdata/postmaster.pid" 2>/dev/null || [ $n -ge 600 ]; do
        sleep 0.2; n=$((n + 1))
    done
    echo "plugpull-vm: postgres ready after $(cut -d' ' -f1 /proc/uptime) s"
fi
finish() {
    sync
    umount /mnt && echo "plugpull-vm: unmounted /mnt"
    echo "plugpull-vm: power off"
    poweroff -f
}
if [ -n "$args" ]; then
    /bin/plugpull $args &
    pid=$!
    if [ -n "$shutdown" ]; then
        sleep "$shutdown"
        echo "plugpull-vm: clean shutdown"
        kill -9 "$pid"
        wait "$pid"
        finish
    fi
    wait "$pid"
    echo "plugpull-vm: plugpull exited with status $?"
fi
if [ "$end" = poweroff ]; then
    finish
fi
echo "plugpull-vm: waiting for the power cut"
while true; do sleep 3600; done
