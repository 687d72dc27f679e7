#!/bin/sh
# After the files are unpacked (deb postinst: configure [OLD-VERSION]; rpm %post: 1 install,
# 2 upgrade). Installing never enables or starts the service beyond the site's systemd presets
# (the example configuration needs the site's helper, Temporal and codec key first); an upgrade
# never changes whether it is enabled; an upgrade restarts a running service of this package, but
# leaves a running Choria Provisioner (the package this one replaces, which ran as root) alone
# until the site has finished the switch (docs/deployment.md) and restarts it.
set -e

case "$1" in
  configure) if [ -z "$2" ]; then action=install; else action=upgrade; fi ;;
  1) action=install ;;
  2) action=upgrade ;;
  *) exit 0 ;;
esac

user=choria-provisioner
unit=choria-provisioner.service
log=/var/log/choria-provisioner.log

# The log file stays where the Choria Provisioner kept it; the service must be able to write it
# (the unit makes only this file and the state directory writable).
if [ -e "$log.dpkg-keep" ]; then
  if [ -e "$log" ]; then rm -f "$log.dpkg-keep"; else mv "$log.dpkg-keep" "$log"; fi
fi
if [ ! -e "$log" ]; then
  : >"$log"
  chmod 0640 "$log"
fi
chown "$user:$user" "$log"

# the state directory is the service user's, also when an older package made it root's
chown "$user:$user" /var/lib/choria-provisioner
chmod 0750 /var/lib/choria-provisioner

running=""
if [ -d /run/systemd/system ]; then
  # before daemon-reload systemd still holds the unit it is running: ours has User=choria-provisioner
  running=$(systemctl show --property=User --value "$unit" 2>/dev/null || :)
  systemctl daemon-reload >/dev/null 2>&1 || :
fi

if [ "$action" = install ]; then
  systemctl --no-reload preset "$unit" >/dev/null 2>&1 || :
  echo "choria-provisioner: configure /etc/choria-provisioner/choria-provisioner.yaml and choria.cfg, run" \
    "'choria-provisioner check', then 'systemctl enable --now choria-provisioner'" >&2
elif [ -d /run/systemd/system ]; then
  if [ "$running" = "$user" ]; then
    systemctl try-restart "$unit" >/dev/null 2>&1 || :
  elif systemctl is-active --quiet "$unit" 2>/dev/null; then
    echo "choria-provisioner: the running service is the Choria Provisioner (it runs as '${running:-root}')" \
      "and was left running. To finish the switch: add the temporal section and its codec key file to" \
      "/etc/choria-provisioner/choria-provisioner.yaml, let group $user read the files it names," \
      "run 'choria-provisioner check' and 'choria-provisioner setup', then 'systemctl restart choria-provisioner'" \
      "(/usr/share/doc/choria-provisioner/deployment.md)." >&2
  fi
fi
exit 0
