#!/bin/sh
# erase only (rpm 0, deb remove)
if [ "$1" = 0 ] || [ "$1" = remove ]; then
  systemctl --no-reload disable --now choria-provisioner >/dev/null 2>&1 || :
fi
exit 0
