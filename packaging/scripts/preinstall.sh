#!/bin/sh
# Before the files are unpacked (deb preinst: install|upgrade; rpm %pre: 1|2): the service user
# and group, which own the state directory and can read the configuration. Never removed: files
# on the host may still belong to them.
set -e

case "$1" in
  install|upgrade|1|2) ;;
  *) exit 0 ;;
esac

user=choria-provisioner
if ! getent group "$user" >/dev/null 2>&1; then
  groupadd --system "$user"
fi
if ! getent passwd "$user" >/dev/null 2>&1; then
  shell=/usr/sbin/nologin
  [ -x "$shell" ] || shell=/sbin/nologin
  useradd --system --gid "$user" --home-dir /var/lib/choria-provisioner --no-create-home \
    --shell "$shell" --comment "Choria Provisioner" "$user"
fi

# dpkg deletes the files an older package had and this one has not: a log the old package owned
# (a Choria Provisioner deb) would go. A second name keeps it (postinstall puts it back); the rpm
# owns the log as a ghost instead, which keeps it.
log=/var/log/choria-provisioner.log
if [ "$1" = upgrade ] && [ -f "$log" ] && [ ! -e "$log.dpkg-keep" ]; then
  ln "$log" "$log.dpkg-keep"
fi
exit 0
