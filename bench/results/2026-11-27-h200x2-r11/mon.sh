#!/bin/bash
# Every 5 s: the coordinator's and its writer process's CPU time per thread, into $1.
while true; do
  echo "== $(date -u +%T)"
  for p in $(pgrep -f "ringleader coordinator") $(pgrep -f "coordinator.store.sqlite_writer"); do
    echo "pid $p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-80) rss_kb $(awk '/VmRSS/{print $2}' /proc/$p/status)"
    for t in /proc/$p/task/*; do echo "  $(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort -k2 -n -r | head -6
  done
  sleep 5
done >> "$1" 2>&1
