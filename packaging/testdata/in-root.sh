#!/usr/bin/env bash
# in-root.sh DIR CMD [ARGS...]: runs CMD chrooted into DIR/root, the throwaway system root the
# package test builds: the host's /usr as the read-only lower layer of an overlay (so sh, dpkg,
# rpm, useradd, systemctl and setpriv are there, and whatever a package installs under /usr lands
# in DIR/upper), with /etc, /var, /run and /tmp of its own. The mounts are made in a private mount
# namespace and go away with the command; nothing on the host changes.
set -euo pipefail
exec unshare --mount --propagation private /bin/bash -c '
  set -e
  dir=$1; shift
  root=$dir/root
  mount -t overlay overlay -o "lowerdir=/usr,upperdir=$dir/upper,workdir=$dir/work" "$root/usr"
  mount --bind /dev "$root/dev"
  mount -t proc proc "$root/proc"
  exec chroot "$root" "$@"
' in-root "$@"
