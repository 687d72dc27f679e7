#!/usr/bin/env bash
# make bench: the embedded dev stack (Temporal dev server on a WAL SQLite file, broker,
# provisioner with every step a regular activity), a simulated fleet (choria-provisioner
# fleet-sim) and the compiled example helper. Reports hosts/s from the first sighting to the
# last host configured, CPU seconds per host of the provisioner and of the Temporal server, and
# their peak RSS. Writes docs/performance-results.json. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${BENCH_HOSTS:-500}
B=$PWD/.bin/choria-provisioner
dir=$(mktemp -d /tmp/choria-bench.XXXXXX)
trap 'pkill -INT -f "dev --dir $dir" || true; pkill -f "fleet-sim --broker" || true; sleep 2; rm -rf "$dir"' EXIT

"$B" dev --dir "$dir" --servers 0 --ui-port 0 --temporal-port 17299 --monitor-port 19499 --codec-port 18099 > "$dir/dev.out" 2>&1 &
for _ in $(seq 1 60); do [ -f "$dir/client.conf" ] && grep -q "Press Ctrl-C" "$dir/dev.out" && break; sleep 0.5; done
url=$(grep middleware_hosts "$dir/client.conf" | awk '{print $3}')
tok=$(head -1 "$dir/credentials/secrets")
devpid=$(pgrep -f "dev --dir $dir" | head -1)
tpid=$(pgrep -f "temporal server start-dev --ip 127.0.0.1 --port 17299" | head -1)
cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
rss() { awk '/VmHWM/ {print $2/1024}' "/proc/$1/status"; }
c0=$(cpu "$devpid"); t0=$(cpu "$tpid")
start=$(date +%s.%N)
"$B" fleet-sim --broker "$url" --provisioning-jwt "$dir/credentials/provisioning.jwt" --token "$tok" --count "$N" --status "$dir/sim.json" > "$dir/sim.out" 2>&1 &
n=0
for _ in $(seq 1 3600); do
  sleep 0.5
  n=$(python3 -c "import json; d=json.load(open('$dir/sim.json')); print(sum(1 for h in d['hosts'].values() if h['configured']))" 2>/dev/null || echo 0)
  [ "$n" = "$N" ] && break
done
end=$(date +%s.%N)
c1=$(cpu "$devpid"); t1=$(cpu "$tpid")
python3 - "$N" "$n" "$start" "$end" "$c0" "$c1" "$t0" "$t1" "$(rss "$devpid")" "$(rss "$tpid")" <<'PY'
import json, sys, platform, os
N, n, start, end, c0, c1, t0, t1, prss, trss = sys.argv[1:]
N, n = int(N), int(n)
secs = float(end) - float(start)
res = {"hosts": N, "configured": n, "seconds": round(secs, 1), "hosts_per_second": round(n / secs, 2),
       "provisioner_cpu_ms_per_host": round((float(c1) - float(c0)) * 1000 / max(n, 1), 1),
       "temporal_cpu_ms_per_host": round((float(t1) - float(t0)) * 1000 / max(n, 1), 1),
       "provisioner_peak_rss_mib": round(float(prss)), "temporal_peak_rss_mib": round(float(trss)),
       "machine": f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"}
print(json.dumps(res, indent=2))
json.dump(res, open("docs/performance-results.json", "w"), indent=2)
PY
