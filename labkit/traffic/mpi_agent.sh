#!/bin/sh
# Open MPI's launch agent in a labkit fabric (mpirun's plm_rsh_agent; labkit.traffic.programs).
# mpirun calls it as it would call ssh, `mpi_agent.sh HOST COMMAND...`, to start its daemon
# (orted) on HOST, a host's address on the emulated fabric. $LABKIT_MPI_HOSTS lists, one
# line per host, its address, the pid of a process in its network namespace (the node's
# shell), its cgroup's cgroup.procs (through labkit's /proc/PID/root: a node has a /sys of
# its own) and a session directory of its own (TMPDIR: the hosts share one hostname and
# one /tmp, where Open MPI's session directories would collide). The agent joins the
# cgroup, so the daemon and the ranks it starts are the host's rank as the job marker and
# teardown know it, then runs COMMAND in the node's network and mount namespaces through a
# shell, as sshd would. A shell script, not Python: it runs once per host, at once.
set -eu
host=$1
shift
while read -r address pid procs session; do
  if [ "$address" = "$host" ]; then
    echo $$ > "$procs"
    mkdir -p "$session"
    export TMPDIR="$session"
    # its own UTS namespace named by its address: Open MPI 5 takes daemons that share a
    # host name for one node (labkit.traffic.programs.NAMED)
    exec nsenter --target "$pid" --net --mount -- unshare --uts -- /bin/sh -c \
      'echo "$0" > /proc/sys/kernel/hostname && exec /bin/sh -c "$1"' "$host" "$*"
  fi
done < "$LABKIT_MPI_HOSTS"
echo "labkit's MPI agent: $host is not a host of this run (in $LABKIT_MPI_HOSTS)" >&2
exit 1
