#!/bin/sh
# Gaps in a never-yielding thread on each CPU (scripts/vcpu-stalls.c), with the
# kernel's real-time throttle lifted for the run and put back after it, even
# on Ctrl-C. Usage: scripts/vcpu-stalls.sh [SECONDS per CPU, default 60]
set -eu
secs=${1:-60}
dir=$(dirname "$0")
bin=${TMPDIR:-/tmp}/mup-vcpu-stalls.$$
command -v pkill >/dev/null || { echo "vcpu-stalls: needs pkill (Debian package procps)" >&2; exit 1; }
cc -O2 -Wall -o "$bin" "$dir/vcpu-stalls.c"
old=$(cat /proc/sys/kernel/sched_rt_runtime_us)
restore() {
	# Ignore a second Ctrl-C: it would end the shell here, before anything is put back.
	trap '' INT TERM
	echo "$old" > /proc/sys/kernel/sched_rt_runtime_us
	# Kill and reap every child of this shell: the measuring thread, also one
	# started just before the signal came and one that is stopped. Reaped here,
	# not left to init, it is gone by the time this script has exited.
	pkill -KILL -P $$ || true
	wait
	rm -f "$bin"
}
trap restore EXIT
trap 'exit 130' INT TERM
echo -1 > /proc/sys/kernel/sched_rt_runtime_us
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); steal before: $(awk '/^cpu /{print $9}' /proc/stat) ticks"
for cpu in $(seq 0 $(($(nproc) - 1))); do
	# In the background and waited for: a signal ends the wait at once (the trap runs).
	"$bin" "$cpu" "$secs" &
	wait $!
done
echo "steal after: $(awk '/^cpu /{print $9}' /proc/stat) ticks (USER_HZ); a veth ring holds 256 frames: at R frames/s a gap longer than 256/R s overflows it (0.77 ms at 0.33 Mpps)"
