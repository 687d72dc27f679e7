#!/bin/sh
# After the files are removed or replaced (deb postrm; rpm %postun): systemd forgets the unit.
# Configuration, state (/var/lib/choria-provisioner), the log and the user are left in place
# (dpkg --purge removes the configuration files, as it does for every package; rpm would remove
# the log, which preremove keeps under a second name for this script to put back).
set -e
log=/var/log/choria-provisioner.log
if [ "$1" = 0 ] && [ -e "$log.rpm-keep" ]; then
  if [ -e "$log" ]; then rm -f "$log.rpm-keep"; else mv "$log.rpm-keep" "$log"; fi
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
fi
exit 0
