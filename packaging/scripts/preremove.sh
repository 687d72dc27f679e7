#!/bin/sh
# Before the files are removed (deb prerm: remove|upgrade|...; rpm %preun: 0 erase, 1 upgrade).
# Only a removal stops and disables the service; configuration, state, log and user stay.
set -e

case "$1" in
  remove|0) ;;
  *) exit 0 ;;
esac

unit=choria-provisioner.service
if [ -d /run/systemd/system ]; then
  systemctl stop "$unit" >/dev/null 2>&1 || :
fi
systemctl --no-reload disable "$unit" >/dev/null 2>&1 || :

# rpm removes the log it owns (as a ghost) on erase; a second name keeps it (postremove puts it back)
log=/var/log/choria-provisioner.log
if [ "$1" = 0 ] && [ -f "$log" ] && [ ! -e "$log.rpm-keep" ]; then
  ln "$log" "$log.rpm-keep"
fi
exit 0
