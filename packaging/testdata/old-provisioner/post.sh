#!/bin/sh
# as the Choria Provisioner's %post: presets on first install, then daemon-reload and
# try-restart on every install (so a downgrade to it restarts the service as the old one)
first=""
if [ "$1" = 1 ] || { [ "$1" = configure ] && [ -z "$2" ]; }; then first=1; fi
if [ -n "$first" ]; then
  systemctl --no-reload preset choria-provisioner >/dev/null 2>&1 || :
fi
systemctl --system daemon-reload >/dev/null 2>&1 || :
systemctl try-restart choria-provisioner >/dev/null 2>&1 || :
exit 0
