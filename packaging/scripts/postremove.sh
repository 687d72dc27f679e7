#!/bin/sh
# After the files are removed or replaced (deb postrm; rpm %postun): systemd forgets the unit.
# Configuration, state (/var/lib/choria-provisioner), the log and the user are left in place
# (dpkg --purge removes the configuration files, as it does for every package).
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
fi
exit 0
